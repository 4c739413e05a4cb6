"""A server's counters around a pass: speculative decoding's (drafted, accepted, per draft
position) and the prefix cache's, read from its metrics endpoint before and after, and their
change over the pass, or why there is none (a flag left off, bad data, a restart)."""

from __future__ import annotations

from typing import NamedTuple

import httpx

from engine.servers.bounded import AnswerUnbounded, server_client
from engine.servers.client import ServerClient
from engine.servers.data import POS, BadServerData, consistent, counter, reading


class Scrape(NamedTuple):
    """One read of the speculative-decoding counters."""

    counters: dict[str, float] | None
    why: str | None  # why there are no counters (or what they lack)
    rejected: bool = False  # the answer was bad data, not merely without counters
    cache: dict[str, float] | None = None  # prefix-cache counters, where the server exports them


METRICS_S = 10.0  # a /metrics answer, whole


def read_counters(adapter: ServerClient, status: int, body: str) -> Scrape:
    """The counters in one metrics answer, or None and why; whatever the body, never an exception."""
    if status != 200:
        return Scrape(None, adapter.missing_metrics(status, None))
    try:
        with reading(adapter.metrics_path):
            samples = adapter.metric_samples(body)
            counters = adapter.spec_counters(samples)
            if counters is not None:
                counters = {k: counter(v, k) for k, v in counters.items()}
                consistent(counters, "its speculative-decoding counters", printed_from=counters)
            cache = adapter.cache_counters(samples)
            if cache is not None:
                cache = {k: counter(v, k) for k, v in cache.items()}
    except BadServerData as e:
        return Scrape(None, str(e), rejected=True)
    why = adapter.missing_metrics(status, samples)
    return Scrape(counters, why or (None if counters is not None else "no speculative-decoding counters"),
                  cache=cache)


def scrape(base_url: str, adapter: ServerClient) -> Scrape:
    """The adapter's speculative-decoding counters, or None and why (naming the server flag)."""
    try:
        with server_client(timeout=METRICS_S) as client:
            r = client.get(base_url + adapter.metrics_path)
    except AnswerUnbounded as e:  # an answer that never ends, or ends past what ruler reads
        return Scrape(None, str(e), rejected=True)
    except httpx.HTTPError:
        return Scrape(None, adapter.missing_metrics(None, None))
    return read_counters(adapter, r.status_code, r.text)


def metrics_delta(before: Scrape, after: Scrape) -> tuple[dict[str, float] | None, str | None, bool]:
    """The counters' change over a pass, else None, why, and whether the server's data is at fault.

    Lifetime counters only grow; one that shrank means the server restarted or reset them during
    the pass, and a negative delta would read as a negative acceptance: the delta is discarded.
    """
    for s in (before, after):
        if s.rejected:
            return None, s.why, True
    if before.counters is None or after.counters is None:
        return None, after.why or before.why, False
    # A draft position's counter appears only once something was accepted there (llama-server
    # exports no per_pos sample before): one absent before the pass had counted nothing.
    was = {**{k: 0.0 for k in after.counters if k.startswith(POS)}, **before.counters}
    common = [k for k in after.counters if k in was]
    if not common:
        return None, "metrics counters changed shape during the pass", False
    back = [f"{k} {was[k]:g} -> {after.counters[k]:g}" for k in common if after.counters[k] < was[k]]
    if back:
        return None, f"counters went backwards ({', '.join(back)}): the server restarted or reset them", True
    delta = {k: after.counters[k] - was[k] for k in common}
    try:
        consistent(delta, "the metrics counters' change over the pass",
                   printed_from={k: after.counters[k] + was[k] for k in common})
    except BadServerData as e:
        return None, str(e), True
    return delta, None, False


def cache_delta(before: Scrape, after: Scrape) -> dict[str, float] | None:
    """The prefix-cache counters' change over a pass; None when either scrape lacks them or they
    went backwards (a restart: the rep's cache figures then come from its requests, if any)."""
    if before.cache is None or after.cache is None:
        return None
    delta = {k: after.cache[k] - before.cache[k] for k in ("prompt", "cached")}
    return delta if min(delta.values()) >= 0 else None
