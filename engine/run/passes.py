"""One pass of a shape against a window's server: the cache policy carried out before it, its
requests by the load generator (closed loop, open loop, a trace's times or conversations), the
server's counters read around it, the GPUs it owns sampled through it, and whether the server
died under it. The measurement (engine.run.attempt) makes warm passes and reps of them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

from engine import files, gpu
from engine.campaign import defaults
from engine.campaign.sources import conversations
from engine.context import RunContext, WindowContext
from engine.errors import WindowFailed
from engine.method import stats
from engine.record.results import DIR_MODE, write_jsonl
from engine.run.client.transport import connection_lost
from engine.run.counters import cache_delta, metrics_delta, scrape
from engine.run.loadgen import PassPlan, PassResult, arrival_times, chunk_rate, shard_count
from engine.run.shards import measure_pass
from engine.runtime.base import Server
from engine.servers.bounded import server_client
from engine.servers.client import FlushFailed
from engine.words import load_label

# A flush refused while the server still releases the last pass's requests may succeed a moment
# later (vLLM says so of its reset): a few tries, then the rep is void.
FLUSH_TRIES = 3
FLUSH_RETRY_S = 0.5

# A runtime can report a server's death a moment after its connections drop (Docker records a
# container's exit after its process is gone): a pass that lost connections asks this long.
DEATH_SEEN_S = 2.0

# A shape's key among the chunk rates: session, window, class, concurrency, rate.
ShapeKey = tuple[str, str, str, int, float | None]


class Pass(NamedTuple):
    """A pass and what was read around it."""

    result: PassResult
    metrics: dict[str, float] | None  # the speculative-decoding counters' change over it
    cache: dict[str, float] | None  # the prefix-cache counters' change over it
    gpu: dict[str, Any] | str  # the owned GPUs' summary over it, or why there is none


class Load(NamedTuple):
    """What a shape's pass sends: its requests, its knobs, its load (PassPlan's keywords) and the
    load generator's shards."""

    requests: int
    knobs: dict[str, Any]
    load: dict[str, Any]
    shards: int


def shape_files(wdir: Path, cls: str, c: int, attempt: int, rep: int | str,
                rate: float | None = None) -> Path:
    d = files.make_dir(wdir / "reps", DIR_MODE)
    return d / f"{cls}-{load_label(c, rate)}-{attempt}-{rep}.jsonl"


def _died(server: Server, lost: bool) -> bool:
    """Whether the server died under a pass whose requests failed; ``lost``: some lost their
    connection, so a server still said alive is asked again until DEATH_SEEN_S has passed (its
    cut-short rep is then no rep of failed requests, but the death it was)."""
    deadline = time.monotonic() + (DEATH_SEEN_S if lost else 0.0)
    while server.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class Passes:
    """The passes of one window's shapes. ``rates``: chunks per second of each shape's last pass
    (the next pass's shards are judged on it), kept by the measurement across its windows."""

    def __init__(self, run: RunContext, ctx: WindowContext, rates: dict[ShapeKey, float]) -> None:
        self.run, self.ctx, self.rates = run, ctx, rates

    def flush(self) -> dict[str, Any]:
        """The cache policy before a pass, carried out: a receipt's ``cache`` (policy, what the
        server answered, or why the flush failed)."""
        run, ctx = self.run, self.ctx
        policy = run.campaign.workload.cache
        if policy != "flush":
            return {"policy": policy}
        why = ""
        with server_client(ctx.server.base_url, run.campaign.timeouts.request) as client:
            for tries in range(1, FLUSH_TRIES + 1):
                try:
                    return {"policy": policy, "flush": ctx.adapter.flush_cache(client)}
                except FlushFailed as e:
                    why = str(e)
                if tries < FLUSH_TRIES:
                    time.sleep(FLUSH_RETRY_S)
        return {"policy": policy, "flush_failed": f"{why} ({FLUSH_TRIES} tries)"}

    def sampled(self, cls: str, c: int, rate: float | None, path: Path) -> Pass:
        """A pass with the server's GPUs sampled around it; their samples are written beside the
        receipt at ``path``."""
        ctx = self.ctx
        if not ctx.gpus:
            res, delta, cache = self._pass(cls, c, rate)
            return Pass(res, delta, cache, ctx.gpus.none)
        sampler = gpu.Sampler(ctx.gpus).start()
        try:
            res, delta, cache = self._pass(cls, c, rate)
        finally:
            samples = sampler.stop()
        summary = gpu.summarize(samples, stats.rep_figures(res.records, c)["tokens"])
        side = path.with_name(path.name.removesuffix(".jsonl") + ".gpu.jsonl")
        write_jsonl(side, samples, compact=True)
        if sampler.error:  # a reading failed mid-pass: the summary is of what was read
            summary["error"] = sampler.error
        return Pass(res, delta, cache, {**summary, "file": side.name})

    def _pass(self, cls: str, c: int, rate: float | None
              ) -> tuple[PassResult, dict[str, float] | None, dict[str, float] | None]:
        """The pass, its metrics delta and its prefix-cache counters' delta."""
        run, ctx, wl = self.run, self.ctx, self.run.campaign.workload
        shape = (ctx.session, ctx.window, cls, c, rate)
        sent = self._load(cls, c, rate, self.rates.get(shape))
        before = scrape(ctx.server.base_url, ctx.adapter)
        plan = PassPlan(ctx.server.base_url, ctx.adapter, run.items[cls], c or sent.shards, sent.requests,
                        wl.max_tokens, dict(wl.sampling), sent.knobs, run.campaign.timeouts.request,
                        exact_output=wl.exact_output, **sent.load)
        res = measure_pass(plan, stop=run.controls.cut, shards=sent.shards)
        self.rates[shape] = chunk_rate(res)
        after = scrape(ctx.server.base_url, ctx.adapter)
        delta, why, rejected = metrics_delta(before, after)
        if delta is None:
            res.extra["metrics_missing"] = why or "no metrics counters"
        if rejected:  # the row says so: bad data from the server, not a flag left off
            res.extra["metrics_rejected"] = why
        errors = [r["error"] for r in res.records if r.get("error")]
        if errors and _died(ctx.server, any(connection_lost(e) for e in errors)):
            raise WindowFailed(f"server died during a pass (exit code {ctx.server.exit_code()})")
        return res, delta, cache_delta(before, after)

    def _load(self, cls: str, c: int, rate: float | None, last: float | None) -> Load:
        """What a pass of the shape sends; ``last``: its last pass's chunk rate."""
        run, ctx, wl = self.run, self.ctx, self.run.campaign.workload
        knobs = {**run.campaign.knobs_for(ctx.window), **ctx.adapter.cache_fields(wl.cache)}
        items, spec = run.items[cls], wl.classes[cls]
        if spec.trace is not None:  # open loop at the trace's own times, scaled
            n = len(items)
            return Load(n, knobs, {"arrivals": [float(it.get("at", 0.0)) * spec.trace.time_scale
                                                for it in items]},
                        shard_count(n, n, wl.shard.chunk_rate, last))
        if spec.conversations is not None:
            # A worker owns a conversation; the policy's per-request flush goes with each first
            # turn only: the cache is emptied between reps (and conversations), never between turns.
            groups = conversations.order(items)
            return Load(len(groups), run.campaign.knobs_for(ctx.window),
                        {"conversations": groups, "first_turn": ctx.adapter.cache_fields(wl.cache),
                         **({"seconds": wl.rep_seconds} if wl.rep_seconds else {})},
                        shard_count(c, wl.shard.concurrency, wl.shard.chunk_rate, last))
        if rate:  # open loop: the same seeded arrivals every rep; shards only for the chunk rate
            n = wl.requests_at(rate)
            seed = wl.sampling.seed if wl.sampling.seed is not None else defaults.SEED
            return Load(n, knobs, {"arrivals": arrival_times(rate, n, seed, wl.burstiness)},
                        shard_count(n, n, wl.shard.chunk_rate, last))
        return Load(wl.requests_for(c), knobs,
                    {"seconds": wl.rep_seconds} if wl.rep_seconds and not wl.requests_per_rep else {},
                    shard_count(c, wl.shard.concurrency, wl.shard.chunk_rate, last))
