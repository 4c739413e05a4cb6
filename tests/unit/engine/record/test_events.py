"""One definition per event kind: the runner refuses an event its kind does not define, and the
journals on record (a real run's, and the hand-written one with every kind) fit the definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.campaign.load import load_campaign
from engine.record.eventcheck import MalformedEvent, check
from engine.record.events import ENVELOPE, EventKind
from engine.record.journal import read_events
from engine.record.writer import JournalWriter
from engine.run.runner import Runner
from engine.words import RowStatus, WindowStatus
from tests.paths import FIXTURES

RECORDED = sorted((FIXTURES / "journals").glob("*/journal.jsonl"))
EVERY_KIND = FIXTURES / "fold" / "every-kind.jsonl"
# A real run of a Slurm campaign (runtime slurm on the CI cluster): the batch-job kinds
# (window_queued, window_placed) the hand-written journal predates.
SLURM = FIXTURES / "slurm" / "journal.jsonl"
BATCH_KINDS = {EventKind.WINDOW_QUEUED, EventKind.WINDOW_PLACED}
# A real run on an H200 (docs/runs/h200-llamacpp): the GPU kinds the hand-written journal predates.
GPU = FIXTURES / "gpu" / "journal.jsonl"
GPU_KINDS = {EventKind.GPU_MEMORY}
# A real capacity search on the testbed (tests/integration/test_capacity.py's campaign).
CAPACITY = FIXTURES / "capacity" / "journal.jsonl"
CAPACITY_KINDS = {EventKind.CAPACITY}
# A real run of campaigns/demo-stacks.yaml (llama.cpp control, a window on vLLM's CPU build).
STACKS = FIXTURES / "stacks" / "journal.jsonl"
STACKS_KINDS = {EventKind.PARITY}


def test_the_runner_refuses_a_malformed_event_before_it_reaches_the_journal(tmp_path: Path) -> None:
    runner = Runner(load_campaign(FIXTURES / "journals" / "finished" / "campaign.yaml"), tmp_path,
                    "process", {}, None, [])
    runner.emit(EventKind.SESSION_STARTED, session="s1")
    # Each is refused by mypy at the send too (engine.record.send); the run-time check is for what
    # mypy cannot see, as here.
    with pytest.raises(MalformedEvent, match=r"^row_done event: missing attempts, axis, class, "
                                             r"reason, source, status$"):
        runner.emit(EventKind.ROW_DONE, session="s1", window="ctx", concurrency=1)  # type: ignore[call-overload]  # the point
    with pytest.raises(MalformedEvent, match=r"^window_finished event: undefined reson$"):
        runner.emit(EventKind.WINDOW_FINISHED, session="s1", window="ctx", status=WindowStatus.DONE,  # type: ignore[call-overload]  # the point
                    reson="x")
    with pytest.raises(MalformedEvent, match=r"^unknown event kind 'window_finish'$"):
        runner.emit("window_finish", session="s1", window="ctx")  # type: ignore[call-overload]  # no such kind: the point
    assert [e["kind"] for e in read_events(tmp_path / "journal.jsonl")] == ["session_started"]
    assert runner.state.last_seq == 1 and not runner.state.rows


def test_the_hand_written_journal_holds_every_kind_and_fits_every_definition() -> None:
    events = read_events(EVERY_KIND)
    assert {e["kind"] for e in events} == (set(EventKind) - BATCH_KINDS - GPU_KINDS - CAPACITY_KINDS
                                           - STACKS_KINDS)
    assert {e["kind"] for e in read_events(SLURM)} >= BATCH_KINDS
    assert {e["kind"] for e in read_events(GPU)} >= GPU_KINDS
    assert {e["kind"] for e in read_events(CAPACITY)} >= CAPACITY_KINDS
    assert {e["kind"] for e in read_events(STACKS)} >= STACKS_KINDS
    for e in events:
        check(e["kind"], {k: v for k, v in e.items() if k not in ENVELOPE})


@pytest.mark.parametrize("path", [*RECORDED, SLURM, GPU, CAPACITY, STACKS], ids=lambda p: p.parent.name)
def test_a_real_runs_events_fit_the_definitions(path: Path) -> None:
    for e in read_events(path):
        check(e["kind"], {k: v for k, v in e.items() if k not in ENVELOPE})  # format 1 upgraded


def test_the_vocabulary_writes_the_same_bytes_as_plain_strings(tmp_path: Path) -> None:
    a, b = JournalWriter(tmp_path / "a.jsonl"), JournalWriter(tmp_path / "b.jsonl")
    a.append(EventKind.ROW_DONE, status=RowStatus.VOID)
    b.append("row_done", status="void")
    a.close()
    b.close()
    one, two = ((tmp_path / n).read_bytes() for n in ("a.jsonl", "b.jsonl"))
    assert json.loads(one)["kind"] == "row_done"
    assert one.split(b',"kind"')[1] == two.split(b',"kind"')[1]  # all but the timestamp
