"""What a class becomes, for ``ruler validate --explain``: how many requests, how long their
prompts and answers, and how much of the prompt text repeats another request's prefix (what a
prefix cache can serve).

Lengths are in words (whitespace-separated), not tokens: the server's tokenizer is not running
when a campaign is validated. For a shared_prefix class a word is one token (its words are chosen
so); for English prose a token is about 3/4 of a word.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine.campaign.sources.item import Item


def shared_prefix_fraction(items: Sequence[Item]) -> float:
    """Of all the requests' prompt characters, the fraction that begins another request too: per
    request its longest common prefix with any other (neighbours once sorted), summed, over the
    total. Messages joined with their roles, as a template lays them out one after another."""
    texts = sorted("\x00".join(f"{m['role']}\x01{m['content']}" for m in i["messages"]) for i in items)
    if len(texts) < 2:
        return 0.0
    common = [_common(a, b) for a, b in zip(texts, texts[1:], strict=False)]
    best = [max(common[k - 1] if k else 0, common[k] if k < len(common) else 0)
            for k in range(len(texts))]
    total = sum(len(t) for t in texts)
    return sum(best) / total if total else 0.0


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def _percentiles(values: Sequence[int]) -> str:
    ranked = sorted(values)

    def at(p: float) -> int:  # nearest rank
        return ranked[max(0, math.ceil(p / 100 * len(ranked)) - 1)]

    return f"p50 {at(50)}, p90 {at(90)}, max {ranked[-1]}"


def class_lines(name: str, source: str, items: Sequence[Item], max_tokens: int) -> list[str]:
    """A class's few lines: its requests, prompt and answer lengths, shared-prefix fraction."""
    words = [sum(len(m["content"].split()) for m in i["messages"]) for i in items]
    own = [n for i in items if (n := i["max_tokens"]) is not None]
    turns = {len(i["messages"]) for i in items}
    out = [f"{name}: {source}, {len(items)} requests"
           + (f" of {min(turns)}-{max(turns)} messages" if len(turns) > 1 else
              f" of {turns.pop()} message{'s' if len(items[0]['messages']) > 1 else ''}"),
           f"  prompt words: {_percentiles(words)}"]
    if not own:
        out.append(f"  answers: up to the workload's max_tokens, {max_tokens}")
    else:
        rest = len(items) - len(own)
        out.append(f"  answers: exactly their own lengths, tokens {_percentiles(own)}"
                   + (f"; {rest} without one, up to max_tokens {max_tokens}" if rest else ""))
    out.append(f"  shared prefix: {shared_prefix_fraction(items):.0%} of the prompt text begins "
               "another request too")
    return out
