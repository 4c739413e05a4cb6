"""An A/A campaign on the real testbed (issue 34): three windows that are the control again with an
inert llama-server flag, two loads, two sessions, each booting the control first and again last
(control_position both). No window is called an effect; the noise between boots is measured from
the control boots and shown per load in throughput.csv and the report. The rule's error rates by
simulation: tests/unit/engine/method/test_verdict.py and bench/verdict_sim.py."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.record.journal import read_events
from tests import campaigns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

INERT = {"dt": {"axis": "inert: KV defragmentation threshold", "args": {"--defrag-thold": 0.1}},
         "timeout": {"axis": "inert: server timeout", "args": {"--timeout": 900}},
         "threads-http": {"axis": "inert: HTTP threads", "args": {"--threads-http": 2}}}


def test_an_aa_campaign_calls_no_effect_and_measures_the_noise_between_boots(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    spec = campaigns.testbed_campaign("aa", INERT, {"s1": ["dt", "timeout"], "s2": ["threads-http"]},
                            concurrency=[1, 2], requests_per_rep=4, max_tokens=12,
                            control_position="both")
    # One false call in a hundred A/A campaigns at most: a test of the rule cannot be flaky at
    # its own 5 %.
    spec["verdict"] = {"error_rate": 0.01}
    path = campaigns.write(tmp_path, spec)
    results = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(path), "--headless",
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=1500)
    print(out.stdout[-4000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    run = next(results.iterdir())
    started = next(e for e in read_events(run / "journal.jsonl") if e["kind"] == "run_started")
    assert started["sessions"] == {"s1": ["control", "dt", "timeout", "control-again"],
                                   "s2": ["control", "threads-http", "control-again"]}
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    windows = [r for r in rows if r["window"] in INERT]
    assert len(windows) == 6 and all(r["delta"] and r["delta_lo"] and r["delta_hi"] for r in windows)
    assert all(r["verdict"] in ("no observable effect", "undetermined") for r in windows), [
        (r["window"], r["concurrency"], r["delta"], r["verdict_why"]) for r in windows]
    assert all(r["verdict_why"] for r in windows)
    # Measured, per load: the control and the control again in each session, 4 boots a load.
    for c in ("1", "2"):
        hows = {r["boot_noise_how"] for r in rows if r["concurrency"] == c}
        assert len(hows) == 1 and hows.pop().startswith("measured: 4 boots in 1 group"), c
    again = [r for r in rows if r["window"] == "control-again"]
    assert len(again) == 4 and all(r["delta"] and not r["verdict"] for r in again)  # A/A, not a question
    report = subprocess.run([sys.executable, "-m", "engine", "report", str(run)],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    text = (run / "report.md").read_text()
    section = text[text.index("### Noise between boots"):]
    assert "| C1 |" in section and "| C2 |" in section and "measured: 4 boots" in section
    assert "0 of 6 windows and shapes judged called *observable effect*" in section
