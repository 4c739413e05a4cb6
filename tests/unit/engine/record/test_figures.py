"""One declaration per row figure (engine.record.figures): the row_done event, throughput.csv, the
report's reading of it and the console's reps table all follow it."""

from __future__ import annotations

import math
import typing
from pathlib import Path

from engine.record import figures
from engine.record.eventcheck import check
from engine.record.events import RowDone
from engine.record.figures import FIGURES, ROW, Figure
from engine.record.journal import read_events
from engine.record.request import RequestRecord
from tui.core.fmt import fmt_pct

FIXTURES = Path(__file__).parents[3] / "fixtures"


def test_the_row_done_event_holds_the_declared_fields_with_their_types() -> None:
    hints = typing.get_type_hints(RowDone)
    held = {f.name: f.type for f in ROW if f.journal != figures.WRITTEN}
    assert hints == held
    assert RowDone.__required_keys__ == {  # type: ignore[attr-defined]  # a TypedDict class has them
        f.name for f in ROW if f.required or f.journal == figures.SHAPE and f.name != "rate"}


def test_a_recorded_row_done_fits_the_declaration() -> None:
    rows = [e for e in read_events(FIXTURES / "journals" / "finished" / "journal.jsonl")
            if e["kind"] == "row_done"]
    assert rows
    for e in rows:
        check("row_done", {k: v for k, v in e.items() if k not in ("seq", "ts", "kind")})
        assert set(e) - {"seq", "ts", "kind"} <= set(FIGURES)


def test_every_source_is_a_request_record_field() -> None:
    fields = set(RequestRecord.__annotations__)
    assert {s for f in ROW for s in f.source} <= fields


def test_a_figure_formats_for_the_report_and_the_console() -> None:
    share = Figure("x", float, "a share", fmt=".1f %", cell=".1%")
    assert (share.text(0.1234), share.short(0.1234), share.text(None), share.short("")) == (
        "12.3 %", "12.3%", "-", "-")


def test_a_non_finite_figure_of_an_older_journal_shows_as_no_value() -> None:
    """A journal written before the writers refused non-finite numbers can hold "spread":
    Infinity (a row whose requests all failed), which json.loads reads as inf: the report's and
    the console's cells say "-" for it, as for a figure that is null, never "inf %"."""
    shown = [f for f in ROW if f.fmt or f.cell]
    assert any(f.name == "spread" for f in shown)
    for f in shown:
        for v in (math.inf, -math.inf, math.nan):
            assert (f.text(v) if f.fmt else "-") == "-", f.name
            assert (f.short(v) if f.cell else "-") == "-", f.name
    assert fmt_pct(math.inf) == fmt_pct(math.nan, signed=True) == "-"
