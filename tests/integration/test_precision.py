"""Reps to a precision on the real testbed: a noisy control row gains reps until its interval is
as narrow as the campaign asks, and every row's steady-window tok/s recomputes from its receipts.

The noise is made by the live tests' slowing TCP proxy in front of the real llama-server (fault
injection: a real server cannot be told to be noisy on cue). It forwards every byte; the response
to a chat request of the control's reps is held back 0, 1 or 2 times ``HOLD`` of the time the
server took to give it, by its rep's number (from the engine's own journal): relative, so that the
control's reps spread evenly (1, 1/2, 1/3 of the pace) however busy the machine is, too wide for
its first stage to reach the precision, even with one rep's holds missed (seen once: a held rep
as fast as the unheld). Noise, not a leak: no rep stands alone below the others.
The window's reps pass unheld.
"""

from __future__ import annotations

import asyncio
import csv
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.method import stats
from engine.record.journal import read_events
from engine.run.measure import recompute_row
from engine.runtime.base import LaunchPlan, free_port
from tests.integration.live import SlowingProxy, serve

# Slow: a campaign on the real server, over ten seconds.
pytestmark = pytest.mark.slow

# Wide enough that a loaded machine's noise on top of the proxy's (reps at 22-72 tok/s, a log sd
# of 0.53, seen at load 6) stays within max_reps of it (60: its first stage's projection says
# "cannot" past a half-width of about 1.9; 1.2 at idle), narrow enough that the proxy's own spread
# (a log sd of about 0.55: 0.87 of half-width over four reps, against 0.49 asked) keeps the first
# stage of four reps short of it, one rep's holds missed or not (at 1, 2/3, 1/2 of the pace, a
# missed hold left 0.28 and the row stopped at four reps).
PRECISION = 0.7
CAMPAIGN = """\
name: precision
server: llamacpp
runtime: attach
attach:
  url: http://127.0.0.1:{port}/v1
control:
  args: {{}}
windows:
  - name: same
    axis: the same server (the proxy makes the control noisy)
    change:
      env: {{UNUSED: "1"}}
sessions:
  s1: [same]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours."]}}
  concurrency: [2]
  reps: 4
  precision: {precision}
  max_reps: 60
  requests_per_rep: 8
  max_tokens: 16
leak: {{min_concurrency: 64, spread: 0.02, max_reruns: 0}}
quality: {{enabled: false}}
"""
HOLD = 1.0  # a held response waits this share of the server's time for it, per step


class PatternProxy(SlowingProxy):
    """The live tests' slowing proxy, holding each chat response of the control's reps ``HOLD``
    times the server's own time for it per step of the pattern (0, 1, 2): relative to the request
    itself, so the pattern's spread is the same however busy the machine is."""

    def __init__(self, upstream: int, steps: Callable[[], int]) -> None:
        super().__init__(upstream, lambda: False)
        self.steps, self.held = steps, 0
        self.pending: dict[int, int] = {}  # id(request bytes) -> its steps

    def holds(self, request: bytes) -> bool:
        if not request.startswith(b"POST /v1/chat/completions") or not (n := self.steps()):
            return False
        self.held += 1
        self.pending[id(request)] = n
        return True

    async def release(self, request: bytes, response: bytes, took: float) -> bytes:
        await asyncio.sleep(HOLD * self.pending.pop(id(request), 0) * took)
        return response


def control_pattern(results: Path) -> Callable[[], int]:
    """The hold steps of a request sent now: 0, 1, 2 by the control rep under way (the count of
    its reps done), none outside the control's reps (its warm pass, the window)."""
    def steps() -> int:
        journals = list(results.glob("*/journal.jsonl"))
        if not journals:
            return 0
        control = [e for e in read_events(journals[0]) if e.get("window") == "control"]
        if any(e["kind"] == "row_done" for e in control) or not any(
                e["kind"] == "warm_done" for e in control):
            return 0
        return sum(e["kind"] == "rep_done" for e in control) % 3
    return steps


def test_a_noisy_control_gains_reps_until_its_precision(testbed: tb_mod.Testbed,
                                                         tmp_path: Path) -> None:
    port = free_port()
    # One thread: two on two busy cores spin at every barrier (campaigns/demo-smollm2.yaml).
    server = serve(LaunchPlan("precision-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "2048", "-np", "2",
        "-t", "1", "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    results = tmp_path / "results"
    proxy = PatternProxy(port, control_pattern(results))
    proxy.start()
    assert proxy.ready.wait(10)
    spec = tmp_path / "precision.yaml"
    spec.write_text(CAMPAIGN.format(port=proxy.port, precision=PRECISION))
    try:
        out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                              "--results-dir", str(results)], capture_output=True, text=True,
                             timeout=900)
        print(out.stdout[-4000:])
        assert out.returncode == 0, out.stderr
    finally:
        proxy.stop()
        server.stop()
    assert proxy.held > 0
    run = next(results.iterdir())
    rows = {r["window"]: r for r in csv.DictReader((run / "throughput.csv").open())}
    control = rows["control"]
    print({k: control[k] for k in ("reps", "agg_tok_s", "whole_tok_s", "spread", "spread_shape",
                                   "half_width", "precision_status", "reason")})
    # Noisy, not void: the spread is the proxy's even one, and the row gained reps past its
    # first stage until the half-width reached the precision (a control's: over root two).
    assert control["status"] == "noisy" and control["spread_shape"] == "noise"
    assert int(control["reps"]) > 4 and int(control["stage_reps"]) == 4
    assert control["precision_status"] == "reached", control["reason"]
    assert float(control["half_width"]) <= PRECISION / math.sqrt(2)
    assert f"with {control['reps']} reps" in control["reason"]
    events = read_events(run / "journal.jsonl")
    reps = [e for e in events if e["kind"] == "rep_done" and e["window"] == "control"]
    assert [e["rep"] for e in reps] == list(range(1, int(control["reps"]) + 1))
    assert [e["precision_status"] for e in reps][-1] == "reached"
    assert all(e["precision_status"] == "more" for e in reps[3:-1])
    # Every row's steady-window figures, recomputed from its receipts, are the row's.
    policy = stats.LeakPolicy(min_concurrency=64, spread=0.02, max_reruns=0)
    for row in rows.values():
        again = recompute_row(run, row["source"], 2, policy)
        assert row["basis"] == again["basis"] == stats.STEADY
        for key in ("agg_tok_s", "whole_tok_s", "steady_s", "ramp_s", "tail_s", "spread"):
            assert float(row[key]) == again[key], key
        assert float(row["agg_tok_s"]) != float(row["whole_tok_s"])
