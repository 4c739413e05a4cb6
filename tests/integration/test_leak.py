"""A leaked pass caught live, voided, rewarmed and rerun, on the real testbed.

The slow rep is made by a slowing TCP proxy in front of the real llama-server (fault injection: a
real server cannot be told to leak an autotune pass on cue). The proxy forwards every byte; a chat
request that opens while the engine's own journal says rep 2 of the control's first attempt is under
way (rep 1 done, rep 2 not) has its whole response held back, three times as long as the server took
to give it, as a server stuck in an autotune pass would. Keying on the journal, not on a request
count, keeps the slow rep the same whatever else the engine sends (probes, warm passes, quality).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from engine import testbed as tb_mod
from engine.record.journal import read_events
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
leak: {{min_concurrency: 2, spread: 0.5, max_reruns: 1}}  # the reps but the slow one within 25 %
quality: {{enabled: false}}
"""

HOLD = 3.0  # the slow rep's requests take about HOLD + 1 times as long


class SlowingProxy(threading.Thread):
    def __init__(self, upstream: int, slow: Callable[[], bool]) -> None:
        super().__init__(daemon=True)
        self.upstream, self.port = upstream, free_port()
        self.slow, self.slowed = slow, 0
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()

    def holds(self, request: bytes) -> bool:
        """Whether the response to this request (its first bytes) is held back whole."""
        if request.startswith(b"POST /v1/chat/completions") and self.slow():
            self.slowed += 1
            return True
        return False

    async def release(self, request: bytes, response: bytes, took: float) -> bytes:
        """A held response as the client gets it: the same bytes, HOLD times as late as the server
        took to give them.

        Relative, not a fixed delay: under CPU load the server itself slows, and a fixed delay
        could drown in that noise; a held rep is always about HOLD + 1 times slower.
        """
        await asyncio.sleep(HOLD * took)
        return response

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    held_for: bytes | None = None) -> None:
        """Forward every byte; with ``held_for`` (the request), the whole response, through
        :meth:`release`."""
        t0, held = time.monotonic(), b""
        try:
            while data := await reader.read(65536):
                if held_for is not None:
                    held += data
                    continue
                writer.write(data)
                await writer.drain()
            if held_for is not None:
                writer.write(await self.release(held_for, held, time.monotonic() - t0))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def forward(self, first: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        up_w.write(first)
        await asyncio.gather(self._pipe(reader, up_w),
                             self._pipe(up_r, writer, held_for=first if self.holds(first) else None))

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.forward(await reader.read(65536), reader, writer)

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


def during_rep_two(results: Path) -> Callable[[], bool]:
    """True while the control's first attempt has exactly one rep done (so rep 2 is running)."""
    def check() -> bool:
        journals = list(results.glob("*/journal.jsonl"))
        if not journals:
            return False
        done = [e for e in read_events(journals[0]) if e["kind"] == "rep_done"
                and e.get("window") == "control" and e.get("attempt") == 1]
        return len(done) == 1
    return check


def test_leaked_rep_is_voided_rewarmed_and_rerun(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    port = free_port()
    # One thread: two on two busy cores spin at every barrier (campaigns/demo-smollm2.yaml), and
    # the leak rule needs the reps other than the slow one to agree.
    server = rp.ProcessServer(LaunchPlan("leak-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "2048", "-np", "2",
        "-t", "1", "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    results = tmp_path / "results"
    proxy = SlowingProxy(port, slow=during_rep_two(results))
    proxy.start()
    assert proxy.ready.wait(10)
    spec = tmp_path / "leak.yaml"
    spec.write_text(CAMPAIGN.format(port=proxy.port))
    try:
        out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                              "--results-dir", str(results)], capture_output=True, text=True,
                             timeout=600)
        print(out.stdout[-3000:])
        assert out.returncode == 0, out.stderr
    finally:
        proxy.stop()
        server.stop()
    assert proxy.slowed == 4  # requests_per_rep: every request of rep 2, and nothing else
    run = next(results.iterdir())
    events = read_events(run / "journal.jsonl")
    control = [e for e in events if e.get("window") == "control"]
    leaks = [e for e in control if e["kind"] == "leak_suspected"]
    assert leaks and (leaks[0]["attempt"], leaks[0]["rep"]) == (1, 2), leaks
    assert [(e["attempt"], e["rep"]) for e in leaks].count((1, 2)) == 1  # said once, when it landed
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
