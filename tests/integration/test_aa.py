"""An A/A campaign on the real testbed, on a loaded machine: two windows that are the control
again with an inert llama-server flag, two loads, two sessions, the control booted once a session
(control_position first) and every window in both sessions, boots added until decided within a
budget. No window is called an effect; the noise between boots is measured per class and load
from the windows' boots across sessions (the session a block), and every surface says so. The
rule's error rates by simulation: tests/unit/engine/method/test_verdict.py, bench/verdict_sim.py."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.record.journal import read_events
from tests import campaigns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# Two windows, so the rule's family has more than one row a load; the budget pays for the two
# sessions and one session more of the control and both windows.
INERT = {"dt": {"axis": "inert: KV defragmentation threshold", "args": {"--defrag-thold": 0.1}},
         "timeout": {"axis": "inert: server timeout", "args": {"--timeout": 900}}}
BUDGET = 9


@pytest.fixture
def hog() -> Iterator[None]:
    """A busy loop on a core for the whole run: the machine moves under the campaign, as a shared
    box does (its load is the test's, said so)."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        busy.kill()
        busy.wait()


def test_an_aa_campaign_calls_no_effect_and_measures_the_noise_between_boots(
        testbed: tb_mod.Testbed, tmp_path: Path, hog: None) -> None:
    spec = campaigns.testbed_campaign("aa", INERT, {s: list(INERT) for s in ("s1", "s2")},
                                      concurrency=[1, 2], requests_per_rep=4, max_tokens=8,
                                      control_position="first")
    # One false call in a hundred A/A campaigns at most: a test of the rule cannot be flaky at
    # its own 5 %.
    spec["verdict"] = {"error_rate": 0.01, "until_decided": True, "max_boots": BUDGET}
    path = campaigns.write(tmp_path, spec)
    results = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(path), "--headless",
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=1500)
    print(out.stdout[-6000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    run = next(results.iterdir())
    events = list(read_events(run / "journal.jsonl"))
    started = next(e for e in events if e["kind"] == "run_started")
    assert started["sessions"] == {s: ["control", *INERT] for s in ("s1", "s2")}
    # The looks: the last one final, the boots within the budget, each session a look added booted
    # whole (its windows measured), every window in it one the look left undecided.
    looks = [e for e in events if e["kind"] == "verdict_look"]
    added = [e for e in events if e["kind"] == "session_added"]
    assert looks and looks[-1]["final"] and len(added) == len(looks) - 1
    assert sum(e["kind"] == "window_started" for e in events) <= BUDGET
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    for a, look in zip(added, looks, strict=False):
        assert set(a["windows"]) - {"control"} == set(look["undecided"])
        assert {r["window"] for r in rows if r["session"] == a["session"]} == set(a["windows"])
    windows = [r for r in rows if r["window"] in INERT]
    assert all(r["verdict"] in ("no observable effect", "undetermined") for r in windows), [
        (r["window"], r["concurrency"], r["delta"], r["verdict_why"]) for r in windows]
    assert all(r["delta"] and r["delta_lo"] and r["verdict_why"] for r in windows)
    # Measured per class and load: the windows in both sessions, each session its own level.
    for c in ("1", "2"):
        hows = {r["boot_noise_how"] for r in rows if r["concurrency"] == c}
        assert len(hows) == 1 and hows.pop().startswith("measured: "), c
    report = subprocess.run([sys.executable, "-m", "engine", "report", str(run)],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    text = (run / "report.md").read_text()
    section = text[text.index("### Noise between boots"):]
    assert "| prose | C1 |" in section and "| prose | C2 |" in section and "measured: " in section
    assert f"0 of {len(INERT)} windows called an *observable effect*" in section
