"""Simulation (not a test): how often the leak rule voids pure noise, and how often it catches a slow rep.

    .venv/bin/python bench/leak_sim.py [--trials 5000] [--pool 8] [--spread 0.10]

Per noise level (the sd of log tok/s between reps) and reps per row: ``--trials`` rows whose reps
are drawn log-normal around one level (pure noise), and as many with one rep, at a random place,
slowed to 0.5x and to 0.7x the level (a leaked pass). Each row is read by ruler's own rule,
``engine.method.leak.read`` with the campaign default ``leak.spread`` (``--spread``): beside
``--pool`` earlier rows of three reps at the load, drawn at the same noise (the run's rows so far),
and alone (the first row at its load). It prints the share of noise rows voided (false voids) and
the share of slowed rows whose slow rep is condemned (detections), beside the rule this one replaced:
its code is read from git (``git show OLD:engine/method/leak.py``, the commit before the change), so
the comparison runs that code, not a copy.
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.method import leak  # noqa: E402  (after the path, so the checkout's own)

OLD = "e39764b"  # the last commit with the range-based rule
NOISE = (0.02, 0.05, 0.10, 0.20)
REPS = (3, 4, 5, 8)
SLOW = (0.5, 0.7)

Rule = Callable[[Sequence[float], int | None], bool]  # the reps, the slowed rep: condemned?


def old_rule() -> types.ModuleType:
    """The replaced engine/method/leak.py, as committed at ``OLD``."""
    src = subprocess.run(["git", "show", f"{OLD}:engine/method/leak.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType("old_leak")
    sys.modules[mod.__name__] = mod  # its dataclasses look their module up
    exec(compile(src, f"{OLD}:engine/method/leak.py", "exec"), mod.__dict__)  # ruler's own history
    return mod


def row(rng: random.Random, sigma: float, n: int) -> list[float]:
    return [1000 * math.exp(rng.gauss(0, sigma)) for _ in range(n)]


def rate(rule: str, old: types.ModuleType, sigma: float, n: int, slow: float | None, trials: int,
         pool_rows: int, spread: float) -> float:
    """The share of rows the rule voids (``slow`` None: pure noise) or whose slowed rep it
    condemns, in %. The same seeded rows for every rule."""
    rng = random.Random(f"{sigma}:{n}:{slow}")
    hits = 0
    for _ in range(trials):
        pool = [row(rng, sigma, 3) for _ in range(pool_rows)]
        values = row(rng, sigma, n)
        at = rng.randrange(n)
        if slow is not None:
            values[at] *= slow
        if rule == "old":
            reading = old.read(values, spread)
        else:
            reading = leak.read(values, spread, pool if rule == "pool" else ())
        leaked = str(reading.shape) == "leak"
        hits += leaked if slow is None else leaked and reading.rep == at
    return 100 * hits / trials


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5000)
    ap.add_argument("--pool", type=int, default=8, help="earlier rows of 3 reps at the load")
    ap.add_argument("--spread", type=float, default=0.10, help="leak.spread")
    args = ap.parse_args()
    old = old_rule()
    t0 = time.perf_counter()
    rules = ("old", "pool", "alone")
    print(f"{args.trials} rows a cell; new: ruler's rule beside {args.pool} earlier rows at the load | "
          f"alone; old: {OLD}'s; leak.spread {args.spread:g}. Percent of rows.")
    print()
    head = ["noise", "reps", "false void % old/new/alone", "0.5x caught % old/new/alone",
            "0.7x caught % old/new/alone"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for sigma in NOISE:
        for n in REPS:
            cells = []
            for slow in (None, *SLOW):
                got = [rate(r, old, sigma, n, slow, args.trials, args.pool, args.spread) for r in rules]
                cells.append(" / ".join(f"{g:.1f}" for g in got))
            print(f"| {sigma:.0%} | {n} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
