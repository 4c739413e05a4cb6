"""The engine itself stopped mid-rep (SIGSTOP), on the real testbed: the rep timed the client, not
the server, so it is void as client-stalled and measured again; no leak is suspected of the server.

Real parts: llama-server as a process and the engine as `ruler run --headless`. The fault is a
real SIGSTOP of the engine process, held past loadgen.STALL_S, then SIGCONT. A forwarding proxy
in front of the server (tests.integration.live.SlowingProxy, holding nothing back) times the stop:
it lands as the first chat request of the control's rep 2 reaches the server, so it is inside
that rep's pass, where the engine's own loop must notice it.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine import testbed as tb_mod
from engine.record.journal import read_events
from engine.record.receipts import read_rep
from engine.run.loadgen import STALL_S
from engine.runtime.base import LaunchPlan, free_port
from tests.campaigns import LEAKY, campaign, write
from tests.integration.live import SlowingProxy, during_rep_two, serve

# Slow: a campaign on the real server, over ten seconds.
pytestmark = pytest.mark.slow



def stall_campaign(port: int) -> dict[str, Any]:
    """The control and an unchanged window on the server behind the proxy; the leak rule judges
    rows at C2 here, so a rep the stop slowed would be suspected if it were kept."""
    spec = campaign("stall", {"same": {"axis": "the same server", "env": {"UNUSED": "1"}}},
                    {"s1": ["same"]}, concurrency=[2], reps=3, requests_per_rep=8, max_tokens=16,
                    leak=LEAKY)
    del spec["process"]
    spec.update(runtime="attach", attach={"url": f"http://127.0.0.1:{port}/v1"},
                control={"args": {}}, timeouts={"boot": 120, "request": 120})
    return spec


STOPPED_S = STALL_S + 2.0  # the fault's length: past the engine's bar, as the 6-10 s found were


class StoppingProxy(SlowingProxy):
    """Forwards every byte; the first chat request of the control's rep 2 stops the engine."""

    def __init__(self, upstream: int, results: Path) -> None:
        super().__init__(upstream, slow=lambda: False)
        self.rep_two = during_rep_two(results)
        self.engine: int | None = None
        self.stopped = threading.Event()

    def holds(self, request: bytes) -> bool:
        if (self.engine is not None and not self.stopped.is_set()
                and request.startswith(b"POST /v1/chat/completions") and self.rep_two()):
            self.stopped.set()
            threading.Thread(target=self._stop_engine, args=(self.engine,), daemon=True).start()
        return False

    @staticmethod
    def _stop_engine(pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        time.sleep(STOPPED_S)  # the fault: the engine stopped this long, the server serving on
        os.kill(pid, signal.SIGCONT)


def test_an_engine_stopped_mid_rep_voids_the_rep_as_its_own(testbed: tb_mod.Testbed,
                                                           tmp_path: Path) -> None:
    port = free_port()
    server = serve(LaunchPlan("stall-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "2048", "-np", "2",
        "-t", "1", "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    results = tmp_path / "results"
    proxy = StoppingProxy(port, results)
    proxy.start()
    assert proxy.ready.wait(10)
    spec = write(tmp_path, stall_campaign(proxy.port))
    try:
        engine = subprocess.Popen([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                                   "--results-dir", str(results)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        proxy.engine = engine.pid  # `run --headless` is the engine process itself
        out, err = engine.communicate(timeout=600)
        print(out[-3000:])
        assert engine.returncode == 0, err
    finally:
        proxy.stop()
        server.stop()
    assert proxy.stopped.is_set(), "rep 2's requests never reached the server"
    run = next(results.iterdir())
    control = [e for e in read_events(run / "journal.jsonl") if e.get("window") == "control"]
    assert not [e for e in control if e["kind"] == "leak_suspected"]
    header, _ = read_rep(run / "windows/s1-control/reps/prose-c2-1-2.jsonl")
    assert header["client"]["stall_s"] >= STALL_S, header["client"]
    assert header["client"]["client_bound"] is True, header["client"]  # the client's, said so
    assert header["void"].startswith("client stalled: its load loop stopped for"), header
    [void] = [e for e in control if e["kind"] == "row_void"]
    assert void["attempt"] == 1 and "rep 2: client stalled" in void["reason"], void
    # Rep 2 is not kept as a rep of attempt 1; the rewarmed attempt 2 measures it again.
    assert [e["rep"] for e in control if e["kind"] == "rep_done" and e["attempt"] == 1] == [1]
    row = next(r for r in csv.DictReader((run / "throughput.csv").open()) if r["window"] == "control")
    assert row["attempts"] == "2" and row["status"] != "void", row
