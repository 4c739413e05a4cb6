"""Simulation (not a test): the coverage of the precision rule's intervals on A/A pairs.

    .venv/bin/python bench/precision_sim.py [--trials 4000] [--precision 0.03] [--reps 3] [--max-reps 20]

Per noise level (the sd of log tok/s between reps): ``--trials`` pairs of a control row and a
window row whose reps are drawn alike (log-normal; the true delta is 0), each row grown by the
stopping rule of engine.method.precision (Stein's two-stage: the first ``--reps`` reps set the
variance; reps are added until the half-width reaches ``--precision``, ``--max-reps`` is taken,
or it cannot be reached within it). It prints, beside the fixed first stage alone, the share of
intervals that miss the true delta (the rule keeps it at about 5 %), the window rows' mean reps,
and the share that reached the precision; then the naive rule (stop when the plain interval over
every rep so far is narrow enough) on the same pairs, which misses more.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.method import precision
from engine.method.delta import relative_delta

LEVELS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1)


def naive(sigma: float, rule: precision.Rule, trials: int, seed: int = 1) -> tuple[float, float]:
    """Stop the moment the plain Welch interval over every rep is narrow enough: the share of
    intervals missing 0, and the window rows' mean reps."""
    rng = random.Random(f"naive:{seed}:{sigma!r}")
    missed = reps = 0

    def draw() -> float:
        return math.exp(rng.gauss(0, sigma))

    for _ in range(trials):
        control = [draw() for _ in range(rule.stage)]
        while len(control) < rule.max_reps and (precision.self_half(control, len(control)) or 0) \
                > rule.target(control=True):
            control.append(draw())
        window = [draw() for _ in range(rule.stage)]
        while len(window) < rule.max_reps and (precision.half_width(
                relative_delta(window, control)) or 0) > rule.precision:
            window.append(draw())
        iv = relative_delta(window, control)
        assert iv is not None and iv.lo is not None and iv.hi is not None
        missed += not iv.lo <= 0 <= iv.hi
        reps += len(window)
    return missed / trials, reps / trials


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--precision", type=float, default=0.03)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-reps", type=int, default=20)
    args = ap.parse_args()
    rule = precision.Rule(args.precision, args.max_reps, args.reps)
    band = 1.96 * math.sqrt(0.05 * 0.95 / args.trials)
    print(f"A/A pairs: {args.trials} per noise level, precision {args.precision}, first stage "
          f"{args.reps} reps, max_reps {args.max_reps}; a miss rate within 5 % +- {band:.1%} is "
          "what 95 % intervals give\n")
    print(f"{'noise sd':>9} | {'fixed: miss':>11} | {'rule: miss':>10} {'reps':>5} {'reached':>8} "
          f"| {'naive: miss':>11} {'reps':>5}")
    for sigma in LEVELS:
        fixed, _, _ = precision.coverage(sigma, rule, args.trials, sequential=False)
        missed, reps, reached = precision.coverage(sigma, rule, args.trials)
        n_missed, n_reps = naive(sigma, rule, args.trials)
        print(f"{sigma:>9.3f} | {fixed:>11.1%} | {missed:>10.1%} {reps:>5.1f} {reached:>8.0%} "
              f"| {n_missed:>11.1%} {n_reps:>5.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
