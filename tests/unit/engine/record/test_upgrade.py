"""A journal's format: the runner writes the current one into run_started; an older journal is
brought to its shape in one step as each line is read, whichever reader reads it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from engine.record.events import FORMAT, EventKind, check
from engine.record.journal import read_journal, read_kinds
from engine.record.upgrade import FIRST_FORMAT, frozen_workload, upgraded
from tui.core.follow import Follower

FIXTURES = Path(__file__).parents[3] / "fixtures"
FORMAT_1 = FIXTURES / "journals" / "booting"  # recorded before run_started carried the workload
BOOTING_WORKLOAD = {"classes": ["prose", "code"], "concurrency": [1, 2], "reps": 3,
                    "requests": [2, 2], "max_tokens": 16}


def started(events: list[dict]) -> dict:
    return next(e for e in events if e["kind"] == EventKind.RUN_STARTED)


def test_a_format_1_journal_reads_in_the_current_shape() -> None:
    raw = started([json.loads(x) for x in (FORMAT_1 / "journal.jsonl").read_text().splitlines()])
    assert "format" not in raw and "workload" not in raw
    e = started([e for _, e in read_journal(FORMAT_1 / "journal.jsonl").events])
    assert (e["format"], e["workload"]) == (FIRST_FORMAT, BOOTING_WORKLOAD)
    check(e["kind"], {k: v for k, v in e.items() if k not in ("seq", "ts", "kind")})
    assert started(read_kinds(FORMAT_1 / "journal.jsonl", [EventKind.RUN_STARTED])) == e


def test_the_console_reads_it_upgraded_too(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FORMAT_1, run)
    got: list = []

    def post(batch: object) -> None:
        got.append(batch)
        follower.ack()

    follower = Follower(run, post, from_snapshot=False)
    follower.run(lambda: bool(got) and got[-1].caught_up)
    e = started([e for b in got for e in b.events])
    assert (e["format"], e["workload"]) == (FIRST_FORMAT, BOOTING_WORKLOAD)


def test_without_its_campaign_a_format_1_run_started_has_no_workload(tmp_path: Path) -> None:
    shutil.copy(FORMAT_1 / "journal.jsonl", tmp_path / "journal.jsonl")
    e = started([e for _, e in read_journal(tmp_path / "journal.jsonl").events])
    assert e["format"] == FIRST_FORMAT and "workload" not in e
    (tmp_path / "campaign.yaml").write_text("workload: {concurrency: [one]}\n")
    assert frozen_workload(tmp_path / "campaign.yaml") is None


def test_a_current_journal_is_read_as_written() -> None:
    e = {"seq": 1, "ts": 1.0, "kind": "run_started", "format": FORMAT, "campaign": "c"}
    assert upgraded(dict(e), FORMAT_1) == e
    other = {"seq": 2, "ts": 1.0, "kind": "run_resumed", "pid": 1, "rows_done": 0}
    assert upgraded(dict(other), FORMAT_1) == other
