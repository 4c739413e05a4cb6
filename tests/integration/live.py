"""What the integration tier's modules share to drive a real engine: the ``ruler`` command line,
the journal of a running engine read and waited on, an engine stopped whatever state it is in, and
a fault-injecting TCP proxy (SlowingProxy) that holds back chosen responses of a real server, and a
class's acceptance measured against a live server as a rep measures it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import control
from engine.campaign.sources.item import plain_item
from engine.method import acceptance
from engine.record.journal import read_events
from engine.record.liveness import engine_alive, read_pid
from engine.run.counters import metrics_delta, scrape
from engine.run.loadgen import PassPlan
from engine.run.shards import measure_pass
from engine.runtime import process as rp
from engine.runtime.base import LaunchPlan, free_port
from engine.servers.client import ServerClient

RULER = [sys.executable, "-m", "engine"]


def events(run: Path) -> list[dict[str, Any]]:
    return read_events(run / "journal.jsonl")


def wait_for(run: Path, pred: Callable[[list[dict[str, Any]]], bool], timeout: float = 120,
             what: str = "") -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        evs = events(run)
        if pred(evs):
            return evs
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last events: "
                         f"{[e['kind'] for e in events(run)[-8:]]}")


def kinds(evs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in evs if e["kind"] == kind]


def journaled_receipts(run: Path, evs: list[dict[str, Any]]) -> dict[Path, bytes]:
    """The receipts of the passes the journal says finished, byte for byte. A receipt written in
    the instant before its rep_done line (a kill between the two) is not a finished rep: a
    resumed run measures that rep again, over the same name."""
    return {run / e["file"]: (run / e["file"]).read_bytes()
            for e in evs if e["kind"] in ("rep_done", "warm_done")}


def finish(run: Path) -> None:
    """Leave no engine behind: abort it and wait for the lock to go."""
    if engine_alive(run):
        with contextlib.suppress(OSError):
            control.send(run, "abort")
        deadline = time.monotonic() + 60
        while engine_alive(run) and time.monotonic() < deadline:
            time.sleep(0.2)
        pid = read_pid(run)
        if pid and engine_alive(run):
            os.kill(pid, signal.SIGKILL)


def serve(plan: LaunchPlan) -> rp.ProcessServer:
    """A real server as a process whose output is read as it prints (a thread keeps the last
    lines), as a window's boot reader does: a pipe nobody reads fills at 64 KiB, and the server's
    next log line then blocks its loop, so a request hangs (seen: llama-server stuck in a pipe
    write after a few hundred requests, its /health still answering)."""
    server = rp.ProcessServer(plan)
    threading.Thread(target=deque, args=(server.lines(), 200), daemon=True,
                     name=f"drain-{plan.name}").start()
    return server


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


# The slow rep's requests take about HOLD + 1 times as long: a rep at about a thirteenth of the
# others (92 % below) clears the leak rule's bar while the other two reps disagree by up to about
# 70 % (a loaded 2-core machine's, seen at 35 %), where a quarter's (75 % below) failed there.
HOLD = 12.0


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


def class_acceptance(url: str, adapter: ServerClient, prompt: str, reps: int = 2,
                     requests: int = 2, max_tokens: int = 32) -> dict[str, Any]:
    """A class's acceptance (engine.method.acceptance) measured as a rep measures it: ``reps``
    passes of ``requests`` sequential requests, each read through the counters' delta around it
    (counters.scrape). Each rep's requests' own counts must add up to its delta, key by key where
    they have the key (llama.cpp's timings have no steps and no positions); the row figures come
    back with ``deltas``, each rep's delta, and ``summed``, the keys every request had."""
    out, summed = [], set()
    for _ in range(reps):
        before = scrape(url, adapter)
        result = measure_pass(PassPlan(url, adapter, [plain_item(prompt)], 1, requests, max_tokens,
                                       {"temperature": 0, "seed": 1}, {}, 120))
        after = scrape(url, adapter)
        delta, why, _ = metrics_delta(before, after)
        assert delta is not None, why
        accs = [r["acceptance"] for r in result.records if r.get("acceptance")]
        assert accs, "no request said what it drafted"
        for key in delta:
            if all(key in a for a in accs):
                assert sum(a[key] for a in accs) == delta[key], key
                summed.add(key)
        out.append(({"metrics_delta": delta}, result.records))
    return {**acceptance.row_figures(out), "deltas": [h["metrics_delta"] for h, _ in out],
            "summed": summed}
