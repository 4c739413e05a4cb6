"""The report's acceptance per draft position: per class and load, each window's curve beside its
session's control's (engine.method.acceptance defines the curve; the chart is chartdata.curve_data)."""

from __future__ import annotations

from engine.report.run import Row, RunView
from engine.report.text import acceptance_text, table
from engine.words import CONTROL, load_text


def curve_text(row: Row | None) -> str:
    if row is None or (row.accept_len is None and row.accept_rate is None):
        return "-"
    if not row.curve:
        return "none (the server gives no per-position counts)"
    return " ".join(f"{x:.2f}" for x in row.curve)


def section(view: RunView) -> list[str]:
    rows = [r for r in view.rows if r.accept_len is not None or r.accept_rate is not None]
    if not any(r.accept_per_pos for r in rows):
        return []
    body = []
    for r in rows:
        control = view.rows_of(r.session, CONTROL).get(r.shape) if r.window != CONTROL else None
        body.append([r.session, r.window, r.cls, load_text(r.concurrency, r.rate), acceptance_text(r),
                     curve_text(r), curve_text(control) if r.window != CONTROL else "(this row)"])
    return ["## Acceptance per draft position", "",
            "Per draft position (0 first), the share of verify steps that accepted the draft token "
            "there, from the server's own counters: it never rises with the position and sums to "
            "the length minus one. Length and rate carry their 95 % t interval across the reps. "
            "vLLM and llama.cpp give it in /metrics, SGLang per request; llama.cpp's per-request "
            "timings (its fallback without --metrics) give neither positions nor verify steps.", "",
            *table(["session", "window", "class", "load", "accept len / rate", "per position",
                    "control per position"], body)]
