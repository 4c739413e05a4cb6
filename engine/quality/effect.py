"""Is there anything to see? Boot facts and throughput rows of a window against its control.

A window whose boot facts equal the control's, whose throughput rows are each shown within the
campaign's margin of the control (engine.method.verdict: TOST, the noise between boots counted)
and whose greedy outputs are identical is "no observable effect" (the campaign notes: "the flags
parse and do nothing"). A row that is neither an effect nor shown within the margin leaves the
window undetermined: absence of evidence is not evidence of absence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine import files
from engine.method.verdict import Call, Rule
from engine.record.judgement import Judgement, judgement
from engine.record.state import RowState, RunState
from engine.words import Check, Verdict, load_label

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


def rows_called(j: Judgement, rows: Iterable[RowState]) -> dict[str, Any]:
    """Each of a window's rows with the campaign's call on it (engine.record.judgement: against the
    session's control boots, the noise between boots counted, the family every window row so
    far). A row without a figure on either side cannot be judged."""
    out: list[dict[str, Any]] = []
    for r in sorted(rows, key=lambda r: (r.cls, r.concurrency, r.rate or 0.0)):
        shape = {"class": r.cls, "concurrency": r.concurrency, **({"rate": r.rate} if r.rate else {})}
        judged, v = j.rows.get(r.key), j.versus(r.key)
        if judged is None or v is None:
            out.append({**shape, "judged": False})
            continue
        lo, hi = v.interval() or (None, None)
        out.append({**shape, "judged": True, "delta": round(v.delta, 4),
                    "delta_lo": None if lo is None else round(lo, 4),
                    "delta_hi": None if hi is None else round(hi, 4), "method": v.method(),
                    "call": judged.call.value, "why": judged.why(), "agg_tok_s": r.row.get("agg_tok_s")})
    return {"rows": out, "judged": bool(out) and all(r["judged"] for r in out),
            "inside": bool(out) and all(r.get("call") == Call.NONE for r in out)}


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
        elif r["call"] != Call.NONE:
            ci = (f" [{r['delta_lo']:+.1%}, {r['delta_hi']:+.1%}]" if r["delta_lo"] is not None
                  else "")
            (differ if r["call"] == Call.EFFECT else missing).append(
                f"{shape} {r['delta']:+.1%}{ci} {r['call']} ({r['why']})")
    if greedy["identical"] != greedy["n"]:
        differ.append(f"greedy {greedy['identical']}/{greedy['n']}")
    verdict = (Verdict.OBSERVABLE_EFFECT if differ else Verdict.UNDETERMINED if missing
               else Verdict.NO_OBSERVABLE_EFFECT)
    return verdict, differ + missing


def settle(state: RunState, rule: Rule, run_dir: Path) -> list[dict[str, Any]]:
    """Each window's "no observable effect" verdict again, on the run's judgement as it stands: a
    window's rows were called within the family of the windows measured before it, and the
    family grew. Its boot facts and greedy outputs are as no-effect.json recorded them; the
    windows whose verdict changes, with their new record (no-effect.json's contents, the verdict
    event's fields)."""
    j = judgement(state, rule)
    out = []
    for ws in state.windows.values():
        said = ws.verdicts.get(Check.NO_EFFECT)
        if not said or not said.get("file"):
            continue
        path = run_dir / said["file"]
        try:
            old = json.loads(files.read_text(path))
        except (OSError, ValueError):
            continue
        identical, _, n = str(old.get("greedy", "0/0")).partition("/")
        greedy = {"identical": int(identical or 0), "n": int(n or 0)}
        rows = rows_called(j, [r for r in state.rows.values()
                               if r.session == ws.session and r.window == ws.window and r.row])
        verdict, reasons = no_effect_verdict(old.get("facts_differ"), rows, greedy)
        if verdict == said.get("verdict") and rows["rows"] == old.get("rows"):
            continue
        out.append({"session": ws.session, "window": ws.window, "file": said["file"], "path": path,
                    "record": {**old, "verdict": verdict, "reasons": reasons, "rows": rows["rows"]},
                    "verdict": verdict,
                    "summary": verdict if not reasons else f"{verdict}: {'; '.join(reasons)}"})
    return out
