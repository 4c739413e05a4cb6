"""A quality or ruler verdict in a few words and a colour, for the windows list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.record.state import WindowState
from engine.words import Check, Verdict
from tui.core.fmt import Seg


def _ratio(check: str, part: str) -> Callable[[dict[str, Any]], str]:
    def text(v: dict[str, Any]) -> str:
        fig = v.get("figures") or {}
        return f"{check} {fig.get(part)}/{fig.get('n')}"
    return text


def _named(v: dict[str, Any]) -> str:
    return f"{v.get('check', '')} {v.get('verdict', '')}"


# Each verdict word the engine emits (engine.words.Verdict), in a few words and a colour.
VERDICT_SEGS: dict[str, tuple[Callable[[dict[str, Any]], str], str]] = {
    Verdict.ACTS: (lambda v: "knobs act", "success"),
    Verdict.RULER_SUSPECT: (lambda v: "ruler suspect", "error"),
    Verdict.IDENTICAL: (_ratio(Check.GREEDY, "identical"), "success"),
    Verdict.DIVERGED: (_ratio(Check.GREEDY, "identical"), "error"),
    Verdict.AGREEMENT: (_ratio(Check.GREEDY, "identical"), ""),  # a figure: no colour judges it
    Verdict.NO_REFERENCE: (_named, "muted"),
    Verdict.REFERENCE: (_named, "muted"),
    Verdict.EXACT: (lambda v: f"Δlogp {v['verdict']}", "success"),
    Verdict.CLOSE: (lambda v: f"Δlogp {v['verdict']}", ""),
    Verdict.DIFFERS: (lambda v: f"Δlogp {v['verdict']}", "warning"),
    Verdict.REPEAT_IDENTICAL: (lambda v: "self-score same", "muted"),  # the scoring repeats
    Verdict.REPEAT_DIFFERS: (lambda v: "self-score differs", "warning"),
    Verdict.ABOVE_FLOOR: (lambda v: f"KL {v['verdict']}", "warning"),
    Verdict.AT_FLOOR: (lambda v: f"KL {v['verdict']}", ""),
    Verdict.FLOOR: (lambda v: f"KL {v['verdict']}", ""),
    Verdict.NO_OBSERVABLE_EFFECT: (lambda v: "no effect", "warning"),
    Verdict.OBSERVABLE_EFFECT: (lambda v: "effect seen", "success"),
    Verdict.UNDETERMINED: (lambda v: "effect ?", "muted"),
    Verdict.OK: (_ratio("tools", "ok"), "success"),
    Verdict.FAILED: (_ratio("tools", "ok"), "error"),
    Verdict.WITHIN_SPREAD: (lambda v: "no drift", "muted"),
    Verdict.WITHIN_NOISE: (lambda v: "no drift", "muted"),
    Verdict.DRIFT: (lambda v: "drift", "warning"),
    Verdict.ERROR: (_named, "error"),
    Verdict.UNSUPPORTED: (_named, "muted"),
}


def verdict_seg(v: dict[str, Any]) -> Seg:
    """A verdict event in a few words for the windows list; a word this console does not know (a
    newer engine's) is shown as it stands, without a colour that would claim to judge it."""
    text, style = VERDICT_SEGS.get(str(v.get("verdict", "")), (_named, ""))
    return text(v), style


def verdict_word(ws: WindowState, check: Check) -> str:
    return str(ws.verdicts.get(check, {}).get("verdict", ""))
