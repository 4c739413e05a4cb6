"""Simulation (not a test): the verdicts' error rates and what a decision costs, by ruler's own
judgement (engine.record.judged through engine.record.simulate) on synthetic campaigns.

    .venv/bin/python bench/verdict_sim.py [--campaigns 60] [--windows 8]

A campaign: ``--windows`` windows x 2 classes x C1/C8/C64, 3 reps, each session booting the control
first and again last (control_position both); rep noise (sd of log tok/s within a boot) 2-20 %,
boot noise (sd between boots of one server) 0-5 %.

``verdicts``: per noise, for 1 and 3 sessions, the share of A/A campaigns with any false effect
(the family-wise rate Holm keeps at 5 %) and the false effects per campaign, beside the rule
before (Welch's interval on one boot's reps with the 10 % floor of leak.spread, no control again,
no correction: its code run from git, ``git show e39764b:engine/method/delta.py``); the share of
unchanged rows shown "no observable effect"; and the power: the share of truly changed rows (2 of
the windows, every class and load) called an effect in the right direction at -5/-10/-15 %.

``cost``: reps (GPU time) per settled row (an effect or shown none) in a campaign where half the
windows move by -10 %, for this design against a fixed three-rep design without the control again
(the noise between boots declared) held to the same rule.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.method.verdict import Call, Rule  # noqa: E402
from engine.record.judged import judgement  # noqa: E402
from engine.record.simulate import Design, campaign, rates  # noqa: E402
from engine.words import CONTROL  # noqa: E402

RULE = Rule(0.05, "holm", 0.05, 0.05)
NOISE = [(0.02, 0.0), (0.02, 0.05), (0.05, 0.0), (0.05, 0.05), (0.10, 0.0), (0.10, 0.05), (0.20, 0.05)]


@functools.cache
def old_rule() -> types.ModuleType:
    """The delta rule before issue 34, from git: Welch on one boot's reps, the 10 % floor."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", "e39764b:engine/method/delta.py"],
                         capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType("old_delta")
    sys.modules["old_delta"] = mod  # dataclasses look their module up
    exec(compile(src, "old_delta.py", "exec"), mod.__dict__)
    return mod


def old_false(design: Design, rep: float, boot: float, campaigns: int, seed: int) -> tuple[float, float]:
    old = old_rule()
    rng = np.random.default_rng(seed)
    anyf = total = 0
    for _ in range(campaigns):
        st = campaign(Design(design.windows, design.sessions, design.loads, design.classes, design.reps,
                             again=False), rep, boot, {}, rng)
        wrong = 0
        for r in st.rows.values():
            if r.window == CONTROL:
                continue
            ctl = st.rows[r.key.replace(f"-{r.window}/", f"-{CONTROL}/")]
            iv = old.relative_delta(r.row["rep_tok_s"], ctl.row["rep_tok_s"])
            wrong += old.observable(iv, 0.10)
        anyf += wrong > 0
        total += wrong
    return anyf / campaigns, total / campaigns


def verdicts(args: argparse.Namespace) -> None:
    print(f"A/A and A/B campaigns of {args.windows} windows x 2 classes x 3 loads, 3 reps, "
          f"{args.campaigns} campaigns a cell; Holm at 0.05, TOST within ±5 %")
    print(f"{'rep':>5} {'boot':>5} {'sess':>4} | {'any false':>9} {'false/camp':>10} | "
          f"{'old any':>7} {'old/camp':>8} | {'none shown':>10} | {'power -5%':>9} {'-10%':>6} {'-15%':>6}")
    for rep, boot in NOISE:
        for sessions in (1, 3):
            d = Design(windows=args.windows, sessions=sessions)
            aa = rates(d, RULE, rep, boot, 0.0, args.campaigns, seed=1)
            oa, of = old_false(d, rep, boot, args.campaigns, seed=1) if sessions == 1 else (np.nan, np.nan)
            power = [rates(d, RULE, rep, boot, e, max(10, args.campaigns // 3), seed=2, changed=2).power
                     for e in (-0.05, -0.10, -0.15)]
            print(f"{rep:>5.0%} {boot:>5.0%} {sessions:>4} | {aa.any_false:>9.1%} {aa.false_per:>10.2f} | "
                  f"{oa:>7.1%} {of:>8.2f} | {aa.none_true:>10.1%} | "
                  + " ".join(f"{p:>{w}.1%}" for p, w in zip(power, (9, 6, 6), strict=True)), flush=True)


def cost(args: argparse.Namespace) -> None:
    print(f"reps per settled row (an effect, or none shown), half of {args.windows} windows at -10 %, "
          f"{args.campaigns} campaigns; the design against three reps without the control again")
    print(f"{'rep':>5} {'boot':>5} {'sess':>4} | {'both: reps/settled':>18} {'settled':>8} | "
          f"{'first: reps/settled':>19} {'settled':>8} | ratio")
    for rep, boot in NOISE:
        for sessions in (1, 3):
            out = []
            for again in (True, False):
                d = Design(windows=args.windows, sessions=sessions, again=again)
                rng = np.random.default_rng(5)
                effects = dict.fromkeys(range(args.windows // 2), -0.10)
                settled = rows = 0
                for _ in range(args.campaigns):
                    j = judgement(campaign(d, rep, boot, effects, rng), RULE)
                    settled += sum(x.call in (Call.EFFECT, Call.NONE) for x in j.rows.values())
                    rows += len(j.rows)
                share = settled / rows
                out.append((d.rep_count() * args.campaigns / settled if settled else float("inf"), share))
            (a, sa), (b, sb) = out
            print(f"{rep:>5.0%} {boot:>5.0%} {sessions:>4} | {a:>18.1f} {sa:>8.1%} | {b:>19.1f} {sb:>8.1%} | "
                  f"{a / b:.2f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="?", choices=["verdicts", "cost", "all"], default="all")
    p.add_argument("--campaigns", type=int, default=60)
    p.add_argument("--windows", type=int, default=8)
    args = p.parse_args()
    if args.what in ("verdicts", "all"):
        verdicts(args)
    if args.what in ("cost", "all"):
        print()
        cost(args)


if __name__ == "__main__":
    main()
