"""The per-turn table of a multi-turn class's rows: the journal's figures per turn index
(stats.turn_figures, every rep's requests pooled), beside the row's own."""

from __future__ import annotations

from collections.abc import Iterable

from engine.report.run import Row, RunView
from engine.report.text import fixed, load_cell, pct, table
from engine.words import row_key


def turns_table(view: RunView, rows: Iterable[Row]) -> list[str]:
    """One line per turn index of every row that has turns; nothing when none has."""
    body = []
    for r in rows:
        state = view.state.rows.get(row_key(r.session, r.window, r.cls, r.concurrency, r.rate))
        for t in (state.row.get("turns") if state else None) or []:
            body.append([r.cls, load_cell(r), t["turn"], t["requests"], t["failed"],
                         fixed(t["ttft_p50"], 1), fixed(t["ttft_p90"], 1), fixed(t["tpot_p50"], 1),
                         "-" if t["prompt_tokens"] is None else t["prompt_tokens"],
                         "-" if t["cached_tokens"] is None else t["cached_tokens"],
                         pct(t["cache_hit"])])
    if not body:
        return []
    return ["Per turn of each conversation (0 the first; every rep's requests pooled): time to first "
            "token, time per output token, and the prompt tokens the server served from its prefix "
            "cache, from each request's usage:", ""] + table(
        ["class", "C", "turn", "requests", "failed", "TTFT p50 ms", "TTFT p90 ms", "TPOT p50 ms",
         "prompt tokens", "cached tokens", "cache hit"], body)
