"""Boots added until decided (verdict.until_decided) on the FAKE server: the runner takes each look
(engine.record.looks) after the campaign's sessions, journals it, boots the session it adds and
looks again until the last; a resume after a kill goes on where the looks left off.

The looks' decisions are scripted here (a stand-in for engine.record.looks.take, said so): which
windows are undecided is the statistics' business, held by tests/unit/engine/record/test_looks.py;
this test holds the runner to whatever a look says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.record.figures import CSV_COLUMNS
from engine.record.looks import Look, session_order
from engine.record.receipts import throughput_rows
from engine.record.snapshot import fold_journal
from engine.run.runner import Runner
from engine.sanitize import csv_document
from tests.campaigns import CTX, campaign
from tests.component.fakes import FakeRuntime
from tests.component.helpers import events, rows, runner

pytestmark = pytest.mark.timeout(60)

SPEC = campaign("more", {**CTX, "same": {"axis": "inert", "args": {"--alias": "x"}}}, {"s1": ["ctx", "same"]},
                control_position="both", reps=2,
                verdict={"until_decided": True, "max_boots": 20})


def scripted(looks: list[tuple[bool, list[str]]], level: float = 0.001) -> Any:
    """A stand-in for engine.record.looks.take that says, look by look, which windows are left
    (each look at ``level``)."""
    said = iter(looks)

    def take(state: Any, rule: Any, position: str, windows: Any, sessions: Any) -> Look:
        final, undecided = next(said)
        number = len(state.looks) + 1
        name = f"more{number}"
        return Look(number, level, 1.0 if final else 0.5, final, 0, 0.0, {}, {},
                    [] if final else undecided, "scripted", "" if final else name,
                    [] if final else session_order(undecided, position))
    return take


def test_a_look_that_leaves_windows_undecided_boots_them_again(
        tmp: Path, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("engine.run.runner.take", scripted([(False, ["ctx"]), (True, [])]))
    r = runner(tmp, SPEC, fake)
    assert r.run() == "finished"
    looks = events(r.run_dir, "verdict_look")
    assert [(e["look"], e["final"]) for e in looks] == [(1, False), (2, True)]
    [added] = events(r.run_dir, "session_added")
    assert added["session"] == "more1" and added["windows"] == ["control", "ctx", "control-again"]
    # The added session ran like any other, after the campaign's, and its rows are in the receipts.
    started = [e["session"] + "-" + e["window"] for e in events(r.run_dir, "window_started")]
    assert started == ["s1-control", "s1-ctx", "s1-same", "s1-control-again",
                       "more1-control", "more1-ctx", "more1-control-again"]
    assert {"more1-control/prose/c2", "more1-ctx/prose/c2"} <= rows(r.run_dir).keys()
    state = fold_journal(r.run_dir / "journal.jsonl")
    assert state.added == {"more1": ["control", "ctx", "control-again"]} and len(state.looks) == 2


def test_a_resume_goes_on_with_the_added_session_and_the_looks(
        tmp: Path, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine killed as the added session was to begin (a stand-in for kill -9: the runner's
    work on it raises SystemExit, said so): the resume boots the added session, then looks again."""
    monkeypatch.setattr("engine.run.runner.take", scripted([(False, ["ctx", "same"])]))
    work = Runner._work

    def killed(self: Runner, lane: Any, pending: list[str]) -> None:
        if pending == ["more1"]:
            raise SystemExit("killed")
        work(self, lane, pending)

    monkeypatch.setattr(Runner, "_work", killed)
    r = runner(tmp, SPEC, fake)
    with pytest.raises(SystemExit):
        r.run()
    r.journal.close()
    assert [e["session"] for e in events(r.run_dir, "session_added")] == ["more1"]
    assert not events(r.run_dir, "window_started", session="more1")
    monkeypatch.setattr(Runner, "_work", work)
    monkeypatch.setattr("engine.run.runner.take", scripted([(True, [])]))
    again = runner(tmp, SPEC, fake)
    assert again.run() == "finished"
    started = [e["session"] + "-" + e["window"] for e in events(r.run_dir, "window_started")]
    assert started[4:] == ["more1-control", "more1-ctx", "more1-same", "more1-control-again"]
    assert [(e["look"], e["final"]) for e in events(r.run_dir, "verdict_look")] == [(1, False), (2, True)]


def test_throughput_csv_is_written_again_at_each_look(
        tmp: Path, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last look spends what is left of the error rate: the rows' calls and their words change
    with it, so the file the report reads is the fold's after the look, not after the last row."""
    # A level no real look takes, so that the calls it makes differ from the ones before it.
    monkeypatch.setattr("engine.run.runner.take", scripted([(True, [])], level=0.999))
    r = runner(tmp, SPEC, fake)
    assert r.run() == "finished"
    state = fold_journal(r.run_dir / "journal.jsonl")
    assert state.looks and state.looks[-1]["level"] == 0.999
    written = (r.run_dir / "throughput.csv").read_text()
    assert written == csv_document(CSV_COLUMNS, throughput_rows(state, r.campaign.verdict.rule()))
    calls = {row["window"]: row["verdict"] for row in rows(r.run_dir).values()}
    assert calls["ctx"] not in ("", "undetermined"), calls
