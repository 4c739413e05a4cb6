"""A pass on several worker processes (engine.run.loadgen.shard_count says how many), each with
its own event loop and its share of the pass's workers: the shards, kept from pass to pass on the
thread that runs them, draw the next request from one shared counter, start on one signal and
send back their records, which merge into the pass's. :func:`measure_pass` is a pass from
synchronous code, on one loop or on shards.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import resource
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from engine.run.loadgen import PassPlan, PassResult, run_on_loop, run_pass

SHARD_START_TIMEOUT = 60.0  # a shard process that is not ready by then is an engine failure


def _context() -> Any:
    """Shard processes fork from a server process that has only imported this module: a fork of
    the engine (threads, open files) would be unsafe and a fresh interpreter slow to start."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _shard(conn: mpc.Connection, counter: Any) -> None:
    """One shard process: pass after pass, wait for the go, run its workers, send back its
    PassResult (or its failure); it ends with the engine's end of the pipe."""
    # Ctrl-C reaches the whole process group: the engine decides and says stop through the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        while True:
            msg = conn.recv()
            if msg[0] != "pass":
                continue  # a stop that came after this shard's pass had ended
            _, workers, plan = msg
            before = resource.getrusage(resource.RUSAGE_SELF)
            stopped = False

            def take(n: int = plan.n_requests) -> int | None:
                with counter.get_lock():
                    i: int = counter.value
                    if i >= n:
                        return None
                    counter.value = i + 1
                return i

            def stop() -> bool:  # polled by run_pass every 0.1 s; the engine gone is a stop too
                nonlocal stopped
                stopped = stopped or conn.poll()
                return stopped

            conn.send("ready")
            if conn.recv() != "go":
                continue
            res = run_on_loop(run_pass(plan, stop=stop, workers=workers, take=take))
            # The process's CPU over the pass, not only its loop's: every bit is the client's.
            after = resource.getrusage(resource.RUSAGE_SELF)
            res.client_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            conn.send(res)
    except (EOFError, BrokenPipeError):
        pass  # the engine is gone, or done with its shards
    except BaseException:  # noqa: BLE001 - the engine reports it; a shard has no one else to tell
        with contextlib.suppress(OSError):
            conn.send(traceback.format_exc())


class _Shards:
    """A thread's shard processes, kept from pass to pass: a fork, a loop and its io_uring rings
    per shard per pass cost more CPU than a short pass's chunks. They end with the thread (its
    pipes are closed) or the engine."""

    def __init__(self) -> None:
        self.ctx = _context()
        self.counter = self.ctx.Value("q", 0)  # the next request index, shared by the shards
        self.procs: list[Any] = []
        self.pipes: list[mpc.Connection] = []

    def take(self, n: int) -> tuple[list[Any], list[mpc.Connection]]:
        while len(self.procs) < n:
            mine, theirs = self.ctx.Pipe()
            p = self.ctx.Process(target=_shard, name=f"ruler-load-shard-{len(self.procs)}",
                                 daemon=True, args=(theirs, self.counter))
            p.start()
            theirs.close()
            self.procs.append(p)
            self.pipes.append(mine)
        with self.counter.get_lock():
            self.counter.value = 0
        return self.procs[:n], self.pipes[:n]

    def close(self) -> None:
        for c in self.pipes:
            c.close()
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()


_pools = threading.local()


def sharded(plan: PassPlan, shards: int, stop: Callable[[], bool]) -> PassResult:
    """The pass on ``shards`` processes: worker w runs on shard w % shards, every shard draws the
    next request index from one shared counter (as the workers of one loop share one queue), all
    start on one signal, and their records merge, sorted by index, into one PassResult.

    Timestamps stay comparable: time.monotonic is one clock for every process of the machine.
    """
    pool = getattr(_pools, "shards", None) or _Shards()
    _pools.shards = None  # until this pass has ended well: a failed pass's shards are not reused
    procs, pipes = pool.take(shards)
    try:
        for k, c in enumerate(pipes):
            c.send(("pass", list(range(k, plan.concurrency, shards)), plan))
        for k, c in enumerate(pipes):
            try:
                ready = c.poll(SHARD_START_TIMEOUT) and c.recv() == "ready"
            except EOFError:
                ready = False
            if not ready:
                raise RuntimeError(f"load shard {k} did not start (exit code {procs[k].exitcode})")
        t0 = time.monotonic()
        for c in pipes:
            c.send("go")
        results: dict[int, PassResult] = {}
        stopping = False
        while len(results) < shards:
            if not stopping and stop():
                stopping = True
                for k, c in enumerate(pipes):
                    if k not in results:
                        with contextlib.suppress(OSError):  # a dead shard is found below
                            c.send("stop")
            for ready in mpc.wait([c for k, c in enumerate(pipes) if k not in results], timeout=0.1):
                k = pipes.index(ready)  # type: ignore[arg-type]  # wait returns some of the pipes given
                c = pipes[k]
                try:
                    got = c.recv()
                except EOFError:
                    raise RuntimeError(f"load shard {k} died (exit code {procs[k].exitcode})") from None
                if not isinstance(got, PassResult):
                    raise RuntimeError(f"load shard {k} failed:\n{got}")
                results[k] = got
        wall = time.monotonic() - t0
    except BaseException:
        pool.close()
        raise
    _pools.shards = pool
    parts = [results[k] for k in range(shards)]
    records = sorted((r for s in parts for r in s.records), key=lambda r: r["index"])
    for s in parts:
        s.records = []  # merged above; the shard keeps its figures
    return PassResult(records, max(s.lag_p99_ms for s in parts), sum(s.client_cpu_s for s in parts),
                      wall, sum(s.achieved_concurrency * s.wall_s for s in parts) / wall if wall > 0
                      else 0.0, stall_s=max(s.stall_s for s in parts), shards=parts)


def measure_pass(plan: PassPlan, *, shards: int = 1,
                 stop: Callable[[], bool] = lambda: False) -> PassResult:
    """:func:`run_pass` from synchronous code: on its own uvloop event loop, or on ``shards``
    worker processes, each with its own.

    uvloop, not the default loop: its per-event cost is about half, and at C=64 the loop's lag is
    what keeps the per-chunk timestamps honest (bench/client_bench.py prints both).
    """
    if shards <= 1:
        return run_on_loop(run_pass(plan, stop=stop))
    return sharded(plan, shards, stop)
