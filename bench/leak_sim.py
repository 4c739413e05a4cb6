"""Simulation (not a test): how often the leak rule voids pure noise, and how often it catches a slow rep.

    .venv/bin/python bench/leak_sim.py [--trials 5000] [--pool 8] [--spread 0.10]
                                       [--ratio 2] [--joint] [--min-reps 3]

A cell is a noise model (Gaussian, or Student's t with 5 or 3 degrees of freedom, scaled to the same
standard deviation), how much noisier the row is than the rest of its load (1x, 2x, 4x), the rep
noise (the standard deviation of log tok/s of the row's own reps: 2, 5, 10, 20 %) and the reps a
row (2, 3, 5). Each of ``--trials`` rows is drawn around one level (pure noise) beside ``--pool``
earlier rows of three reps at the load, drawn from the same model at the rep noise over the ratio
(the run's rows so far); the same rows then have one rep, at a random place, slowed to 0.5x (a
leaked pass, the seed's "one rep at ~135 tok/s against two at ~700" is 0.19x) and to 0.7x. Each row
is read by ruler's rule, ``engine.method.leak.read`` with the campaign default ``leak.spread``
(``--spread``), and by the rule this one replaced: its code is read from git (``git show
OLD:engine/method/leak.py``), so the comparison runs that code, not a copy. It prints, in percent
of rows, the noise rows voided (false voids) and the slowed rows whose slow rep is condemned.

A second table reads rows alone at their load (the first row at each load of a run: no pool), at
0.5x and at the seed's 0.19x. Last, the best any rule could do: the Neyman-Pearson test of a
half-speed rep in a row as noisy as the pool against a pure-noise row 2x or 4x noisier, the pool's
noise known, Gaussian, at 1 % false voids.

For this run only, to show what another choice would trade: ``--ratio`` sets the rule's ``RATIO``
(the noisiest row, against its pool, it holds its rate for), ``--joint`` makes it hold in t3 tails
and ``RATIO`` at once (every pair of ``leak.WORLDS``' tails and ratios), ``--min-reps`` its
``MIN_REPS`` (2: two reps judged beside the pool).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
import types
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.method import leak  # noqa: E402  (after the path, so the checkout's own)

OLD = "a28ecf1"  # the last commit with the Gaussian-calibrated, fully pooled rule
MODELS = {"Gaussian": None, "t5": 5, "t3": 3}
RATIOS = (1, 2, 4)
NOISE = (0.02, 0.05, 0.10, 0.20)
REPS = (2, 3, 5)
SLOW = (None, 0.5, 0.7)  # None: pure noise
ALONE_SLOW = (None, 0.5, 0.19)


def old_rule() -> types.ModuleType:
    """The replaced engine/method/leak.py, as committed at ``OLD``."""
    src = subprocess.run(["git", "show", f"{OLD}:engine/method/leak.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType("old_leak")
    sys.modules[mod.__name__] = mod  # its dataclasses look their module up
    exec(compile(src, f"{OLD}:engine/method/leak.py", "exec"), mod.__dict__)  # ruler's own history
    return mod


def noise(rng: np.random.Generator, tails: int | None, shape: tuple[int, ...]) -> np.ndarray:
    if tails is None:
        return rng.standard_normal(shape)
    return rng.standard_t(tails, shape) / math.sqrt(tails / (tails - 2))


Cell = tuple[int | None, int, float, int]  # tails (None: Gaussian), row vs pool, rep noise, reps


def cell(rules: Sequence[types.ModuleType], where: Cell, trials: int, pool_rows: int, spread: float,
         slows: Sequence[float | None] = SLOW) -> list[list[float]]:
    """Per rule, the % of rows voided under pure noise and caught at each slowed rep. The same
    seeded rows for every rule and every slowing."""
    tails, ratio, sigma, n = where
    rng = np.random.default_rng([n, ratio, round(sigma * 100), tails or 0])
    levels = 1000 * np.exp(sigma * noise(rng, tails, (trials, n)))
    pools = 1000 * np.exp(sigma / ratio * noise(rng, tails, (trials, pool_rows, 3)))
    at = rng.integers(0, n, trials)
    out = []
    for rule in rules:
        got = []
        for slow in slows:
            hits = 0
            for i in range(trials):
                values = levels[i].tolist()
                if slow is not None:
                    values[at[i]] *= slow
                reading = rule.read(values, spread, pools[i].tolist())
                leaked = str(reading.shape) == "leak"
                hits += leaked if slow is None else leaked and reading.rep == at[i]
            got.append(100 * hits / trials)
        out.append(got)
    return out


def best_power(n: int, sigma: float, ratio: int, sims: int = 200_000) -> float:
    """The Neyman-Pearson test's power: a half-speed rep in a row at ``sigma`` (the pool's noise,
    known) against a pure-noise row ``ratio`` times noisier, at 1 % false voids. The row's level
    is unknown, so the test reads the reps' residuals from their mean."""
    rng = np.random.default_rng([n, ratio, round(sigma * 100)])
    shift = math.log(2)

    def log_lr(res: np.ndarray) -> np.ndarray:
        def dens(r: np.ndarray, var: float) -> np.ndarray:
            d: np.ndarray = -(r ** 2).sum(axis=1) / (2 * var) - (n - 1) / 2 * math.log(var)
            return d
        slowed = []
        for j in range(n):
            mean = np.full(n, shift / n)
            mean[j] -= shift
            slowed.append(dens(res - mean, sigma ** 2))
        lr: np.ndarray = (np.logaddexp.reduce(np.array(slowed), axis=0) - math.log(n)
                          - dens(res, (ratio * sigma) ** 2))
        return lr

    null = ratio * sigma * rng.standard_normal((sims, n))
    alt = sigma * rng.standard_normal((sims, n))
    alt[:, 0] -= shift
    bar = np.quantile(log_lr(null - null.mean(axis=1, keepdims=True)), 0.99)
    return 100 * float(np.mean(log_lr(alt - alt.mean(axis=1, keepdims=True)) > bar))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5000)
    ap.add_argument("--pool", type=int, default=8, help="earlier rows of 3 reps at the load")
    ap.add_argument("--spread", type=float, default=0.10, help="leak.spread")
    ap.add_argument("--ratio", type=float, default=leak.RATIO, help="the rule's RATIO, for this run")
    ap.add_argument("--joint", action="store_true", help="the rule holds in t3 tails and RATIO at once")
    ap.add_argument("--min-reps", type=int, default=leak.MIN_REPS, help="the rule's MIN_REPS, for this run")
    args = ap.parse_args()
    heavy = sorted({t for t, _ in leak.WORLDS if t is not None})
    leak.WORLDS = tuple((t, r) for t in (None, *heavy) for r in (1.0, args.ratio)
                        if args.joint or t is None or r == 1.0)
    leak.MIN_REPS = args.min_reps
    rules = (old_rule(), leak)
    t0 = time.perf_counter()
    worlds = ", ".join(f"{'Gaussian' if t is None else f't{t}'} {r:g}x" for t, r in leak.WORLDS)
    print(f"{args.trials} rows a cell beside {args.pool} earlier rows of 3 reps at the load; old: {OLD}'s "
          f"rule, new: ruler's (held in {worlds}; MIN_REPS {leak.MIN_REPS}); leak.spread "
          f"{args.spread:g}. Percent of rows, old / new. Noise: the sd of log tok/s of the row's reps; "
          "the pool's is that over the ratio.")
    print()
    head = ["model", "row vs pool", "noise", "reps", "false void %", "0.5x caught %", "0.7x caught %"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, tails in MODELS.items():
        for ratio in RATIOS:
            for sigma in NOISE:
                for n in REPS:
                    old, new = cell(rules, (tails, ratio, sigma, n), args.trials, args.pool, args.spread)
                    cells = [f"{o:.1f} / {w:.1f}" for o, w in zip(old, new, strict=True)]
                    print(f"| {name} | {ratio}x | {sigma:.0%} | {n} | " + " | ".join(cells) + " |",
                          flush=True)
    print()
    print("Alone at its load (no earlier row), the row as noisy as the server:")
    print()
    head = ["model", "noise", "reps", "false void %", "0.5x caught %", "0.19x caught %"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in ("Gaussian", "t3"):
        for sigma in NOISE:
            for n in REPS[1:]:
                old, new = cell(rules, (MODELS[name], 1, sigma, n), args.trials, 0, args.spread, ALONE_SLOW)
                cells = [f"{o:.1f} / {w:.1f}" for o, w in zip(old, new, strict=True)]
                print(f"| {name} | {sigma:.0%} | {n} | " + " | ".join(cells) + " |", flush=True)
    print()
    print("The best any rule could do (Neyman-Pearson, the pool's noise known, Gaussian, 1 % false "
          "voids): % of half-speed reps caught in a row as noisy as the pool, against a pure-noise "
          "row 2x | 4x noisier")
    for n in REPS[1:]:
        print(f"  {n} reps: " + "; ".join(
            f"{sigma:.0%} noise {best_power(n, sigma, 2):.0f} | {best_power(n, sigma, 4):.0f}"
            for sigma in NOISE[1:3]))
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
