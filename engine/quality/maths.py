"""Pure figures of the quality checks: first divergence, |dlogp| stats, top-k KL with a tail bucket."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.words import CONTROL, Verdict

PROB_EPS = 1e-12  # probabilities are clamped here before a log


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first differing character, None when identical (a prefix differs at its end)."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def spread_positions(n: int, k: int) -> list[int]:
    """Up to k positions spread evenly over range(n), first and last included."""
    if n <= 0:
        return []
    if n <= k:
        return list(range(n))
    return sorted({round(x) for x in np.linspace(0, n - 1, k)})


def abs_stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p99/max of absolute values (numpy's linear percentiles); None figures when empty."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None, "mean": None}
    a = np.abs(np.asarray(values, dtype=float))
    return {"n": int(a.size), "p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max()), "mean": float(a.mean())}


def forced_logprob(top: Sequence[tuple[int, float]], token: int) -> tuple[float, bool]:
    """The forced token's logprob from a top-k list; outside it, the floor: the k-th logprob.

    The floor is an upper bound of the true value, so a |dlogp| involving it is a lower bound;
    receipts count such positions as "floored".
    """
    for tid, lp in top:
        if tid == token:
            return lp, False
    return (min(lp for _, lp in top), True) if top else (math.log(PROB_EPS), True)


def topk_distribution(top: Sequence[tuple[int, float]], support: Sequence[int]) -> list[float]:
    """Probabilities over ``support`` plus one tail bucket, from one side's top-k.

    A support token missing from this top-k is in its tail, so its probability is at most the
    k-th probability; it gets min(k-th, tail / (missing + 1)) and the tail bucket keeps the rest,
    so the buckets still sum to one.
    """
    probs = {tid: math.exp(lp) for tid, lp in top}
    tail = max(0.0, 1.0 - sum(probs.values()))
    missing = [t for t in support if t not in probs]
    kth = min(probs.values()) if probs else 1.0
    guess = min(kth, tail / (len(missing) + 1)) if missing else 0.0
    out = [probs.get(t, guess) for t in support]
    out.append(max(0.0, tail - guess * len(missing)))
    return out


def kl_topk(oracle: Sequence[tuple[int, float]], window: Sequence[tuple[int, float]]) -> float:
    """KL(oracle || window) in nats over the oracle's top-k tokens plus one tail bucket."""
    support = [tid for tid, _ in oracle]
    p = topk_distribution(oracle, support)
    q = topk_distribution(window, support)
    return float(sum(pi * (math.log(max(pi, PROB_EPS)) - math.log(max(qi, PROB_EPS)))
                     for pi, qi in zip(p, q, strict=True) if pi > 0))


def truncate(top: Sequence[Sequence[Any]], k: int) -> list[tuple[int, float]]:
    return [(int(t), float(lp)) for t, lp in list(top)[:k]]


def first_token_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token id, None when the two are the same."""
    if list(a) == list(b):
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def greedy_compare(ref: Sequence[dict[str, Any]], mine: Sequence[dict[str, Any]],
                   by_ids: bool = True) -> dict[str, Any]:
    """Per prompt: identical, or the first differing character; the lowest of those overall.

    ``by_ids`` (one stack, one tokenizer): where both replies carry their token ids, the ids
    decide. Their text can hide a difference, or show one that is not there: a reply cut inside a
    character (a byte-fallback token of CJK text or an emoji) ends in bytes one server drops and
    another shows as U+FFFD. A difference only the ids see is placed at the end of the shorter text.
    """
    per: list[dict[str, Any]] = []
    for r, m in zip(ref, mine, strict=False):
        div = first_divergence(r["text"], m["text"])
        ids = by_ids and r.get("token_ids") is not None and m.get("token_ids") is not None
        tok = first_token_divergence(r["token_ids"], m["token_ids"]) if ids else None
        alike = tok is None if ids else div is None
        if alike:
            div = None
        elif div is None:
            div = min(len(r["text"]), len(m["text"]))
        per.append({"prompt": m["prompt"], "identical": alike, "first_divergence": div,
                    **({"first_token_divergence": tok} if ids else {}),
                    "same_prompt_ids": r["prompt_ids"] == m["prompt_ids"],
                    CONTROL: r["text"], "window": m["text"]})
    same = sum(p["identical"] for p in per)
    divs = [p["first_divergence"] for p in per if p["first_divergence"] is not None]
    return {"identical": same, "n": len(per), "first_divergence": min(divs) if divs else None,
            "prompts": per}


def greedy_verdict(cmp: dict[str, Any], across_stacks: bool = False) -> Verdict:
    """Greedy equivalence holds only when every prompt's output is identical. Across stacks
    (another engine's numerics) it is not expected to: the agreement is a figure, no verdict."""
    if across_stacks:
        return Verdict.AGREEMENT
    return Verdict.IDENTICAL if cmp["identical"] == cmp["n"] else Verdict.DIVERGED


def greedy_summary(cmp: dict[str, Any], across_stacks: bool = False) -> str:
    if across_stacks:
        share = cmp["identical"] / cmp["n"] if cmp["n"] else 0.0
        s = f"greedy agreement {cmp['identical']}/{cmp['n']} ({share:.0%}) with the control's stack"
    else:
        s = f"{cmp['identical']}/{cmp['n']} identical"
    if cmp["first_divergence"] is not None:
        s += f", first divergence at character {cmp['first_divergence']}"
    return s
