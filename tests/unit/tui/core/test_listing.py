"""The windows list's rows (tui.core.listing) on recorded runs: each window's cells, the run judged
once per change of the fold whatever the list asks, and made again only when the fold changed."""

from __future__ import annotations

from typing import Any

import pytest

from engine.record.fold import apply, fold
from engine.record.journal import read_events
from engine.record.judgement import judgement
from engine.report.run import load_run
from engine.report.sections import summary
from engine.words import is_control
from tests.paths import FIXTURES
from tests.unit.tui.recorded import JOURNALS
from tui.core.listing import listed
from tui.core.rules import DEFAULT_RULE, verdict_rule
from tui.core.sorting import cell_text
from tui.core.windows import WINDOW_COLUMNS


def test_the_run_is_judged_once_per_change_of_the_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The list asked the judgement for every shape of every window (a day-long run's 800 windows:
    11 million rows read a frame, seconds of CPU a key)."""
    events = read_events(JOURNALS / "finished" / "journal.jsonl")
    state = fold(events[:-1])
    asked: list[int] = []

    def counted(*a: Any, **kw: Any) -> Any:
        asked.append(1)
        return judgement(*a, **kw)

    monkeypatch.setattr("tui.core.versus.judgement", counted)
    first = listed(state, DEFAULT_RULE, "", None)
    assert len(first.rows) == len(state.order) and len(asked) == 1
    assert listed(state, DEFAULT_RULE, "", None) is first  # a key: nothing new to list
    assert listed(state, DEFAULT_RULE, "ctx", None).keys == ["s1-ctx"] and len(asked) == 1
    apply(state, events[-1])  # the run's last event: the list is made again, and judged once
    assert listed(state, DEFAULT_RULE, "", None) is not first and len(asked) == 2


def test_the_call_column_says_the_windows_call_as_the_reports_glance_table() -> None:
    """Issue 48: the windows list had no verdict column; its status read "ruler suspect" on every
    window of the demo. The call is the window's one question, in the report's words."""
    run = FIXTURES / "runs" / "demo-smollm2"
    state = fold(read_events(run / "journal.jsonl"))
    glance = summary(load_run(run))
    head = [c.strip() for c in glance[2].strip("|").split("|")]
    said = {cells[0]: cells[head.index("the window's call")]
            for line in glance[4:] if line.startswith("|")
            for cells in ([c.strip() for c in line.strip("|").split("|")],)}
    call = WINDOW_COLUMNS.index("call")
    rows = dict(listed(state, verdict_rule(state), "", None).rows)
    assert set(said) < set(rows)
    for key, cells in rows.items():
        text = cell_text(cells[call])
        if is_control(state.windows[key].window):
            assert text == "", key  # a control's cell blank
        else:
            assert text == ("" if said[key] == "-" else said[key]), key  # "-": no call yet
    assert cell_text(rows["s1-ngram"][call]) == "undetermined (no shape with an interval)"
