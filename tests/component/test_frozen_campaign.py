"""A run's own campaign.yaml is self-contained: ``ruler validate --explain`` and ``ruler run`` take
it from any directory, the folder it was first written in gone, and run what that run sent: its
classes' items and its greedy prompts as the run froze them (engine.campaign.frozen)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.commands import launch
from engine.commands.cli import main
from engine.record import results
from engine.run import runner as runner_mod
from tests.campaigns import CTX, campaign, write
from tests.component.fakes import Behaviour, FakeRuntime
from tests.component.helpers import events, rows


def run(spec: Path, results_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``ruler run`` of the campaign file on the fake runtime: its run directory, finished."""
    run_dir = launch.prepare(str(spec), str(results_dir), "process")
    fake = FakeRuntime(lambda plan: Behaviour())
    monkeypatch.setattr(runner_mod, "runtime_for", lambda *a, **k: fake)
    try:
        assert launch.run_engine(run_dir, echo=False) == 0
    finally:
        fake.close()
    return run_dir


def sent_greedy(run_dir: Path) -> list[str]:
    receipt = json.loads((run_dir / "windows" / "s1-control" / "greedy.json").read_text())
    return [o["prompt"] for o in receipt["outputs"]]


def test_a_runs_own_campaign_validates_and_runs_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    (src / "prompts").mkdir(parents=True)
    (src / "prompts" / "sea.txt").write_text("Name a sea.\nName a river.\n")
    (src / "prompts" / "greedy.txt").write_text("Name a lake.\nName a hill.\nName a cloud.\n")
    (src / "data.jsonl").write_text('{"prompt": "Count to three.", "output_tokens": 3}\n')
    spec = campaign("frozen", dict(CTX), {"s1": ["ctx"]}, reps=1,
                    classes={"sea": {"file": "prompts/sea.txt"},
                             "data": {"dataset": {"file": "data.jsonl"}}},
                    quality={"greedy": {"file": "prompts/greedy.txt", "n": 2, "max_tokens": 4},
                             "teacher_forced": {"positions": 2}})
    spec["process"] = {"command": ["/bin/true"]}  # never run: the fake runtime starts the servers
    first = run(write(src, spec), tmp_path / "results", monkeypatch)
    assert json.loads((first / results.QUALITY).read_text()) == {"greedy": ["Name a lake.", "Name a hill."]}

    shutil.rmtree(src)  # the folder the campaign was written in, and its files, gone
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    own = first / results.CAMPAIGN
    capsys.readouterr()
    assert main(["validate", "--explain", str(own)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "quality: knob check on; greedy 2 prompts x 4 tokens" in out
    assert "2 items as this run froze them (not read from prompts/sea.txt)" in out
    assert "1 item as this run froze them (not read from data.jsonl)" in out

    second = run(own, tmp_path / "again", monkeypatch)
    for name in (results.PROMPTS, results.ITEMS, results.QUALITY):
        assert (second / name).read_text() == (first / name).read_text(), name
    assert sent_greedy(second) == sent_greedy(first) == ["Name a lake.", "Name a hill."]
    assert set(rows(second)) == set(rows(first)) and all(
        r["status"] == "ok" for r in rows(second).values())
    assert events(second, "run_finished")[0]["status"] == "finished"


def test_a_damaged_frozen_file_is_named_and_nothing_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / results.CAMPAIGN).write_text(
        json.dumps(campaign("frozen", {}, {"s1": []}, classes={"sea": {"file": "prompts/sea.txt"}})))
    (run_dir / results.PROMPTS).write_text('{"sea": ["Name a sea.", ')
    assert main(["validate", str(run_dir / results.CAMPAIGN)]) == 2
    err = capsys.readouterr().err
    frozen = run_dir / results.PROMPTS
    assert f"{run_dir / results.CAMPAIGN}:1:1: this run's frozen {frozen}: cannot be read" in err
    assert "Traceback" not in err
