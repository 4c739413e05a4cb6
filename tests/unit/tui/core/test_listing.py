"""The windows list's rows (tui.core.listing) on recorded runs: each window's cells, the run judged
once per change of the fold whatever the list asks, and made again only when the fold changed."""

from __future__ import annotations

from typing import Any

import pytest

from engine.record.journal import read_events
from engine.record.judged import judgement
from engine.record.state import apply, fold
from tests.unit.tui.recorded import JOURNALS
from tui.core.listing import listed
from tui.core.plan import DEFAULT_RULE


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
