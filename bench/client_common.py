"""What bench/client_bench.py's tables share: measuring a client's process tree from outside
(its CPU time from /proc and the server's chunk count, every :data:`SAMPLE` seconds; a run's
figures from its steady window) and the tables' cells."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

CHUNKS_PER_REQUEST = 200
LAG_TICK = 0.005
SAMPLE = 0.02  # the sampler's period
WINDOW = (0.1, 0.9)  # the steady window: these fractions of a run's chunks
TICKS = os.sysconf("SC_CLK_TCK")
TOOLS = ("ruler", "aiohttp", "vllm", "guidellm", "aiperf")
PROMPTS = ["Write a short story about a lighthouse keeper.",
           "Explain how a hash map works, step by step.",
           "Describe the water cycle to a ten-year-old.",
           "Write a Python function that merges two sorted lists, with comments."]


class NotRun(Exception):
    """A peer that cannot be installed or run here: the message says exactly why."""


def _tree_cpu(root: int, seen: dict[int, float]) -> float:
    """CPU seconds of ``root`` and its descendants: each process's own user + system time (not
    its children's, which ``seen`` counts once each, at the last value read before they went)."""
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            seen[pid] = (int(fields[11]) + int(fields[12])) / TICKS
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return sum(seen.values())


class Sampler:
    """(time, tree CPU seconds, progress) every :data:`SAMPLE` seconds on a thread, for one run."""

    def __init__(self, root: int, progress: Callable[[], float]) -> None:
        self.root, self.progress = root, progress
        self.samples: list[tuple[float, float, float]] = []
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), _tree_cpu(self.root, self._seen),
                                 self.progress()))
            self._stop.wait(SAMPLE)

    def stop(self) -> list[tuple[float, float, float]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def steady(samples: list[tuple[float, float, float]]) -> dict[str, float] | None:
    """The run's figures over its steady window: from the first sample at or past the 10th
    percentile of its chunks to the first at or past the 90th."""
    if len(samples) < 3:
        return None
    base, total = samples[0][2], samples[-1][2] - samples[0][2]
    if total <= 0:
        return None
    lo = next(s for s in samples if s[2] - base >= WINDOW[0] * total)
    hi = next(s for s in samples if s[2] - base >= WINDOW[1] * total)
    if hi[0] - lo[0] < 2 * SAMPLE or hi[2] <= lo[2]:
        return None
    chunks = hi[2] - lo[2]
    return {"t0": lo[0], "t1": hi[0], "chunks": chunks, "rate": chunks / (hi[0] - lo[0]),
            "us": (hi[1] - lo[1]) / chunks * 1e6, "cpu_s": hi[1] - lo[1], "total": total}


def p99(xs: list[float]) -> float:
    xs = sorted(xs) or [0.0]
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


def pin(cpus: set[int]) -> Callable[[], None] | None:
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def lag_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r["lag_p99_ms"] is None:
        return "n/a"
    return f"{r['lag_p99_ms']:.2f}"


def ratio(x: float | None, base: float | None, spec: str = ".2f") -> str:
    return format(x / base, spec) if x is not None and base else "-"


def of(r: dict[str, Any] | None, key: str) -> float | None:
    return None if r is None else r[key]


def split_cpus(spec: str) -> tuple[set[int], set[int]]:
    """(the clients' cores, the server's): the last N cores this process may use go to the
    clients, the rest to the server (all of them too, where only N are)."""
    have = sorted(os.sched_getaffinity(0))
    if spec == "all":
        return set(), set()
    k = int(spec)
    clients = set(have[-k:])
    return clients, set(have[:-k]) or set(have)


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)
