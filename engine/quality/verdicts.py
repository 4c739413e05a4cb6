"""``verdicts.csv``: one row per window, every check's verdict visible without opening the JSON."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.record import results

VERDICTS = "verdicts.csv"
VERDICT_COLUMNS = [
    "session", "window", "axis", "lossy", "knobs", "greedy", "first_divergence", "dlogp_p50",
    "dlogp_p99", "dlogp_max", "floored", "self_score", "kl_mean", "kl_p99", "kl_floor",
    "no_effect", "tool_calls", "reference",
]


def verdict_row(session: str, window: str, axis: str, lossy: bool,
                verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One verdicts.csv row from a window's verdict events (check -> event)."""
    def fig(check: str, key: str) -> Any:
        return (verdicts.get(check, {}).get("figures") or {}).get(key)

    def word(check: str) -> str:
        return verdicts[check]["verdict"] if check in verdicts else ""

    greedy_text = (f"{fig('greedy', 'identical')}/{fig('greedy', 'n')}"
                   if fig("greedy", "n") is not None else word("greedy"))
    tools = verdicts.get("tool_probe")
    return {
        "session": session, "window": window, "axis": axis, "lossy": lossy,
        "knobs": word("knobs"), "greedy": greedy_text,
        "first_divergence": fig("greedy", "first_divergence"),
        "dlogp_p50": fig("teacher_forced", "p50"), "dlogp_p99": fig("teacher_forced", "p99"),
        "dlogp_max": fig("teacher_forced", "max"), "floored": fig("teacher_forced", "floored"),
        "self_score": verdicts.get("self_score", {}).get("summary", ""),
        "kl_mean": fig("kl", "mean"), "kl_p99": fig("kl", "p99"), "kl_floor": fig("kl", "floor"),
        "no_effect": word("no_effect"),
        "tool_calls": tools["summary"].split(" ")[0] if tools else "",
        "reference": fig("greedy", "reference") or "",
    }


def write_verdicts(run_dir: Path, rows: Iterable[dict[str, Any]]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, VERDICT_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: _cell(row.get(k)) for k in VERDICT_COLUMNS})
    results.write_atomic(run_dir / VERDICTS, buf.getvalue())


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v
