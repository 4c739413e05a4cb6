"""Simulation (not a test): the verdicts' error rates, power and what a decision costs in GPU time,
by ruler's own judgement (engine.record.judgement through engine.record.simulate) on synthetic
campaigns whose truth is known.

    .venv/bin/python bench/verdict_sim.py [errors|power|cost|all] [--campaigns 200]

A campaign: 6 windows x 2 classes (prose, code) x C1/C8/C32. Noise between boots per class and
load (sd of log tok/s; Gaussian, or Student's t with 3 df scaled to the same sd), a session's
shift at each shape, reps within a boot by 3 % unless said.

``errors``: the share of A/A campaigns with any false effect (the family-wise rate the rule keeps
at 5 %) and the share of null rows shown "no observable effect", per noise model, sessions (1-4)
and control placement (both: first and last; interleaved: about the root of the windows).
``power``: the share of rows of a window truly moved by -3/-5/-10/-20 % called an effect, and of
such windows called as a window.
``cost``: GPU minutes per row decided rightly (an effect called in its direction, or shown within
the margin where the truth is) on a campaign like the issue's (four inert windows, flash
attention off at -30 % everywhere, a q8_0 KV cache at -7 % at C1 only), for the fixed three-rep
grid (control first and last, every window in each of S sessions) judged by today's rule and by
the rule before it (its code run from git: the noise pooled over classes and sessions, Holm over
every row), against boots added until decided (the control first and last, or interleaved; 3 reps,
which the leak rule needs at C8 and above; from 2 sessions up to the 4-session grid's boots). A
boot costs 60 s beside its passes, a pass 4 s.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.method.verdict import Call, Rule  # noqa: E402
from engine.record.simulate import Design, Effects, Noise, Rates, campaign, rates, truth  # noqa: E402

RULE = Rule(0.05, "holm", 0.05, None)
BEFORE = "75c6a6d"  # the rule before issue 45: its judgement, run from git

NOISES: list[tuple[str, Noise]] = [
    ("equal 3 %", Noise(boot=0.03)),
    ("classes 1 % / 8 %", Noise(boot={"prose": 0.01, "code": 0.08})),
    ("classes 2 % / 5 %", Noise(boot={"prose": 0.02, "code": 0.05})),
    ("t3 tails 3 %", Noise(boot=0.03, tails="t3")),
    ("session shift 5 %", Noise(boot=0.03, shift=0.05)),
    ("shapes correlated .7", Noise(boot=0.03, rho=0.7)),
    ("loads 1 % / 2 % / 4 %", Noise(boot=0.01, by_load={8: 2.0, 32: 4.0})),
]
# As seen on an H100 (../shared/gpu/README.md): C1 quiet, prose C8 about 1.5 %, code C8 about 10-25 %.
GPU = Noise(boot={"prose": 0.01, "code": 0.02}, rep=0.02, by_load={8: 2.0, 32: 3.0})
GPU_CODE = Noise(boot={"prose": 0.01, "code": 0.04}, rep=0.02, by_load={8: 2.5, 32: 3.0})
MIXED: Effects = {0: -0.30, 1: {1: -0.07}}  # flash attention off everywhere; q8_0 at C1 only


@functools.cache
def before() -> types.ModuleType:
    """The judgement before issue 45, from git, beside today's (its modules under other names)."""
    words = types.ModuleType("before_words")
    import engine.words as now

    words.__dict__.update(now.__dict__)
    words.CONTROL_BOOTS = (now.CONTROL, now.CONTROL_AGAIN)  # type: ignore[attr-defined]
    sys.modules["before_words"] = words
    out = None
    modules = (("before_boots", "engine/method/boots.py"), ("before_verdict", "engine/method/verdict.py"),
               ("before_judged", "engine/record/judged.py"))
    for name, path in modules:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:{path}"], capture_output=True,
                             text=True, check=True).stdout
        for old, new in (("engine.method.boots", "before_boots"), ("engine.method.verdict", "before_verdict"),
                         ("engine.words", "before_words")):
            src = src.replace(old, new)
        mod = types.ModuleType(name)
        sys.modules[name] = mod  # dataclasses look their module up
        exec(compile(src, f"{name}.py", "exec"), mod.__dict__)
        out = mod
    assert out is not None
    return out


def before_rates(design: Design, noise: Noise, effects: Effects, campaigns: int, seed: int) -> Rates:
    """The rule before on the fixed grid (its declared 5 % where nothing was booted twice)."""
    old = before()
    rule = sys.modules["before_verdict"].Rule(0.05, "holm", 0.05, 0.05)
    rng = np.random.default_rng(seed)
    anyf = right = wrong_none = 0
    for _ in range(campaigns):
        st = campaign(design, noise, effects, rng)
        j = old.judgement(st, rule)
        wrong = bad = 0
        questions = {(r.window, r.cls, r.concurrency): (r, judged) for key, judged in j.rows.items()
                     if (r := st.rows[key]) is not None}
        for r, judged in questions.values():
            t = truth(effects, int(r.window[1:]), r.concurrency)
            v = judged.versus
            called = judged.call.value == Call.EFFECT and v is not None
            wrong += called and t == 0
            right += (called and t != 0 and (v.log_delta > 0) == (t > 0)) or \
                (judged.call.value == Call.NONE and abs(t) < 0.05)
            bad += judged.call.value == Call.NONE and abs(t) >= 0.05
        anyf += wrong > 0
        wrong_none += bad > 0
    n = campaigns
    return Rates(n, anyf / n, 0, 0, 0, 0, design.boots() * design.boot_minutes(), right / n, wrong_none / n)


def errors(args: argparse.Namespace) -> None:
    print(f"A/A campaigns of 6 windows x 2 classes x C1/C8/C32, 3 reps, {args.campaigns} campaigns a "
          "cell; closed test at 0.05 (Bonferroni across windows, Simes within), TOST within ±5 %")
    print(f"{'noise between boots':>22} {'controls':>11} | " + " | ".join(
        f"{s} sess: false  none" for s in (1, 2, 3, 4)))
    for name, noise in NOISES:
        for control in ("both", "interleaved"):
            cells = []
            for sessions in (1, 2, 3, 4):
                r = rates(Design(windows=6, sessions=sessions, control=control), RULE, noise, 0.0,
                          args.campaigns, seed=11)
                cells.append(f"{r.any_false:>12.1%} {r.none_true:>5.1%}")
            print(f"{name:>22} {control:>11} | " + " | ".join(cells), flush=True)
    print()
    print("Declared noise: control first, one session, nothing booted twice; the calls rest on "
          "verdict.boot_noise 5 %")
    for true in (0.03, 0.05, 0.08, 0.10):
        r = rates(Design(windows=6, sessions=1, control="first"), replace(RULE, boot_noise=0.05),
                  Noise(boot=true), 0.0, args.campaigns, seed=12)
        print(f"  true {true:.0%}: any false effect {r.any_false:.1%}")
    r = rates(Design(windows=6, sessions=1, control="first"), RULE, Noise(boot=0.08), 0.0, args.campaigns,
              seed=12)
    print(f"  nothing declared, true 8 %: any false effect {r.any_false:.1%} (no interval: nothing called)")


def power(args: argparse.Namespace) -> None:
    n = max(20, args.campaigns // 4)
    print(f"Power: one window of 6 moved at every shape, boots 3 % / reps 3 %, {n} campaigns a cell: "
          "rows called in the right direction (the window called)")
    print(f"{'controls':>11} {'sess':>4} | " + " | ".join(f"{e:>+4.0%}: rows window" for e in
                                                        (-0.03, -0.05, -0.10, -0.20)))
    for control in ("both", "interleaved"):
        for sessions in (1, 2, 3, 4):
            cells = []
            for e in (-0.03, -0.05, -0.10, -0.20):
                r = rates(Design(windows=6, sessions=sessions, control=control), RULE, Noise(boot=0.03),
                          e, n, seed=21, changed=1)
                cells.append(f"{r.power:>10.1%} {r.windows_found:>6.1%}")
            print(f"{control:>11} {sessions:>4} | " + " | ".join(cells), flush=True)


def cost(args: argparse.Namespace) -> None:
    n = max(20, args.campaigns // 4)
    print(f"GPU minutes per row decided rightly, {n} campaigns a design: 4 inert windows, one at "
          "-30 % everywhere, one at -7 % at C1 only (36 window rows)")
    for label, noise in (("H100-like: C1 1 %/2 %, C8 x2, C32 x3 (prose/code)", GPU),
                         ("noisier code: C1 1 %/4 %, C8 x2.5, C32 x3", GPU_CODE),
                         ("equal 3 %", Noise(boot=0.03))):
        print(f"\n{label}")
        print(f"  {'design':>52} | {'any false':>9} {'bad none':>8} | {'right/camp':>10} "
              f"{'GPU min':>7} {'min/right':>9}")
        grid4 = Design(windows=6, sessions=4, control="both", reps=3)
        rows: list[tuple[str, Rates]] = []
        for s in (2, 3, 4):
            d = Design(windows=6, sessions=s, control="both", reps=3)
            grid = f"grid: both, 3 reps, {s} sessions"
            rows.append((f"{grid}, today's rule", rates(d, RULE, noise, 0, n, 31, effects=MIXED)))
            rows.append((f"{grid}, the rule before", before_rates(d, noise, MIXED, n, 31)))
        budget = replace(RULE, until_decided=True, max_boots=grid4.boots())
        for control in ("both", "interleaved"):
            seq = Design(windows=6, sessions=2, control=control, reps=3)
            rows.append((f"until decided: {control}, 3 reps, <= {grid4.boots()} boots", rates(
                seq, budget, noise, 0, n, 31, effects=MIXED)))
        base = next(r for name, r in rows if name.startswith("grid: both, 3 reps, 4 sessions, today"))
        for name, r in rows:
            per = r.minutes / r.right if r.right else float("inf")
            ratio = per / (base.minutes / base.right) if base.right else float("nan")
            print(f"  {name:>52} | {r.any_false:>9.1%} {r.wrong_none:>8.1%} | {r.right:>10.1f} "
                  f"{r.minutes:>7.0f} {per:>9.2f}  x{ratio:.2f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="?", choices=["errors", "power", "cost", "all"], default="all")
    p.add_argument("--campaigns", type=int, default=200)
    args = p.parse_args()
    for what, fn in (("errors", errors), ("power", power), ("cost", cost)):
        if args.what in (what, "all"):
            fn(args)
            print()


if __name__ == "__main__":
    main()
