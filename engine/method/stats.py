"""Spread, leak rules and per-rep figures: pure functions, tested on the campaign notes' numbers."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import gpu
from engine.method import acceptance, leak, steady
from engine.method.leak import spread, spread_figure
from engine.words import STEADY as STEADY  # a row's basis (stats.WHOLE, as its readers say it)
from engine.words import WHOLE as WHOLE
from engine.words import RowStatus

# A slow rep the GPU telemetry explains (a power or thermal reason, an SM clock drop): journaled as
# this cause, not as a leaked autotune pass. The row is still void and rerun.
THROTTLED = "throttled"


@dataclass(frozen=True)
class LeakPolicy:
    min_concurrency: int = 8
    spread: float = 0.10  # the declared noise: the smallest drop the leak rule voids
    max_reruns: int = 2
    # The reps the leak rule judges, the row's first stage (workload.reps) under a precision; 0:
    # every rep. Judging once keeps its 1 % of false voids: read again after each added rep, a
    # noise-only row would have a chance at every rep.
    stage: int = 0


Pool = Sequence[Sequence[float]]  # the run's other rows at a load: each row's reps' tok/s


def leak_reading(values: Sequence[float], policy: LeakPolicy, pool: Pool = ()) -> leak.Reading:
    """The leak rule (engine.method.leak) on a row's reps: on its first stage when the policy has
    one; reps added after it can make the row wider (noise), never leak-shaped."""
    if not policy.stage or len(values) <= policy.stage:
        return leak.read(values, policy.spread, pool)
    first = leak.read(values[:policy.stage], policy.spread, pool)
    if first.shape == leak.Shape.LEAK or spread(values) <= policy.spread:
        return first if first.shape == leak.Shape.LEAK else leak.Reading(leak.Shape.CLEAN, "")
    said = first.why or f"noise: the first {policy.stage} reps are within leak.spread"
    return leak.Reading(leak.Shape.NOISE, f"{said}; the leak rule judges the first stage's "
                                          f"{policy.stage} reps only, the {len(values)} reps spread "
                                          f"{leak.spread_text(values)}", None, first.below, first.bar,
                        first.noise)


def suspect_rep(values: Sequence[float], policy: LeakPolicy, pool: Pool = ()) -> int | None:
    """The index of the rep the leak rule condemns on the reps so far, else None (none before
    ``leak.MIN_REPS`` reps: fewer cannot tell a leak from noise)."""
    return leak_reading(values, policy, pool).rep


def classify(values: Sequence[float], concurrency: int, policy: LeakPolicy, pool: Pool = ()) -> str:
    """ok; void (leak-shaped at C >= min_concurrency: rerun it); noisy (any other wide row)."""
    return status_of(leak_reading(values, policy, pool), concurrency, policy)


def status_of(reading: leak.Reading, concurrency: int, policy: LeakPolicy) -> str:
    """A row's status from its leak reading: what :func:`classify` says of its reps."""
    if reading.shape == leak.Shape.CLEAN:
        return RowStatus.OK
    leaked = reading.shape == leak.Shape.LEAK and concurrency >= policy.min_concurrency
    return RowStatus.VOID if leaked else RowStatus.NOISY


def median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


@dataclass(frozen=True)
class Slo:
    """Per request: time to first token and TPOT (its mean gap between tokens after the first,
    as vLLM's goodput counts it) at most these, in ms; None: not asked."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def __bool__(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None


NO_SLO = Slo()

def ttft_ms(r: Mapping[str, Any]) -> float | None:
    return (r["first_token"] - r["start"]) * 1000 if r.get("first_token") else None


def tpot_ms(r: Mapping[str, Any]) -> float | None:
    """A request's mean time per output token after the first (TPOT)."""
    n = int(r.get("completion_tokens") or 0)
    if not r.get("first_token") or n < 2 or r["end"] <= r["first_token"]:
        return None
    gap: float = (r["end"] - r["first_token"]) * 1000 / (n - 1)
    return gap


def meets(r: Mapping[str, Any], slo: Slo) -> bool:
    """A finished request within the SLOs (a one-token reply has no TPOT to miss)."""
    if r.get("error"):
        return False
    ttft, tpot = ttft_ms(r), tpot_ms(r)
    return ((slo.ttft_ms is None or (ttft is not None and ttft <= slo.ttft_ms))
            and (slo.tpot_ms is None or tpot is None or tpot <= slo.tpot_ms))


def rep_figures(records: Sequence[Mapping[str, Any]], concurrency: int,
                slo: Slo = NO_SLO) -> dict[str, Any]:
    """One rep's figures from its per-request records (the same function recomputes receipts).

    An open-loop rep (``concurrency`` 0) has no workers: its per-user figure is over the requests
    it kept in flight on average (Little's law: their summed durations over the wall time).
    """
    ok = [r for r in records if not r.get("error")]
    failed = len(records) - len(ok)
    if not ok:
        return {"requests": len(records), "failed": failed, "agg_tok_s": 0.0, "per_user_tok_s": 0.0,
                "ttft_ms": None, "decode_tok_s": None, "tokens": 0, "wall_s": 0.0,
                "in_flight": 0.0, "rps": 0.0, "goodput_rps": 0.0 if slo else None,
                **steady.figures([], concurrency)}
    wall = max(r["end"] for r in records) - min(r["start"] for r in records)
    tokens = sum(int(r.get("completion_tokens") or 0) for r in ok)
    agg = tokens / wall if wall > 0 else 0.0
    ttfts = [t for r in ok if (t := ttft_ms(r)) is not None]
    decode = [(int(r["completion_tokens"]) - 1) / (r["end"] - r["first_token"]) for r in ok
              if r.get("first_token") and r.get("completion_tokens", 0) > 1
              and r["end"] > r["first_token"]]
    in_flight = sum(r["end"] - r["start"] for r in ok) / wall if wall > 0 else 0.0
    return {
        "requests": len(records),
        "failed": failed,
        "tokens": tokens,
        "wall_s": round(wall, 6),
        "agg_tok_s": round(agg, 3),
        "per_user_tok_s": round(per_user(agg, concurrency or in_flight), 3),
        "ttft_ms": _round(median(ttfts), 2),
        "decode_tok_s": _round(median(decode), 3),
        "in_flight": round(in_flight, 3),
        "rps": round(len(ok) / wall, 4) if wall > 0 else 0.0,
        "goodput_rps": (round(sum(meets(r, slo) for r in ok) / wall, 4) if wall > 0 else 0.0)
        if slo else None,
        # The steady window's tok/s beside the whole rep's (engine.method.steady).
        **steady.figures(records, concurrency),
    }


def per_user(tok_s: float, users: float) -> float:
    """Per user, the one definition (the seed's "732 agg / 91.5 per user" at C8): tok/s over the
    users that made it, C closed-loop workers (open loop: the requests in flight on average).
    A row's per user is over its own tok/s, on the same basis (steady window or whole reps)."""
    return tok_s / users if users > 0 else 0.0


def headline(figs: Sequence[dict[str, Any]]) -> tuple[list[float], str]:
    """A row's reps' tok/s as the row reports them, and over what: the steady window's when every
    rep has one long enough to carry it (``steady``, engine.method.steady), else the whole rep's
    (``whole``)."""
    if figs and not basis_why(figs):
        return [float(f["steady_tok_s"]) for f in figs], STEADY
    return [f["agg_tok_s"] for f in figs], WHOLE


def basis_why(figs: Sequence[dict[str, Any]]) -> str:
    """Why a row's reps are over the whole rep rather than the steady window ("" when they are
    not): the first rep whose window is missing or too short, in words."""
    for i, f in enumerate(figs):
        if f.get("steady_tok_s") is None or f["steady_tok_s"] <= 0:
            return f"rep {i + 1} has no steady window"
        why = steady.why_short(f.get("steady_s"), f.get("ramp_s"), f.get("tail_s"),
                               f.get("steady_cycles"))
        if why:
            return f"rep {i + 1}: {why}"
    return ""


def receipt_tok_s(reps: Sequence[tuple[dict[str, Any], Sequence[Mapping[str, Any]]]],
                  concurrency: int, basis: str) -> list[float]:
    """Each rep's tok/s recomputed from its receipt, over the row's basis (``steady``; ``whole``
    or "" for a row from before the steady window), a rep voided before it ran left out."""
    figs = [rep_figures(records, concurrency) for header, records in reps if not header.get("void")]
    if basis == STEADY:  # as the row was: over the windows, even one too short to carry it now
        return [float(f["steady_tok_s"] or 0.0) for f in figs]
    return [f["agg_tok_s"] for f in figs]


PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "itl", "tpot", "e2el")  # each a request's (ITL: each gap's), in ms


def e2el_ms(r: Mapping[str, Any]) -> float:
    """A request's end-to-end latency: from its send to its last byte."""
    return (float(r["end"]) - float(r["start"])) * 1000


def latency_series(records: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Each latency's values over a row's finished requests, every rep pooled: TTFT, TPOT and the
    end-to-end latency one value a request, ITL every gap between two chunks that carried text (a
    chunk of several speculative tokens is one gap): vLLM's bench serve's definitions."""
    ok = [r for r in records if not r.get("error")]
    return {"ttft": [t for r in ok if (t := ttft_ms(r)) is not None],
            "itl": [g for r in ok for g in r.get("gaps_ms") or ()],
            "tpot": [t for r in ok if (t := tpot_ms(r)) is not None],
            "e2el": [e2el_ms(r) for r in ok]}


def latency_summary(values: Sequence[float]) -> dict[str, float | None]:
    """One latency's mean, median, standard deviation and p90/p99 (numpy's linear percentiles,
    as vLLM's bench serve takes them); None each with no value."""
    if not values:
        return {"mean": None, "median": None, "std": None, **{f"p{p}": None for p in PERCENTILES}}
    a = np.asarray(values, dtype=float)
    return {"mean": round(float(a.mean()), 2), "median": round(float(np.median(a)), 2),
            "std": round(float(a.std()), 2),
            **{f"p{p}": round(float(np.percentile(a, p)), 2) for p in PERCENTILES}}


def latency_figures(records: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """TTFT, ITL, TPOT and end-to-end latency at p50/p90/p99 and their means over a row's
    finished requests, every rep pooled (a rep alone has too few for a p99)."""
    out: dict[str, float | None] = {}
    for name, values in latency_series(records).items():
        summary = latency_summary(values)
        out |= {f"{name}_p{p}": summary[f"p{p}"] for p in PERCENTILES}
        out[f"{name}_mean"] = summary["mean"]
    return out


# Multi-turn figures per turn index: what a conversation's later turns meet that its first does
# not (the history in the prefix cache: a higher cache hit, a shorter time to first token). From
# the records alone (each multi-turn record carries its ``turn``), every rep pooled, so a receipt
# recomputes them as it does the row. The cache hit per turn is from the server's per-request
# usage (``cached_tokens``): its counters are per pass, not per turn.


def _pct(values: Sequence[float], p: int) -> float | None:
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
                    "ttft_p50": _pct(ttfts, 50), "ttft_p90": _pct(ttfts, 90), "tpot_p50": _pct(tpots, 50),
                    "prompt_tokens": prompt, "cached_tokens": cached,
                    "cache_hit": round(cached / prompt, 4) if prompt and cached is not None else None})
    return out


def rep_cause(headers: Sequence[dict[str, Any]], index: int) -> str | None:
    """Why rep ``index`` (0-based) was slow when the GPU says so, else None (engine.gpu)."""
    others = [h.get("gpu") for i, h in enumerate(headers) if i != index]
    cause = gpu.throttle_cause(headers[index].get("gpu"), others)
    return f"rep {index + 1}: {cause}" if cause else None


def gpu_figures(headers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A row's GPU columns from its reps' summaries: the median rep's J/token and mean power, the
    lowest SM clock under load, and whether any rep saw a power or thermal throttle reason. Empty
    (None) without telemetry."""
    have = [h["gpu"] for h in headers if isinstance(h.get("gpu"), dict) and h["gpu"].get("samples")]
    if not have:
        return {"j_per_token": None, "power_w": None, "sm_mhz_min": None, "throttled": None}
    return {
        "j_per_token": _round(median([s.get("j_per_token") for s in have]), 5),
        "power_w": _round(median([s.get("power_w") for s in have]), 1),
        "sm_mhz_min": min((s["sm_mhz_min"] for s in have if s.get("sm_mhz_min") is not None),
                          default=None),
        "throttled": any(s.get("throttle") for s in have),
    }


def rep_cache(header: dict[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One rep's prompt tokens and those the server served from its prefix cache: from the
    server's counters over the rep (``metrics``) when it exports them, else summed from the
    requests' usage (``per-request``), else unknown (``""``)."""
    metrics = (header.get("cache") or {}).get("metrics")
    if metrics and metrics.get("prompt"):
        prompt, cached, source = metrics["prompt"], metrics["cached"], "metrics"
    else:
        ok = [r for r in records if not r.get("error")]
        known = [r for r in ok if r.get("cached_tokens") is not None and r.get("prompt_tokens")]
        if not ok or len(known) < len(ok):
            return {"prompt": None, "cached": None, "hit": None, "source": ""}
        prompt = sum(r["prompt_tokens"] for r in known)
        cached, source = sum(r["cached_tokens"] for r in known), "per-request"
    return {"prompt": prompt, "cached": cached, "hit": round(cached / prompt, 4), "source": source}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def condemned(reps: Sequence[tuple[dict[str, Any], Sequence[Mapping[str, Any]]]],
              concurrency: int, policy: LeakPolicy, pool: Pool = ()) -> list[int]:
    """The reps (0-based, in ``reps``) a void row's verdict rests on, the ones to measure again:
    a rep whose cache flush failed, a rep with failed requests, else the rep the leak rule
    condemns. Every rep when it names none (its other reps then stand on nothing)."""
    own = [i for i, (h, records) in enumerate(reps)
           if h.get("void") or any(r.get("error") for r in records)]
    if own:
        return own if len(own) < len(reps) else list(range(len(reps)))
    kept = [i for i, (h, _) in enumerate(reps) if not h.get("void")]
    aggs, _ = headline([rep_figures(records, concurrency) for h, records in reps
                        if not h.get("void")])
    low = leak_reading(aggs, policy, pool).rep
    return [kept[low]] if low is not None and len(kept) > 1 else list(range(len(reps)))


def _row_cache(reps: Sequence[tuple[dict[str, Any], Sequence[Mapping[str, Any]]]],
               policy_word: str) -> dict[str, Any]:
    """The prefix cache every rep met: the policy, and the share of prompt tokens the server
    served from its cache over the row's reps (None: the server does not say)."""
    caches = [rep_cache(h, records) for h, records in reps]
    sources = {c["source"] for c in caches}
    prompt = sum(c["prompt"] for c in caches) if caches and "" not in sources else 0
    return {
        "cache": policy_word,
        "cache_hit": round(sum(c["cached"] for c in caches) / prompt, 4) if prompt else None,
        "cache_source": "+".join(sorted(sources)) if prompt else "",
    }


def row_figures(reps: Sequence[tuple[dict[str, Any], Sequence[Mapping[str, Any]]]],
                concurrency: int, policy: LeakPolicy, slo: Slo = NO_SLO,
                pool: Pool = ()) -> dict[str, Any]:
    """A shape's row from its reps (header, request records): what throughput.csv holds.

    The same function runs live and when a row is recomputed from its receipts. An open-loop row
    (``concurrency`` 0) meets the leak rule at the concurrency it kept in flight (its busiest rep).
    ``pool`` is the run's other rows of the class at this load, the leak rule's noise
    (engine.method.leak).
    """
    # A void rep (its cache flush failed) has no figures: it voids the row, with its reason.
    voids = [f"rep {h.get('rep')}: {h['void']}" for h, _ in reps if h.get("void")]
    policy_word = next(((h.get("cache") or {}).get("policy", "") for h, _ in reps), "")
    reps = [(h, records) for h, records in reps if not h.get("void")]
    figs = [rep_figures(records, concurrency, slo) for _, records in reps]
    wholes = [f["agg_tok_s"] for f in figs]
    aggs, basis = headline(figs)
    failed = sum(f["failed"] for f in figs)
    acc = acceptance.row_figures(reps)
    load = concurrency or math.ceil(max((f["in_flight"] for f in figs), default=0.0))
    reading = leak_reading(aggs, policy, pool)
    status = RowStatus.VOID if failed or voids else status_of(reading, load, policy)
    errors = Counter(str(r["error"]) for _, records in reps for r in records if r.get("error"))
    rejected = [f"rep {h.get('rep')}: {h['client']['metrics_rejected']}" for h, _ in reps
                if (h.get("client") or {}).get("metrics_rejected")]
    headers = [h for h, _ in reps]
    # The slowest rep of a row wider than the leak rule allows, when the GPU explains it.
    cause = rep_cause(headers, int(np.argmin(aggs))) if aggs and spread(aggs) > policy.spread else None
    return {
        "reps": len(figs),
        "rep_tok_s": aggs,
        "agg_tok_s": round(median(aggs) or 0.0, 3),
        # The headline is over each rep's steady window when every rep has one: its basis, the
        # whole-rep figures beside it, and the medians of the reps' ramp, window and tail.
        "basis": basis,
        "whole_tok_s": round(median(wholes) or 0.0, 3),
        "rep_whole_tok_s": wholes,
        **{k: _round(median([f[k] for f in figs if f[k] is not None]), 3)
           for k in ("ramp_s", "steady_s", "tail_s")},
        "per_user_tok_s": round(median([per_user(a, concurrency or f["in_flight"])
                                        for a, f in zip(aggs, figs, strict=True)]) or 0.0, 3),
        "ttft_ms": _round(median([f["ttft_ms"] for f in figs if f["ttft_ms"] is not None]), 2),
        "decode_tok_s": _round(median([f["decode_tok_s"] for f in figs
                                       if f["decode_tok_s"] is not None]), 3),
        **latency_figures([r for _, records in reps for r in records]),
        "achieved_rps": _round(median([f["rps"] for f in figs]), 4),
        "goodput_rps": _round(median([f["goodput_rps"] for f in figs]), 4) if slo else None,
        **acc,
        "spread": spread_figure(aggs),
        "status": status,
        # What a wide spread is made of (engine.method.leak): leak | noise, and how it was read.
        "spread_shape": str(reading.shape),
        "spread_why": reading.why,
        "failed_requests": failed,
        # The commonest request error, so that a void row says why without opening its receipts.
        "error": errors.most_common(1)[0][0][:200] if errors else "",
        # Metrics deltas discarded because the server's counters were bad data (engine.run.counters).
        "metrics_rejected": "; ".join(rejected)[:300],
        **gpu_figures(headers),
        "throttle_cause": cause or "",
        "void_reps": "; ".join(voids)[:300],
        **_row_cache(reps, policy_word),
        # A multi-turn class's figures per turn index; none for a class without turns.
        **({"turns": turns} if (turns := turn_figures([r for _, rs in reps for r in rs])) else {}),
    }
