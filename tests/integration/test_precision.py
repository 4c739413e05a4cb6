"""Reps to a precision on the real testbed: a noisy control row gains reps until its interval is
as narrow as the campaign asks, and every row's steady-window tok/s recomputes from its receipts.

The noise is made by a delaying TCP proxy in front of the real llama-server (fault injection: a
real server cannot be told to be noisy on cue). It forwards every byte; a chat request of the
control's reps is held before it reaches the server by 0, 1 or 2 times ``HOLD`` of the time the
server took for the last request it did not hold, by its rep's number (from the engine's own
journal): relative, so that the control's reps spread evenly (1, 2/3, 1/2 of the pace) however busy
the machine is, too wide for its first stage to reach the precision. Noise, not a leak: no rep
stands alone below the others. The window's reps pass
unheld.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import math
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.method import stats
from engine.record.journal import read_events
from engine.run.measure import recompute_row
from engine.runtime import process as rp
from engine.runtime.base import LaunchPlan, free_port

# Slow: a campaign on the real server, over ten seconds.
pytestmark = pytest.mark.slow

PRECISION = 0.5
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
  max_reps: 30
  requests_per_rep: 8
  max_tokens: 16
leak: {{min_concurrency: 64, spread: 0.02, max_reruns: 0}}
quality: {{enabled: false}}
"""
HOLD = 0.5  # a held request waits this share of the last unheld request's time, per step


class DelayingProxy(threading.Thread):
    def __init__(self, upstream: int, steps: Callable[[], int]) -> None:
        super().__init__(daemon=True)
        self.upstream, self.port, self.steps = upstream, free_port(), steps
        self.held = 0
        self.took = 0.0  # the server's time for the last request not held
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(65536)
        chat = first.startswith(b"POST /v1/chat/completions")
        steps = self.steps() if chat else 0
        if steps:
            self.held += 1
            await asyncio.sleep(HOLD * steps * self.took)
        t0 = self.loop.time()
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        up_w.write(first)
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))
        if chat and not steps:
            self.took = self.loop.time() - t0

    async def _main(self) -> None:
        server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        self.ready.set()
        async with server:
            await server.serve_forever()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        with contextlib.suppress(RuntimeError, asyncio.CancelledError):  # stopped
            self.loop.run_until_complete(self._main())

    def stop(self) -> None:
        for task in asyncio.all_tasks(self.loop):
            self.loop.call_soon_threadsafe(task.cancel)


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
    server = rp.ProcessServer(LaunchPlan("precision-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "2048", "-np", "2",
        "-t", "1", "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    results = tmp_path / "results"
    proxy = DelayingProxy(port, control_pattern(results))
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
