"""``ruler tune`` on the real testbed over two llama.cpp flags (campaigns/tune/smollm2.yaml's space,
its budget cut to the first round, its base campaigns/demo-tune.yaml to short passes): killed with
-9 in the middle of its first round, resumed, and carried to its recommendation. Whatever the noise
of the machine decides, the tune must keep a value only where the verdict called it better and its
quality held, lose no rep the killed engine had recorded, and say in tune.md what it recommends and
what it ruled out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from engine import testbed as tb_mod
from engine.record.journal import read_events
from tests.integration.live import RULER, wait_for
from tests.paths import REPO

pytestmark = pytest.mark.slow

TUNE = """\
campaign: {campaign}
space:
  --spec-draft-n-max: [3, 10]
  --cache-type-k: {{values: [q8_0], lossy: true}}
objective: {{tok_s: {{class: prose, load: c1}}}}
kl_max: 0.05
budget: {{windows: 7}}
max_rounds: 3
"""


def short_base(directory: Path) -> Path:
    """campaigns/demo-tune.yaml with its passes cut (two reps of two 8-token requests, two greedy
    prompts): the tune's rounds, kill and resume are the subject, not the figures, and every stage
    a window runs (warm pass, reps, greedy, teacher forcing, KL) still runs. Its prompt files by
    their paths in the repository, as the copy is written elsewhere."""
    base = yaml.safe_load((REPO / "campaigns" / "demo-tune.yaml").read_text())
    prompts = REPO / "campaigns" / "prompts"
    base["workload"].update({"classes": {"prose": {"file": str(prompts / "prose.txt")}},
                             "reps": 2, "requests_per_rep": 2, "max_tokens": 8})
    base["quality"]["greedy"] = {"file": str(prompts / "greedy.txt"), "n": 2, "max_tokens": 8}
    path = directory / "demo-tune.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    return path


def round_run(results: Path) -> Path | None:
    """Round 1's run directory, once the tune has made it."""
    found = sorted(results.glob("*-tune-demo-tune/runs/*/journal.jsonl"))
    return found[0].parent if found else None


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return False


def reps_of(run: Path) -> set[tuple[str, str, int, int]]:
    return {(e["window"], e["class"], e["attempt"], e["rep"]) for e in read_events(run / "journal.jsonl")
            if e["kind"] == "rep_done"}


def test_a_tune_killed_mid_round_resumes_and_recommends(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    spec = tmp_path / "tune.yaml"
    spec.write_text(TUNE.format(campaign=short_base(tmp_path)))
    # Started from one directory with a relative --results-dir, resumed from another (issue 49:
    # the journal held the rounds' paths relative to the first).
    first_cwd, other_cwd = tmp_path / "first", tmp_path / "other"
    first_cwd.mkdir()
    other_cwd.mkdir()
    results = first_cwd / "results"
    log = tmp_path / "first.log"
    with log.open("w") as out:
        first = subprocess.Popen([*RULER, "tune", str(spec), "--results-dir", "results"], cwd=first_cwd,
                                 stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while round_run(results) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        runs = round_run(results)
        assert runs is not None, "round 1 never started"
        # Mid-round: a window of the first session has a rep on record, the round is not over.
        wait_for(runs, lambda evs: any(e["kind"] == "rep_done" and e["window"] != "control"
                                       for e in evs), timeout=900, what="a window's first rep")
        before = reps_of(runs)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    print(log.read_text()[-3000:])
    tune_dir = runs.parent.parent
    assert not (tune_dir / "tune.md").exists()
    # The killed engine's server still runs: a stray the resume must stop (issue 49).
    up = [e for e in read_events(runs / "journal.jsonl") if e["kind"] in ("server_started", "server_stopped")]
    stray = up[-1]
    assert stray["kind"] == "server_started" and alive(stray["pid"]), up[-2:]
    again = subprocess.run([*RULER, "tune", "--resume", str(tune_dir.resolve())], cwd=other_cwd,
                           capture_output=True, text=True, timeout=3000)
    print(again.stdout[-6000:], again.stderr[-3000:])
    assert again.returncode == 0, again.stderr
    # The round in flight was resumed, not started over: every rep recorded before the kill stays.
    events = read_events(runs / "journal.jsonl")
    assert sum(e["kind"] == "run_resumed" for e in events) == 1
    assert any(e["kind"] == "stray_stopped" and e.get("pid") == stray["pid"] for e in events), stray
    assert not alive(stray["pid"])
    assert before <= reps_of(runs)
    assert [e["kind"] for e in events][-1] == "run_finished"
    said = json.loads((tune_dir / "tune.json").read_text())
    rounds = said["rounds"]
    assert rounds and rounds[0]["kind"] == "axes" and rounds[0]["run"] == str(runs.resolve())
    assert {tuple(c["change"].items()) for c in rounds[0]["candidates"]} == {
        (("--spec-draft-n-max", 3),), (("--spec-draft-n-max", 10),), (("--cache-type-k", "q8_0"),)}
    for r in rounds:
        for c in r["candidates"]:
            assert c["why"], c
            # A value is kept only where the verdict called it better and its quality held.
            assert c["kept"] == (c["call"] == "better" and c["quality_holds"]), c
            if c["call"] != "no figure":
                assert c["delta"] is not None and c["receipts"], c
            if c["lossy"] and c["call"] != "no figure":
                assert "kl_mean" in c["quality"], c
    kept = {k: v for r in rounds for c in r["candidates"] if c["kept"] for k, v in c["change"].items()}
    assert set(said["changed"]) <= set(kept)
    # The recommended command is the argv ruler booted those flags with.
    assert "llama-server" in said["command"] and "--spec-draft-n-max" in said["command"]
    for flag, value in said["recommended"].items():
        if flag.startswith("--spec") or flag == "--cache-type-k":
            assert f"{flag} {value}" in said["command"]
    md = (tune_dir / "tune.md").read_text()
    print(md)
    assert "## Recommended" in md and said["command"] in md and "## Ruled out" in md
    assert said["stop"] in md
