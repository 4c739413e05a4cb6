"""A shape whose rows are on different bases (some reps had a steady window, some had none: a
window whose requests outlast a short rep) is compared over every row's whole reps, not left
without a delta; seen on an H100, where -fa off's TTFT left its C1 reps without a steady window
and the shape where its effect was largest had no delta in either session."""

from __future__ import annotations

from typing import Any

from engine.campaign.spec import VerdictSpec
from engine.record.judgement import judgement, row_columns
from engine.record.state import RowState, RunState


def row(session: str, window: str, reps: list[float], whole: list[float] | None, basis: str) -> RowState:
    figures: dict[str, Any] = {"rep_tok_s": reps, "basis": basis}
    if whole is not None:
        figures["rep_whole_tok_s"] = whole
    return RowState(session, window, "prose", 1, None, status="ok", row=figures)


def state(window_whole: list[float] | None, control_whole: bool = True) -> RunState:
    st = RunState()
    for s, shift in (("s1", 1.0), ("s2", 1.01)):
        for w, base in (("control", 268.0), ("control-again", 266.0)):
            steady = [base * shift + d for d in (-2.0, 0.0, 2.0)]
            whole = [x - 0.5 for x in steady] if control_whole else None
            add(st, row(s, w, steady, whole, "steady"))
        reps = window_whole or [52.0, 50.0, 54.0]
        add(st, row(s, "slow", reps, window_whole, "whole"))
    return st


def add(st: RunState, r: RowState) -> None:
    st.rows[r.key] = r


def slow(st: RunState) -> RowState:
    return st.rows[row("s1", "slow", [], None, "whole").key]


def test_rows_on_different_bases_are_compared_over_their_whole_reps() -> None:
    st = state([52.0 * 1.0, 50.0, 54.0])
    j = judgement(st, VerdictSpec().rule())
    cols = row_columns(j, slow(st))
    assert cols["delta"] is not None and cols["delta"] < -0.7
    assert cols["verdict_why"].startswith("over the whole reps")
    assert cols["verdict"] == "observable effect"


def test_a_row_without_its_whole_reps_is_still_refused() -> None:
    """An older journal's rows carry no whole reps beside a steady figure: no common basis."""
    st = state([52.0, 50.0, 54.0], control_whole=False)
    cols = row_columns(judgement(st, VerdictSpec().rule()), slow(st))
    assert cols.get("delta") is None
    assert "different bases" in cols["verdict_why"]
