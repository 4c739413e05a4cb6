"""Control drift: each session's control against the previous session's (on its own place, when
sessions run on places) and a baseline run's.

The controls are one configuration measured again, so their delta is noise between boots; it is
drift when it is larger than the noise between boots the run measured (engine.method.verdict:
the delta's p-value below the campaign's error rate, for this one comparison), or the declared
noise where none was measured.
"""

from __future__ import annotations

import csv
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine import files
from engine.method import stats
from engine.method.boots import BootNoise
from engine.method.verdict import Rule, versus
from engine.record import results
from engine.record.judgement import fallback_noise
from engine.record.receipts import read_rep, source_paths
from engine.record.state import earlier_sessions
from engine.words import CONTROL, USABLE_ROWS, Verdict

DRIFT = "drift.json"


def _c1_rows(run_dir: Path) -> list[dict[str, str]]:
    """The controls' rows at the lowest concurrency measured (C1 when there is one); a campaign
    of open-loop rates only: at its lowest rate."""
    path = run_dir / results.THROUGHPUT
    if not path.exists():
        return []
    with files.open_text(path) as f:
        rows = [r for r in csv.DictReader(f) if r["window"] == CONTROL and r["agg_tok_s"]
                and r["status"] in USABLE_ROWS]
    closed = [r for r in rows if not r.get("rate")]
    if closed:
        low = min(int(r["concurrency"]) for r in closed)
        return [r for r in closed if int(r["concurrency"]) == low]
    low_rate = min((float(r["rate"]) for r in rows), default=None)
    return [r for r in rows if low_rate is not None and float(r["rate"]) == low_rate]


def rep_tok_s(run_dir: Path, row: dict[str, str]) -> list[float]:
    """A row's reps' tok/s over its basis (steady window or whole rep) from the receipts it names;
    none when it names none or one is gone."""
    try:
        reps = [read_rep(p) for p in source_paths(run_dir, row.get("source") or "")]
    except (OSError, ValueError):
        return []
    return stats.receipt_tok_s(reps, int(row["concurrency"]), row.get("basis") or "")


def _drift_row(row: dict[str, str], reps: list[float], ref_tok_s: float, ref_reps: list[float],
               ref_spread: float, against: str, rule: Rule, noise: BootNoise) -> dict[str, Any]:
    tok_s, spread = float(row["agg_tok_s"]), float(row["spread"] or 0)
    v = versus(reps, [ref_reps], noise) if reps and ref_reps else None
    iv = v.interval() if v is not None else None
    delta = v.delta if v is not None else tok_s / ref_tok_s - 1 if ref_tok_s else None
    p = v.p() if v is not None else None

    def pct(x: float | None) -> float | None:
        return None if x is None else round(x * 100, 2)
    return {"session": row["session"], "class": row["class"],
            "concurrency": int(row["concurrency"]), "against": against, "agg_tok_s": tok_s,
            "reference_tok_s": ref_tok_s, "delta_pct": pct(delta),
            "delta_lo_pct": pct(iv[0]) if iv else None, "delta_hi_pct": pct(iv[1]) if iv else None,
            "method": v.method() if v is not None else "the medians alone: no receipts",
            "boot_noise_pct": pct(noise.sd) if noise.usable else None, "boot_noise_how": noise.how(),
            "p_value": p,
            "spread": spread, "reference_spread": ref_spread,
            "verdict": Verdict.DRIFT if p is not None and p < rule.error_rate else Verdict.WITHIN_NOISE}


def control_drift(run_dir: Path, order: Sequence[str], places: Mapping[str, str], rule: Rule,
                  noise: Mapping[tuple[str, int], BootNoise], baseline_dir: Path | None = None
                  ) -> list[dict[str, Any]]:
    """Each session's control against the nearest earlier session's, per class at C1: delta in
    percent with its interval, judged against the noise between boots at its concurrency
    (``noise``; the rule's declared one where none was measured).
    ``order``: the campaign's sessions; ``places``: session -> the place it ran on, when sessions
    run on places: then only a session of the same place is earlier (one that ran before it there;
    see engine.record.state.earlier_sessions); the report compares places after the run.

    With ``baseline_dir`` (another run), also against that run's controls: per class, the median
    of its sessions' control rows (spread: the largest of theirs; reps: all of theirs).
    """
    def noise_at(cls: str, c: int) -> BootNoise:
        return noise.get((cls, c)) or fallback_noise(rule)

    by_class: dict[str, dict[str, dict[str, str]]] = {}
    for row in _c1_rows(run_dir):
        by_class.setdefault(row["class"], {})[row["session"]] = row
    out: list[dict[str, Any]] = []
    for cls_rows in by_class.values():
        for session in order:
            cur = cls_rows.get(session)
            prev = next((cls_rows[s] for s in earlier_sessions(order, places, session)
                         if s in cls_rows), None)
            if cur is not None and prev is not None:
                out.append(_drift_row(cur, rep_tok_s(run_dir, cur), float(prev["agg_tok_s"]),
                                      rep_tok_s(run_dir, prev), float(prev["spread"] or 0),
                                      _against(prev["session"], places), rule,
                                      noise_at(cur["class"], int(cur["concurrency"]))))
    if baseline_dir is not None:
        base: dict[str, list[dict[str, str]]] = {}
        for row in _c1_rows(baseline_dir):
            base.setdefault(row["class"], []).append(row)
        for cls, rows in by_class.items():
            if cls not in base:
                continue
            ref = stats.median([float(r["agg_tok_s"]) for r in base[cls]]) or 0.0
            ref_spread = max(float(r["spread"] or 0) for r in base[cls])
            ref_reps = [x for r in base[cls] for x in rep_tok_s(baseline_dir, r)]
            out += [_drift_row(rows[s], rep_tok_s(run_dir, rows[s]), ref, ref_reps, ref_spread,
                               f"baseline {baseline_dir.name}", rule,
                               noise_at(cls, int(rows[s]["concurrency"])))
                    for s in order if s in rows]
    return out


def _against(session: str, places: Mapping[str, str]) -> str:
    return f"{session}-{CONTROL}" + (f" (place {places[session]})" if session in places else "")


_WRITING = threading.Lock()  # places' controls end at once: drift.json is computed and written whole


def write_drift(run_dir: Path, order: Sequence[str], places: Mapping[str, str], rule: Rule,
                noise: Mapping[tuple[str, int], BootNoise], baseline_dir: Path | None = None
                ) -> list[dict[str, Any]]:
    with _WRITING:
        drift = control_drift(run_dir, order, places, rule, noise, baseline_dir)
        results.write_json(run_dir / DRIFT, {"baseline": str(baseline_dir) if baseline_dir else None,
                                             "rule": rule.text(), "rows": drift})
    return drift


def drift_summary(rows: list[dict[str, Any]]) -> tuple[Verdict, str, float | None]:
    """Verdict, one-line summary and the worst delta of one session's drift rows."""
    worst = max(rows, key=lambda r: abs(r["delta_pct"] or 0))
    verdict = Verdict.DRIFT if any(r["verdict"] == Verdict.DRIFT for r in rows) else Verdict.WITHIN_NOISE
    summary = ", ".join(f"{r['class']} C{r['concurrency']} "
                        + ("n/a" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}%")
                        + (f" [{r['delta_lo_pct']:+.1f}, {r['delta_hi_pct']:+.1f}]"
                           if r.get("delta_lo_pct") is not None else "")
                        + f" vs {r['against']}" for r in rows)
    return verdict, summary, worst["delta_pct"]
