"""Multi-turn figures per turn index: what a conversation's later turns meet that its first does
not (the history in the prefix cache: a higher cache hit, a shorter time to first token).

Computed from the request records alone (each multi-turn record carries its ``turn``), every rep
pooled, so a receipt recomputes them as it recomputes the row. The cache hit per turn is from the
server's per-request usage (``cached_tokens``): its counters are per pass, not per turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from engine.method.stats import tpot_ms, ttft_ms


def _p(values: Sequence[float], p: int) -> float | None:
    return round(float(np.percentile(values, p)), 2) if values else None


def turn_figures(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per turn index (0 first), over the records that have one: its requests and failures, TTFT
    p50/p90 and TPOT p50 in ms, and its prompt tokens, those served from the cache and their share
    (None when a finished request's usage does not say). Empty for a class without turns."""
    by_turn: dict[int, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("turn") is not None:
            by_turn.setdefault(int(r["turn"]), []).append(r)
    out = []
    for turn in sorted(by_turn):
        rs = by_turn[turn]
        ok = [r for r in rs if not r.get("error")]
        ttfts = [t for r in ok if (t := ttft_ms(r)) is not None]
        tpots = [t for r in ok if (t := tpot_ms(r)) is not None]
        known = ok and all(r.get("cached_tokens") is not None and r.get("prompt_tokens") for r in ok)
        prompt = sum(int(r["prompt_tokens"]) for r in ok) if known else None
        cached = sum(int(r["cached_tokens"]) for r in ok) if known else None
        out.append({"turn": turn, "requests": len(rs), "failed": len(rs) - len(ok),
                    "ttft_p50": _p(ttfts, 50), "ttft_p90": _p(ttfts, 90), "tpot_p50": _p(tpots, 50),
                    "prompt_tokens": prompt, "cached_tokens": cached,
                    "cache_hit": round(cached / prompt, 4) if prompt and cached is not None else None})
    return out


def turns_text(turns: Sequence[Mapping[str, Any]]) -> str:
    """Per-turn cache hits and TTFT in one line: ``t0 0% 41ms, t1 86% 12ms`` (console, events)."""
    def hit(t: Mapping[str, Any]) -> str:
        return "-" if t.get("cache_hit") is None else f"{t['cache_hit']:.0%}"

    def ttft(t: Mapping[str, Any]) -> str:
        return "-" if t.get("ttft_p50") is None else f"{t['ttft_p50']:.0f}ms"

    return ", ".join(f"t{t['turn']} {hit(t)} {ttft(t)}" for t in turns)
