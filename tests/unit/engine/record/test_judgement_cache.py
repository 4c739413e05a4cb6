"""The judgement of a folded state is made once per seq (engine.record.judgement): the console asks
for it once per shape it draws, thousands of times a screen on a day-long run, and each ask built
its cache key over every row. Asked again at the same seq it is the same judgement, found without
a row looked at; an event folded in, or a state not folded from a journal, is judged as before."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from engine.method.verdict import Rule
from engine.record import judgement
from engine.record.fold import apply, fold_read
from engine.record.journal import read_journal
from engine.record.state import RowState, RunState
from tests.paths import FIXTURES

RULE = Rule(0.05, "holm", 0.05, 0.02)
DEMO = FIXTURES / "runs" / "demo-smollm2" / "journal.jsonl"


def afresh(state: RunState, rule: Rule) -> judgement.Judgement:
    """The judgement of a copy of the state, every cache emptied first."""
    judgement._CACHE.clear()
    judgement._LAST = None
    return judgement.judgement(copy.deepcopy(state), rule)


@pytest.fixture
def looked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The rows whose reps the judgement looks at, in order."""
    seen: list[str] = []
    reps_of = judgement.reps_of

    def counted(r: RowState | None, whole: bool = False) -> Any:
        if r is not None and not whole:  # its whole reps are the same row looked at
            seen.append(r.key)
        return reps_of(r, whole)

    monkeypatch.setattr(judgement, "reps_of", counted)
    return seen


def test_a_folded_state_asked_again_at_the_same_seq_is_not_looked_at_again(looked: list[str]) -> None:
    state = fold_read(read_journal(DEMO))
    first = judgement.judgement(state, RULE)
    assert looked
    looked.clear()
    assert all(judgement.judgement(state, RULE) is first for _ in range(100))
    assert looked == []
    assert judgement.judgement(state, Rule(0.1, "holm", 0.05, 0.02)) is not first  # another rule

    # A rep folded in changes a row's reps: the next ask judges the state as it now is.
    row = next(r for r in state.rows.values() if r.window == "block5" and r.row.get("rep_tok_s"))
    event = {"seq": state.last_seq + 1, "ts": 1.0, "kind": "row_done", **dict(row.row),
             "rep_tok_s": [x * 2 for x in row.row["rep_tok_s"]]}
    apply(state, event)
    looked.clear()
    now = judgement.judgement(state, RULE)
    assert looked and now is not first
    assert now == afresh(state, RULE)


def test_a_state_not_folded_from_a_journal_is_judged_each_time(looked: list[str]) -> None:
    """The report makes one of throughput.csv's rows (its seq 0) and may change it in place."""
    state = fold_read(read_journal(DEMO))
    state.last_seq = 0
    first = judgement.judgement(state, RULE)
    row = next(r for r in state.rows.values() if r.window == "block5" and r.row.get("rep_tok_s"))
    row.row = dict(row.row, rep_tok_s=[x * 2 for x in row.row["rep_tok_s"]])
    looked.clear()
    now = judgement.judgement(state, RULE)
    assert looked and now != first and now == afresh(state, RULE)
