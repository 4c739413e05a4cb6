"""The rows' steady state, what their spread is made of, and the reps to a precision: a section
of report.md for runs measured with the steady window (a row with a ``basis``), with the rules
stated; a run from before it has none."""

from __future__ import annotations

from engine.method import leak as rule
from engine.report.run import Row, RunView
from engine.report.text import cell, head, table


def measured_steady(view: RunView) -> bool:
    return any(r.basis for r in view.rows)


def rules(view: RunView) -> list[str]:
    """The steady window, the leak-or-noise rule and the stopping rule, as the Methods state them."""
    c = view.campaign
    if c is None or not measured_steady(view):
        return []
    wl, leak = c.workload, c.leak
    out = [
        "- **Steady state**: a rep's tok/s is over its steady window, from the per-request "
        "records: closed loop, from the first request a worker sends after its first one, once "
        "every one of the C workers has its first token, to the last one sent before the first "
        "worker ends its last request (whole request cycles, all C in flight); open loop, from one "
        "median request duration after the first arrival to the last arrival. Each request's "
        "tokens are placed at its chunks' arrival times. A row is over the steady windows "
        "(`basis` steady) when every rep has one of at least two request cycles per worker, else "
        "over the whole reps (`basis` whole, the row's reason says why); the whole-rep tok/s stays "
        "beside it (`whole_tok_s`).",
        f"- **Leak or noise**: a row wider than {leak.spread * 100:g} % is *leak-shaped* when its "
        "lowest rep stands alone below the others: its gap below the next lowest rep, on log "
        "tok/s, clears a bar scaled to the run's noise (the pooled standard deviation of log tok/s "
        "within the run's rows at that load and the row's other reps): k noise-widths, k set so "
        f"that at most {rule.FALSE_VOID:.0%} of noise-only rows are voided, whether the noise is "
        f"Gaussian (the row as noisy as the rest or {rule.RATIO:g}x noisier) or heavy-tailed (t3), "
        f"no wider than a {rule.NOISE_MAX:.0%}-noise server's bar and never under "
        f"{leak.spread * 100:g} %. Rows of fewer than {rule.MIN_REPS} reps are not "
        + ("judged; under the precision only a row's first stage is. " if wl.precision is not None
           else "judged. ")
        + f"At C >= {leak.min_concurrency} only a "
        f"leak-shaped row is void, rewarmed and rerun (up to {leak.max_reruns} times). Any other "
        "wide row is *noise* and reported noisy with its interval (`spread_shape`, `spread_why`).",
    ]
    if wl.precision is not None:
        out.append(
            f"- **Reps to a precision** (Stein's two-stage rule): each row's first {wl.reps} reps "
            "are its first stage; their variance of log tok/s is the variance of the row's interval "
            f"(the means are over every rep). Reps are added one at a time until the 95 % interval "
            f"on a window's delta against its control is at most +-{wl.precision:.1%} wide each "
            f"side (a control's own mean: +-{wl.precision / 2 ** 0.5:.1%}), `max_reps` "
            f"({wl.max_reps}) is reached, or the rule finds it out of reach within `max_reps` "
            "(then it stops at once). The number of reps depends on the first stage alone, so the "
            "interval keeps its 95 % (bench/precision_sim.py: A/A pairs miss about 5 %).")
    return out


def section(view: RunView) -> list[str]:
    """Every row: its headline and whole-rep tok/s, the window's seconds, the spread's shape and
    why, and the reps and half-width it reached."""
    if not measured_steady(view):
        return []
    rows = sorted(view.rows, key=lambda r: (r.session, r.window, r.cls, r.concurrency, r.rate or 0))
    return ["## Steady state, spread and precision", "",
            *table(["row", f"{head('agg_tok_s')} (basis)", head("whole_tok_s"),
                    "ramp / steady / tail s", head("spread"), "shape", "reps", head("half_width"),
                    head("precision_status"), "status"],
                   [[r.label(), f"{cell(r, 'agg_tok_s')} ({r.basis})", cell(r, "whole_tok_s"),
                     " / ".join(cell(r, n) for n in ("ramp_s", "steady_s", "tail_s")),
                     cell(r, "spread"), _shape(r), r.reps, cell(r, "half_width"),
                     r.precision_status or "-", r.status] for r in rows])]


def _shape(r: Row) -> str:
    """How the rule read a wide row's reps; its reading names the shape itself ("noise: ...",
    "leak-shaped: ...")."""
    return r.spread_why or r.spread_shape or "-"
