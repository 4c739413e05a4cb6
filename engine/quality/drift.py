"""Control drift: each session's control against the previous session's (on its own place, when
sessions run on places) and a baseline run's."""

from __future__ import annotations

import csv
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.record import results
from engine.record.events import CONTROL, USABLE_ROWS, Verdict
from engine.record.state import earlier_sessions

DRIFT = "drift.json"


def _c1_rows(run_dir: Path) -> list[dict[str, str]]:
    """The controls' rows at the lowest concurrency measured (C1 when there is one)."""
    path = run_dir / results.THROUGHPUT
    if not path.exists():
        return []
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r["window"] == CONTROL and r["agg_tok_s"]
                and r["status"] in USABLE_ROWS]
    if not rows:
        return []
    low = min(int(r["concurrency"]) for r in rows)
    return [r for r in rows if int(r["concurrency"]) == low]


def _drift_row(row: dict[str, str], ref_tok_s: float, ref_spread: float,
               against: str) -> dict[str, Any]:
    tok_s, spread = float(row["agg_tok_s"]), float(row["spread"] or 0)
    delta = (tok_s - ref_tok_s) / ref_tok_s * 100 if ref_tok_s else None
    inside = delta is not None and abs(delta) <= max(spread, ref_spread) * 100
    return {"session": row["session"], "class": row["class"],
            "concurrency": int(row["concurrency"]), "against": against, "agg_tok_s": tok_s,
            "reference_tok_s": ref_tok_s, "delta_pct": None if delta is None else round(delta, 2),
            "spread": spread, "reference_spread": ref_spread,
            "verdict": Verdict.WITHIN_SPREAD if inside else Verdict.DRIFT}


def control_drift(run_dir: Path, order: Sequence[str], places: Mapping[str, str],
                  baseline_dir: Path | None = None) -> list[dict[str, Any]]:
    """Each session's control against the nearest earlier session's, per class at C1: delta in
    percent. ``order``: the campaign's sessions; ``places``: session -> the place it ran on, when
    sessions run on places: then only a session of the same place is earlier (one that ran before
    it there; see engine.record.state.earlier_sessions); the report compares places after the run.

    With ``baseline_dir`` (another run), also against that run's controls: per class, the median
    of its sessions' control rows (spread: the largest of theirs).
    """
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
                out.append(_drift_row(cur, float(prev["agg_tok_s"]), float(prev["spread"] or 0),
                                      _against(prev["session"], places)))
    if baseline_dir is not None:
        base: dict[str, list[dict[str, str]]] = {}
        for row in _c1_rows(baseline_dir):
            base.setdefault(row["class"], []).append(row)
        for cls, rows in by_class.items():
            if cls not in base:
                continue
            ref = float(np.median([float(r["agg_tok_s"]) for r in base[cls]]))
            ref_spread = max(float(r["spread"] or 0) for r in base[cls])
            out += [_drift_row(rows[s], ref, ref_spread, f"baseline {baseline_dir.name}")
                    for s in order if s in rows]
    return out


def _against(session: str, places: Mapping[str, str]) -> str:
    return f"{session}-{CONTROL}" + (f" (place {places[session]})" if session in places else "")


_WRITING = threading.Lock()  # places' controls end at once: drift.json is computed and written whole


def write_drift(run_dir: Path, order: Sequence[str], places: Mapping[str, str],
                baseline_dir: Path | None = None) -> list[dict[str, Any]]:
    with _WRITING:
        drift = control_drift(run_dir, order, places, baseline_dir)
        results.write_json(run_dir / DRIFT, {"baseline": str(baseline_dir) if baseline_dir else None,
                                             "rows": drift})
    return drift


def drift_summary(rows: list[dict[str, Any]]) -> tuple[Verdict, str, float | None]:
    """Verdict, one-line summary and the worst delta of one session's drift rows."""
    worst = max(rows, key=lambda r: abs(r["delta_pct"] or 0))
    verdict = Verdict.DRIFT if any(r["verdict"] == Verdict.DRIFT for r in rows) else Verdict.WITHIN_SPREAD
    summary = ", ".join(f"{r['class']} C{r['concurrency']} "
                        + ("n/a" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f}%")
                        + f" vs {r['against']}" for r in rows)
    return verdict, summary, worst["delta_pct"]
