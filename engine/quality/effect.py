"""Is there anything to see? Boot facts and throughput rows of a window against its control.

A window whose boot facts equal the control's, whose throughput rows show no delta beyond the
noise (engine.method.delta: the interval holds 0 or the delta is within the declared noise) and
whose greedy outputs are identical is "no observable effect" (the campaign notes: "the flags parse
and do nothing").
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from engine.method.delta import METHOD, observable, relative_delta
from engine.words import USABLE_ROWS, Verdict, load_label

# Boot facts that legitimately differ from boot to boot, or come from requests rather than the
# boot: file paths (the model's type, size and shape are facts of their own), the listening URL
# (a port per window), a batch job's id (one per window), request timings, how long a boot step
# took (``*_s``: vLLM's weights.load_s and engine.init_s, SGLang's graph.elapsed_s; seen live on
# vLLM: 1.52 vs 0.33 s for the same weights) and speculative-decoding counters of served requests.
IGNORED_FACT = re.compile(
    r"(^|\.)path$|^server\.model$|^spec\.draft_model$|^server\.url$|^slurm_job$|^timing\.|^ready$"
    r"|^spec\.(accept_rate|accepted|generated|mean_len|acc_per_pos)$|^spec\.lifetime\.|_s$")


def fact_diff(window: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Boot facts that differ, ignoring the per-boot ones (IGNORED_FACT)."""
    keys = {k for k in window.keys() | control.keys() if not IGNORED_FACT.search(k)}
    return {k: [window.get(k), control.get(k)] for k in sorted(keys)
            if window.get(k) != control.get(k) or type(window.get(k)) is not type(control.get(k))}


Shape = tuple[str, int] | tuple[str, int, float | None]  # class, concurrency[, open-loop rate]
# One kind of shape key on both sides (dict keys are invariant: a union would take neither kind).
S = TypeVar("S", bound=Shape)


def rows_inside(window: dict[S, dict[str, Any]], control: dict[S, dict[str, Any]],
                floor: float = 0.0) -> dict[str, Any]:
    """Each window row against the control's row of the same shape, by the deltas' rule: inside
    (no effect seen) when the interval of the delta holds 0 or the delta is no larger than
    ``floor``, the campaign's declared noise (its leak spread): three reps within one boot
    understate the noise between two boots (seen on the demo: a no-op flag at -12 % against a
    7.5 % spread on a shared CPU, its boot facts and greedy outputs identical).
    A row that is void, failed or aborted on either side cannot be judged.
    """
    out: list[dict[str, Any]] = []
    for shape, w in sorted(window.items(), key=lambda kv: (kv[0][0], kv[0][1], (*kv[0][2:], 0.0)[0] or 0.0)):
        cls, c, rate = (*shape, None)[:3]
        ctl = control.get(shape)
        iv = None
        if ctl and w.get("status") in USABLE_ROWS and ctl.get("status") in USABLE_ROWS:
            iv = relative_delta(w.get("rep_tok_s") or [], ctl.get("rep_tok_s") or [])
        if iv is None:
            out.append({"class": cls, "concurrency": c, **({"rate": rate} if rate else {}),
                        "judged": False})
            continue
        iv = iv.rounded()
        out.append({"class": cls, "concurrency": c, **({"rate": rate} if rate else {}),
                    "judged": True, "delta": iv.delta,
                    "delta_lo": iv.lo, "delta_hi": iv.hi, "method": METHOD, "floor": floor,
                    "inside": not observable(iv, floor), "agg_tok_s": w["agg_tok_s"],
                    "control_agg_tok_s": ctl["agg_tok_s"] if ctl else None})
    return {"rows": out, "judged": bool(out) and all(r["judged"] for r in out),
            "inside": bool(out) and all(r.get("inside") for r in out)}


def no_effect_verdict(facts: dict[str, Any] | None, rows: dict[str, Any],
                      greedy: dict[str, Any]) -> tuple[Verdict, list[str]]:
    """The verdict and its reasons from the fact diff (None: no control facts), the rows and greedy."""
    differ: list[str] = []
    missing: list[str] = []
    if facts is None:
        missing.append("no control boot facts")
    elif facts:
        differ.append("boot facts differ: " + ", ".join(
            f"{k} {v[0]!r} vs {v[1]!r}" for k, v in list(facts.items())[:5]))
    if not rows["rows"]:
        missing.append("no throughput rows")
    for r in rows["rows"]:
        shape = f"{r['class']}/{load_label(r['concurrency'], r.get('rate'))}"
        if not r["judged"]:
            missing.append(f"{shape} cannot be judged (void, failed or missing)")
        elif not r["inside"]:
            ci = (f" [{r['delta_lo']:+.1%}, {r['delta_hi']:+.1%}]" if r["delta_lo"] is not None
                  else "")
            differ.append(f"{shape} {r['delta']:+.1%}{ci} beyond the noise (floor {r['floor']:.1%})")
    if greedy["identical"] != greedy["n"]:
        differ.append(f"greedy {greedy['identical']}/{greedy['n']}")
    verdict = (Verdict.OBSERVABLE_EFFECT if differ else Verdict.UNDETERMINED if missing
               else Verdict.NO_OBSERVABLE_EFFECT)
    return verdict, differ + missing
