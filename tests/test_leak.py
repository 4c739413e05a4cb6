"""A leaked pass caught live, voided, rewarmed and rerun, on the real testbed.

The slow rep is made by a slowing TCP proxy in front of the real llama-server (fault injection: a
real server cannot be told to leak an autotune pass on cue). The proxy forwards every byte; while
``slow`` is set it holds each chunk from the server for a while, as a server stuck in an autotune
pass would.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine import testbed as tb_mod
from engine.journal import read_events
from engine.runtime import process as rp
from engine.runtime.base import LaunchPlan, free_port

CAMPAIGN = """\
name: leak
server: llamacpp
runtime: attach
attach:
  url: http://127.0.0.1:{port}/v1
control:
  args: {{}}
windows:
  - name: same
    axis: the same server (the proxy decides which rep leaks)
    change:
      env: {{UNUSED: "1"}}
sessions:
  s1: [same]
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours."]}}
  concurrency: [2]
  reps: 3
  requests_per_rep: 4
  max_tokens: 16
leak: {{min_concurrency: 2, spread: 0.25, max_reruns: 2}}
"""


class SlowingProxy(threading.Thread):
    def __init__(self, upstream: int) -> None:
        super().__init__(daemon=True)
        self.upstream, self.port = upstream, free_port()
        self.slow = threading.Event()
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    delay: bool) -> None:
        try:
            while data := await reader.read(65536):
                if delay and self.slow.is_set():
                    await asyncio.sleep(0.15)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        await asyncio.gather(self._pipe(reader, up_w, False), self._pipe(up_r, writer, True))

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


def test_leaked_rep_is_voided_rewarmed_and_rerun(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    port = free_port()
    server = rp.start(LaunchPlan("leak-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "2048", "-np", "2",
        "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    proxy = SlowingProxy(port)
    proxy.start()
    assert proxy.ready.wait(10)
    spec = tmp_path / "leak.yaml"
    spec.write_text(CAMPAIGN.format(port=proxy.port))
    results = tmp_path / "results"
    engine = subprocess.Popen([sys.executable, "-m", "engine.cli", "run", str(spec), "--headless",
                               "--results-dir", str(results)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        # Slow down exactly rep 2 of the first attempt of the control's row.
        journal = None
        deadline = time.monotonic() + 300
        phase = "before"
        while engine.poll() is None and time.monotonic() < deadline and phase != "after":
            journal = journal or next(results.glob("*/journal.jsonl"), None)
            reps = [e for e in read_events(journal) if e["kind"] == "rep_done"
                    and e["window"] == "control"] if journal else []
            if phase == "before" and len(reps) == 1:
                proxy.slow.set()
                phase = "slow"
            elif phase == "slow" and len(reps) == 2:
                proxy.slow.clear()
                phase = "after"
            time.sleep(0.02)
        out, _ = engine.communicate(timeout=600)
        print(out[-3000:])
        assert engine.returncode == 0
    finally:
        if engine.poll() is None:
            engine.kill()
        proxy.stop()
        server.stop()
    run = next(results.iterdir())
    events = read_events(run / "journal.jsonl")
    control = [e for e in events if e.get("window") == "control"]
    leaks = [e for e in control if e["kind"] == "leak_suspected"]
    assert leaks and (leaks[0]["attempt"], leaks[0]["rep"]) == (1, 2), leaks
    voids = [e for e in control if e["kind"] == "row_void"]
    assert voids and voids[0]["attempt"] == 1 and voids[0]["rerun"] is True
    attempt1 = [e["agg_tok_s"] for e in control if e["kind"] == "rep_done" and e["attempt"] == 1]
    assert attempt1[1] < 0.5 * max(attempt1[0], attempt1[2]), attempt1
    # The rerun: a fresh warm pass, then all reps again; the void attempt's receipts are kept.
    warms = [e["attempt"] for e in control if e["kind"] == "warm_done"]
    assert warms[:2] == [1, 2]
    assert len([e for e in control if e["kind"] == "rep_done" and e["attempt"] == 2]) == 3
    for rep in (1, 2, 3):
        assert (run / "windows" / "s1-control" / "reps" / f"prose-c2-1-{rep}.jsonl").exists()
    row = next(r for r in csv.DictReader((run / "throughput.csv").open())
               if r["window"] == "control")
    assert int(row["attempts"]) >= 2
    assert "prose-c2-1-" not in row["source"]  # the row counts only its final attempt
