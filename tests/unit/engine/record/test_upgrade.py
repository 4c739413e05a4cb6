"""A journal's format: the runner writes the current one into run_started; an older journal is
brought to its shape in one step as each line is read, whichever reader reads it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from engine.campaign.load import load_campaign
from engine.record.eventcheck import check
from engine.record.events import FORMAT, EventKind
from engine.record.journal import read_events, read_journal, read_kinds
from engine.record.snapshot import fold_journal
from engine.record.upgrade import FIRST_FORMAT, frozen_campaign, frozen_workload, upgraded
from engine.run.runner import Runner, leak_record, verdict_record
from tui.core.follow import Follower
from tui.core.rules import DEFAULT_RULE, LeakRule, leak_rule, verdict_rule

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
    raw = frozen_campaign(tmp_path / "campaign.yaml")
    assert raw is not None and frozen_workload(raw) is None


def test_a_current_journal_is_read_as_written() -> None:
    e = {"seq": 1, "ts": 1.0, "kind": "run_started", "format": FORMAT, "campaign": "c"}
    assert upgraded(dict(e), FORMAT_1) == e
    other = {"seq": 2, "ts": 1.0, "kind": "run_resumed", "pid": 1, "rows_done": 0}
    assert upgraded(dict(other), FORMAT_1) == other


def test_the_rules_are_run_starteds_and_an_older_journals_are_its_frozen_campaigns(tmp_path: Path) -> None:
    """The console judges by the leak and verdict rules run_started records; an older journal's
    are read from its frozen campaign once, as the journal is read, and come out the same."""
    finished = FIXTURES / "journals" / "finished"
    older = started([e for _, e in read_journal(finished / "journal.jsonl").events])
    assert older["format"] < FORMAT and older["leak"] == {"min_concurrency": 2, "spread": 0.10}
    assert older["verdict"] == {}  # the campaign declares none: the spec's defaults
    campaign = load_campaign(finished / "campaign.yaml")
    runner = Runner(campaign, tmp_path, "process", {}, None, [])
    runner.emit(EventKind.RUN_STARTED, format=FORMAT, campaign="c", run="r", runtime="process",
                server="llamacpp", pid=1, sessions={}, axes={}, leak=leak_record(campaign.leak),
                verdict=verdict_record(campaign.verdict))
    recorded = started(read_events(tmp_path / "journal.jsonl"))
    assert recorded["leak"] == {"spread": 0.10, "min_concurrency": 2}
    now, then = runner.state, fold_journal(finished / "journal.jsonl")
    assert leak_rule(now) == leak_rule(then) == LeakRule(0.10, 2)
    assert verdict_rule(now) == verdict_rule(then) == campaign.verdict.rule() == DEFAULT_RULE


def test_a_frozen_campaigns_rule_keeps_only_what_fits_the_record(tmp_path: Path) -> None:
    (tmp_path / "campaign.yaml").write_text(
        "leak: {spread: 0.2, min_concurrency: lots, max_reruns: 1}\nverdict: {boot_noise: null, margin: 1}\n")
    e = upgraded({"kind": "run_started", "format": 2}, tmp_path)
    assert e["leak"] == {"spread": 0.2} and e["verdict"] == {"boot_noise": None, "margin": 1}
    none = {"kind": "run_started", "format": 2}
    assert upgraded(dict(none), tmp_path / "gone") == none  # no campaign to read: left as it is


def test_a_format_of_another_type_is_left_for_the_fold_to_say(tmp_path: Path) -> None:
    (tmp_path / "campaign.yaml").write_text("leak: {spread: 0.2}\n")
    for said in (None, "2", 2.0, True):
        e = {"kind": "run_started", "format": said}
        assert upgraded(dict(e), tmp_path) == e
