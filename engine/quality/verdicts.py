"""``verdicts.csv``: one row per window, every check's verdict visible without opening the JSON."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.record import results
from engine.sanitize import csv_document
from engine.words import Check, Verdict

VERDICTS = "verdicts.csv"
VERDICT_COLUMNS = [
    "session", "window", "axis", "lossy", "knobs", "greedy", "first_divergence", "dlogp_p50",
    "dlogp_p99", "dlogp_max", "floored", "self_score", "kl_mean", "kl_p99", "kl_floor",
    "no_effect", "tool_calls", "reference",
]


def verdict_row(session: str, window: str, axis: str, lossy: bool,
                verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One verdicts.csv row from a window's verdict events (check -> event)."""
    def fig(check: Check, key: str) -> Any:
        return (verdicts.get(check, {}).get("figures") or {}).get(key)

    def word(check: Check) -> str:
        return verdicts[check]["verdict"] if check in verdicts else ""

    greedy_text = (f"{fig(Check.GREEDY, 'identical')}/{fig(Check.GREEDY, 'n')}"
                   if fig(Check.GREEDY, "n") is not None else word(Check.GREEDY))
    tools = verdicts.get(Check.TOOL_PROBE)
    return {
        "session": session, "window": window, "axis": axis, "lossy": lossy,
        "knobs": word(Check.KNOBS), "greedy": greedy_text,
        "first_divergence": fig(Check.GREEDY, "first_divergence"),
        "dlogp_p50": fig(Check.TEACHER_FORCED, "p50"), "dlogp_p99": fig(Check.TEACHER_FORCED, "p99"),
        "dlogp_max": fig(Check.TEACHER_FORCED, "max"), "floored": fig(Check.TEACHER_FORCED, "floored"),
        "self_score": verdicts.get(Check.SELF_SCORE, {}).get("summary", ""),
        "kl_mean": fig(Check.KL, "mean"), "kl_p99": fig(Check.KL, "p99"), "kl_floor": fig(Check.KL, "floor"),
        "no_effect": word(Check.NO_EFFECT),
        # N/M parseable calls, or the verdict where no count stands (an error, a template blind to tools).
        "tool_calls": (f"{fig(Check.TOOL_PROBE, 'ok')}/{fig(Check.TOOL_PROBE, 'n')}"
                       if tools and tools["verdict"] in (Verdict.OK, Verdict.FAILED)
                       else word(Check.TOOL_PROBE)),
        "reference": fig(Check.GREEDY, "reference") or "",
    }


def write_verdicts(run_dir: Path, rows: Iterable[dict[str, Any]]) -> None:
    # Figures to six significant digits; every cell made inert by the one CSV writer.
    results.write_atomic(run_dir / VERDICTS, csv_document(
        VERDICT_COLUMNS, ({k: _figure(v) for k, v in row.items()} for row in rows)))


def _figure(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) else v
