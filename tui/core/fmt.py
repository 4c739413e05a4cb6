"""The console's text: plain text plus a style tag, and the figures' formats. No Textual here.

Every cell and line is a list of segments, each ``(text, tag)``; the tag is ``error``, ``warning``,
``success``, ``accent``, ``muted``, ``bold`` or ``""``, and ``tui.widgets.text`` maps tags to theme
colours. Every colour is paired with a glyph or a word ("!", "VOID", "≠") so a NO_COLOR terminal
loses nothing.
"""

from __future__ import annotations

import math
from typing import Any

Seg = tuple[str, str]  # (text, style tag)


def fmt_secs(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0, int(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def fmt_tok(v: Any) -> str:
    if v is None or v == "":
        return "-"
    v = float(v)
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.1f}"


def fmt_rps(v: Any) -> str:
    return "-" if v is None or v == "" else f"{float(v):.2f}"


def fmt_pct(v: float | None, signed: bool = False) -> str:
    if v is None or not math.isfinite(v):  # Infinity: a spread an older journal recorded
        return "-"
    return f"{v:+.1%}" if signed else f"{v:.1%}"


def fmt_end(v: float) -> str:
    """One end of an interval in percent, signed, whole where that says it: ``+28``, ``-0.3`` (never
    ``-0``, which reads as a sign without a figure), ``0``; past +999 %, ``>+999`` (an interval on
    few degrees of freedom can reach thousands: the column keeps its width, the detail the figure)."""
    if v > 9.99:
        return ">+999"
    for digits in (0, 1):
        text = f"{v * 100:+.{digits}f}"
        if text.lstrip("+-").strip("0.") != "":
            return text
    return "0"


def fmt_ci(lo: float, hi: float) -> str:
    """A 95 % interval in percent: ``[-0.3,+28]``."""
    return f"[{fmt_end(lo)},{fmt_end(hi)}]"


_BLOCKS = "▁▂▃▄▅▆▇█"


def fmt_curve(text: Any) -> str:
    """A per-position acceptance curve (``"0.91 0.74 0.52"``, engine.method.acceptance) as one
    block a position, its height the share: ``█▆▄``; "-" for none."""
    if not text:
        return "-"
    values = [float(x) for x in str(text).split()]
    return "".join(_BLOCKS[min(len(_BLOCKS) - 1, max(0, round(v * (len(_BLOCKS) - 1))))] for v in values)


def fmt_turns(turns: Any) -> str:
    """A multi-turn row's cache hit and median TTFT per turn: ``t0 0% 41ms, t1 86% 12ms``."""
    def hit(t: dict[str, Any]) -> str:
        return "-" if t.get("cache_hit") is None else f"{t['cache_hit']:.0%}"

    def ttft(t: dict[str, Any]) -> str:
        return "-" if t.get("ttft_p50") is None else f"{t['ttft_p50']:.0f}ms"

    return ", ".join(f"t{t['turn']} {hit(t)} {ttft(t)}" for t in turns or ())


def steered(command: dict[str, Any], own_pid: int) -> list[Seg] | None:
    """A folded ``command`` event as the console says it (``pause s1 (pid 123): pausing...``),
    None for this console's own (its reply is shown as it comes). The fold has checked the
    fields' types."""
    who = (command.get("who") or {}).get("pid", "?")
    if who == own_pid:
        return None
    return [(" ".join([str(command["cmd"]), *command.get("args", [])]) + f" (pid {who}):", "bold"),
            (str(command.get("reply", "")), "")]
