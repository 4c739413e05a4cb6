"""The measurement phase of a window: per shape a warm pass, N reps, live leak checks, reruns.

Per shape (prompt class x concurrency) an attempt is: one warm pass (recorded, discarded), then the
reps. A void attempt (a leaked autotune pass at C >= min_concurrency, failed requests, a failed
cache flush) is rewarmed and its condemned reps measured again, the others kept, up to
``max_reruns`` times; every attempt's receipts stay on disk. The GPUs the server owns are sampled
around every pass (engine.gpu): a rep's receipt has their summary and names its sample file, and a
slow rep the telemetry explains is journaled as throttled rather than as a leak.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from engine import gpu
from engine.campaign import defaults
from engine.campaign.sources import conversations
from engine.context import RunContext, WindowContext
from engine.errors import WindowFailed
from engine.method import acceptance, capacity, precision, sla, stats
from engine.record.events import EventKind
from engine.record.judgement import judgement
from engine.record.receipts import read_rep, write_rep
from engine.record.request import RequestRecord
from engine.record.results import DIR_MODE, write_jsonl
from engine.record.state import RunState, capacity_key
from engine.run.client.transport import connection_lost
from engine.run.loadgen import PassPlan, PassResult, arrival_times, chunk_rate, measure_pass, shard_count
from engine.runtime.base import Server
from engine.servers.bounded import AnswerUnbounded, server_client
from engine.servers.client import FlushFailed, ServerClient
from engine.servers.data import POS, BadServerData, consistent, counter, reading
from engine.words import (
    CONTROL,
    USABLE_ROWS,
    RowStatus,
    WindowStatus,
    load_label,
    load_text,
    plural,
    row_key,
)


class Scrape(NamedTuple):
    """One read of the speculative-decoding counters."""

    counters: dict[str, float] | None
    why: str | None  # why there are no counters (or what they lack)
    rejected: bool = False  # the answer was bad data, not merely without counters
    cache: dict[str, float] | None = None  # prefix-cache counters, where the server exports them


# A flush refused while the server still releases the last pass's requests may succeed a moment
# later (vLLM says so of its reset): a few tries, then the rep is void.
FLUSH_TRIES = 3
FLUSH_RETRY_S = 0.5


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
                consistent(counters, "its speculative-decoding counters")
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


def _delta(before: Scrape, after: Scrape) -> tuple[dict[str, float] | None, str | None, bool]:
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
        consistent(delta, "the metrics counters' change over the pass")
    except BadServerData as e:
        return None, str(e), True
    return delta, None, False


def _cache_delta(before: Scrape, after: Scrape) -> dict[str, float] | None:
    """The prefix-cache counters' change over a pass; None when either scrape lacks them or they
    went backwards (a restart: the rep's cache figures then come from its requests, if any)."""
    if before.cache is None or after.cache is None:
        return None
    delta = {k: after.cache[k] - before.cache[k] for k in ("prompt", "cached")}
    return delta if min(delta.values()) >= 0 else None


def shape_files(wdir: Path, cls: str, c: int, attempt: int, rep: int | str,
                rate: float | None = None) -> Path:
    d = wdir / "reps"
    d.mkdir(mode=DIR_MODE, exist_ok=True)
    return d / f"{cls}-{load_label(c, rate)}-{attempt}-{rep}.jsonl"


def recompute_row(run_dir: Path, source: str, concurrency: int, policy: stats.LeakPolicy,
                  slo: stats.Slo = stats.NO_SLO, pool: stats.Pool = ()) -> dict[str, Any]:
    """A throughput.csv row recomputed from the receipts it names; ``pool`` as the row met it
    (:func:`noise_pool` when it started), for the same leak reading."""
    reps = [read_rep(run_dir / p) for p in source.split(";") if p]
    row: dict[str, Any] = stats.row_figures(reps, concurrency, policy, slo, pool)
    return row


def noise_pool(state: RunState, key: str, concurrency: int, rate: float | None) -> list[list[float]]:
    """The leak rule's noise (engine.method.leak): the reps of the run's finished rows at this load
    (any class, window or session), the most recent last, the row ``key`` itself left out. A void
    row is left out too: its wide reps are what the rule condemned, not the server's noise."""
    return [list(r.row["rep_tok_s"]) for r in state.rows.values()
            if r.key != key and r.concurrency == concurrency and r.rate == rate
            and r.complete and r.row.get("status") in USABLE_ROWS and r.row.get("rep_tok_s")]


def slo_of(run: RunContext) -> stats.Slo:
    slo = run.campaign.workload.slo
    return stats.Slo(slo.ttft_ms, slo.tpot_ms)


Rep = tuple[dict[str, Any], list[RequestRecord]]


# A runtime can report a server's death a moment after its connections drop (Docker records a
# container's exit after its process is gone): a pass that lost connections asks this long.
DEATH_SEEN_S = 2.0


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


# A client's own stall says nothing of the server, so it is not charged to leak.max_reruns (the
# server's budget): a campaign that allows no leak rerun still measures such a rep again. These
# many of its own, so that an engine starved for good still ends its row.
CLIENT_STALL_RERUNS = 2
CLIENT_STALLED = "client stalled"  # how a rep the client stalled is voided: its reason starts so


def _spent(reruns: int, stalls: int, stalled: bool, policy: stats.LeakPolicy) -> bool:
    """Whether a void row has had all its measurements again: ``reruns`` attempts past its first,
    ``stalls`` of them (this one included when ``stalled``) ended by the client's stall."""
    if stalled:
        return stalls > CLIENT_STALL_RERUNS
    return reruns - stalls >= policy.max_reruns


class Measurement:
    """Callable phase: ``Measurement()(run, ctx)`` measures every shape of the window.

    On resume, rows already complete are skipped and an interrupted row continues at its next rep
    (after a fresh warm pass: the server is a new one). Operator reruns of void rows queued for this
    window run after its regular shapes.
    """

    def __init__(self) -> None:
        # Chunks per second of each shape's last pass: the next pass's shards are judged on it.
        self._rates: dict[tuple[str, str, str, int, float | None], float] = {}

    def __call__(self, run: RunContext, ctx: WindowContext) -> None:
        wl = run.campaign.workload
        for cls in wl.classes:
            for c, rate in wl.loads_of(cls):
                if run.controls.stopping():
                    status, why = run.controls.ending()
                    if status == WindowStatus.FAILED:  # the window timed out: it fails like a dead server
                        self._not_measured(run, ctx, f"not measured: {why}")
                    return
                row = run.state.rows.get(row_key(ctx.session, ctx.window, cls, c, rate))
                if row and row.complete:
                    continue
                try:
                    self.shape(run, ctx, cls, c, rate=rate)
                except WindowFailed:
                    self._not_measured(run, ctx)
                    raise
        for cls in wl.capacity_classes():
            try:
                self.capacity(run, ctx, cls)
            except WindowFailed:
                self._not_measured(run, ctx)
                raise
        self.reruns(run, ctx)

    def capacity(self, run: RunContext, ctx: WindowContext, cls: str) -> None:
        """Capacity at the workload's SLA for one class (engine.method.capacity): a probe at a time,
        each an ordinary row, until the band is known; then its answer is journaled. A resume
        picks the search up from the rows already done (the next probe follows from them)."""
        spec = run.campaign.workload.capacity
        if spec is None or capacity_key(ctx.session, ctx.window, cls) in run.state.capacity:
            return
        search = capacity.Search(spec.over, spec.range[0], spec.range[1], spec.resolution, spec.max_probes)
        criteria = sla.Criteria({str(k): v for k, v in spec.holds.items()}, spec.goodput, slo_of(run))
        while not run.controls.stopping():
            probes = probe_verdicts(run.run_dir, run.state, ctx.session, ctx.window, cls, search,
                                    criteria)
            answer = capacity.step(search, {x: capacity.ProbeResult(p["probe"]) for x, p in probes.items()})
            if answer.next is None:
                run.emit(EventKind.CAPACITY, session=ctx.session, window=ctx.window,
                         **{"class": cls}, over=search.over, criteria=criteria.text(),
                         found=str(answer.found), lo=answer.lo, hi=answer.hi,
                         mixed=list(answer.mixed), probes=[probes[x] for x in sorted(probes)])
                return
            if search.whole:
                self.shape(run, ctx, cls, int(answer.next))
            else:
                self.shape(run, ctx, cls, 0, rate=answer.next)

    def _not_measured(self, run: RunContext, ctx: WindowContext,
                      reason: str = "not measured: the server failed earlier in the window") -> None:
        """Every shape of a failed window without a row gets one: throughput.csv has no gaps."""
        wl = run.campaign.workload
        for cls in wl.classes:
            for c, rate in wl.loads_of(cls):
                row = run.state.rows.get(row_key(ctx.session, ctx.window, cls, c, rate))
                if row and row.row:
                    continue
                run.emit(EventKind.ROW_DONE, session=ctx.session, window=ctx.window, **{"class": cls},
                            concurrency=c, **({"rate": rate} if rate else {}), axis=run.axis(ctx.window),
                            attempts=0, status=RowStatus.FAILED, reason=reason, source="")

    def reruns(self, run: RunContext, ctx: WindowContext) -> None:
        prefix = f"{ctx.session}-{ctx.window}/"
        while not run.controls.stopping():
            key = next((k for k in run.controls.reruns if k.startswith(prefix)), None)
            if key is None:
                return
            run.controls.take_rerun(key)
            row = run.state.rows[key]
            self.shape(run, ctx, row.cls, row.concurrency, rerun=True, rate=row.rate)

    def _flush(self, run: RunContext, ctx: WindowContext) -> dict[str, Any]:
        """The cache policy before a pass, carried out: a receipt's ``cache`` (policy, what the
        server answered, or why the flush failed)."""
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

    def _pass(self, run: RunContext, ctx: WindowContext, cls: str, c: int, rate: float | None
              ) -> tuple[PassResult, dict[str, float] | None, dict[str, float] | None]:
        wl = run.campaign.workload
        shape = (ctx.session, ctx.window, cls, c, rate)
        knobs = {**run.campaign.knobs_for(ctx.window), **ctx.adapter.cache_fields(wl.cache)}
        items, spec = run.items[cls], wl.classes[cls]
        if spec.trace is not None:  # open loop at the trace's own times, scaled
            n = len(items)
            load: dict[str, Any] = {"arrivals": [float(it.get("at", 0.0)) * spec.trace.time_scale
                                                 for it in items]}
            shards = shard_count(n, n, wl.shard.chunk_rate, self._rates.get(shape))
        elif spec.conversations is not None:
            # A worker owns a conversation; the policy's per-request flush goes with each first
            # turn only: the cache is emptied between reps (and conversations), never between turns.
            groups = conversations.order(items)
            n, knobs = len(groups), run.campaign.knobs_for(ctx.window)
            load = {"conversations": groups, "first_turn": ctx.adapter.cache_fields(wl.cache),
                    **({"seconds": wl.rep_seconds} if wl.rep_seconds else {})}
            shards = shard_count(c, wl.shard.concurrency, wl.shard.chunk_rate, self._rates.get(shape))
        elif rate:  # open loop: the same seeded arrivals every rep; shards only for the chunk rate
            n = wl.requests_at(rate)
            seed = wl.sampling.seed if wl.sampling.seed is not None else defaults.SEED
            load = {"arrivals": arrival_times(rate, n, seed, wl.burstiness)}
            shards = shard_count(n, n, wl.shard.chunk_rate, self._rates.get(shape))
        else:
            n = wl.requests_for(c)
            load = {"seconds": wl.rep_seconds} if wl.rep_seconds and not wl.requests_per_rep else {}
            shards = shard_count(c, wl.shard.concurrency, wl.shard.chunk_rate, self._rates.get(shape))
        before = scrape(ctx.server.base_url, ctx.adapter)
        plan = PassPlan(ctx.server.base_url, ctx.adapter, items, c or shards, n, wl.max_tokens,
                        dict(wl.sampling), knobs, run.campaign.timeouts.request,
                        exact_output=wl.exact_output, **load)
        res = measure_pass(plan, stop=run.controls.cut, shards=shards)
        self._rates[shape] = chunk_rate(res)
        after = scrape(ctx.server.base_url, ctx.adapter)
        delta, why, rejected = _delta(before, after)
        if delta is None:
            res.extra["metrics_missing"] = why or "no metrics counters"
        if rejected:  # the row says so: bad data from the server, not a flag left off
            res.extra["metrics_rejected"] = why
        errors = [r["error"] for r in res.records if r.get("error")]
        if errors and _died(ctx.server, any(connection_lost(e) for e in errors)):
            raise WindowFailed(f"server died during a pass (exit code {ctx.server.exit_code()})")
        return res, delta, _cache_delta(before, after)

    def _sampled(self, run: RunContext, ctx: WindowContext, cls: str, c: int, rate: float | None,
                 path: Path) -> tuple[PassResult, dict[str, float] | None, dict[str, float] | None,
                                      dict[str, Any] | str]:
        """A pass with the server's GPUs sampled around it: the pass, its metrics delta, its
        prefix-cache counters' delta, and its GPU summary (its samples written beside the
        receipt) or why there is none."""
        if not ctx.gpus:
            res, delta, cache_delta = self._pass(run, ctx, cls, c, rate)
            return res, delta, cache_delta, ctx.gpus.none
        sampler = gpu.Sampler(ctx.gpus).start()
        try:
            res, delta, cache_delta = self._pass(run, ctx, cls, c, rate)
        finally:
            samples = sampler.stop()
        summary = gpu.summarize(samples, stats.rep_figures(res.records, c)["tokens"])
        side = path.with_name(path.name.removesuffix(".jsonl") + ".gpu.jsonl")
        write_jsonl(side, samples, compact=True)
        if sampler.error:  # a reading failed mid-pass: the summary is of what was read
            summary["error"] = sampler.error
        return res, delta, cache_delta, {**summary, "file": side.name}

    def _warm(self, run: RunContext, ctx: WindowContext, where: dict[str, Any], attempt: int,
              label: str) -> None:
        cache = self._flush(run, ctx)  # a failed flush before a warm pass voids nothing: it is said
        c, rate = where["concurrency"], where.get("rate")
        path = shape_files(ctx.dir, where["class"], c, attempt, label, rate)
        warm, delta, cache_delta, gpus = self._sampled(run, ctx, where["class"], c, rate, path)
        write_rep(path, {**where, "attempt": attempt, "rep": label, "metrics_delta": delta,
                         "cache": {**cache, "metrics": cache_delta}, "client": warm.summary(),
                         "gpu": gpus}, warm.records)
        fig = stats.rep_figures(warm.records, where["concurrency"])
        run.emit(EventKind.WARM_DONE, **where, attempt=attempt, label=label, agg_tok_s=fig["agg_tok_s"],
                    failed=fig["failed"], file=str(path.relative_to(run.run_dir)))

    def _resumed(self, run: RunContext, key: str) -> tuple[int, list[Rep], list[str]]:
        """The interrupted attempt of a row and its finished reps, read back from the receipts."""
        row = run.state.rows.get(key)
        if not row or not row.attempt:
            return 0, [], []
        files = row.files.get(row.attempt, {})
        paths = [files[r] for r in sorted(files)]
        return row.attempt, [read_rep(run.run_dir / p) for p in paths], paths

    def shape(self, run: RunContext, ctx: WindowContext, cls: str, c: int,
              rerun: bool = False, rate: float | None = None) -> None:
        policy, ctl, slo = run.leak_policy, run.controls, slo_of(run)
        where: dict[str, Any] = {"session": ctx.session, "window": ctx.window, "class": cls,
                                 "concurrency": c, **({"rate": rate} if rate else {})}
        key = row_key(ctx.session, ctx.window, cls, c, rate)
        attempt, reps, paths = self._resumed(run, key)
        if rerun:
            reps, paths = [], []  # an operator rerun starts a fresh attempt
        elif reps:
            run.emit(EventKind.SHAPE_RESUMED, **where, attempt=attempt, reps_kept=len(reps))
        first_attempt, row = attempt + (0 if reps else 1), {}
        # Fixed for the row, so its live checks, its stopping and its figures read alike.
        pool = noise_pool(run.state, key, c, rate)
        fresh = not reps  # a new attempt begins (a resumed one goes on where it stood)
        carried: list[list[int]] = []  # [attempt, rep] of each rep a new attempt keeps
        stalls = 0  # attempts that ended on the client's own stall
        try:
            while True:
                if fresh:
                    attempt, fresh = attempt + 1, False
                    run.emit(EventKind.SHAPE_STARTED, **where, attempt=attempt, rerun=rerun,
                             **({"carried": carried} if carried else {}))
                warm = True  # a fresh attempt, or a resumed one on a new server
                while len(reps) < self._wanted(run, where, reps, pool):
                    if warm:
                        self._warm(run, ctx, where, attempt, f"warm{len(reps) + 1}" if reps else "warm")
                        warm = False
                    _pause_point(run, where, attempt, len(reps) + 1)
                    if ctl.stopping():
                        return self._aborted(run, where, c, reps, paths, attempt, rerun)
                    if ctl.rewarm.is_set():
                        ctl.rewarm.clear()
                        self._warm(run, ctx, where, attempt, f"rewarm{len(reps) + 1}")
                    rep = len(reps) + 1
                    cache = self._flush(run, ctx)
                    path = shape_files(ctx.dir, cls, c, attempt, rep, rate)
                    if "flush_failed" in cache:  # the rep would measure a cache it was to empty
                        header = {**where, "attempt": attempt, "rep": rep, "cache": cache,
                                  "void": f"cache flush failed: {cache['flush_failed']}"}
                        _keep(run, path, (header, []), reps, paths)
                        break  # the attempt is void: rewarmed and measured again, or the row is
                    res, delta, cache_delta, gpus = self._sampled(run, ctx, cls, c, rate, path)
                    if ctl.cut():  # the pass was cancelled mid-flight: not a rep
                        return self._aborted(run, where, c, reps, paths, attempt, rerun)
                    header = {**where, "attempt": attempt, "rep": rep, "metrics_delta": delta,
                              "cache": {**cache, "metrics": cache_delta}, "client": res.summary(),
                              "gpu": gpus}
                    if res.stalled:  # the engine itself stopped: the rep timed it, not the server
                        header["void"] = (f"{CLIENT_STALLED}: its load loop stopped for "
                                          f"{res.stall_s:.1f} s (the engine was paused or starved: "
                                          "SIGSTOP, a suspended VM, swapping), not the server")
                    _keep(run, path, (header, res.records), reps, paths)
                    if res.stalled:
                        break  # the attempt is void: rewarmed and measured again, or the row is
                    self._rep_done(run, where, attempt, rep, res, paths[-1], reps, pool)
                row = {**stats.row_figures(reps, c, policy, slo, pool),
                       **self._precision(run, where, reps)}
                stalled = bool(reps) and str(reps[-1][0].get("void", "")).startswith(CLIENT_STALLED)
                stalls += stalled
                if (row["status"] != RowStatus.VOID
                        or _spent(attempt - first_attempt, stalls, stalled, policy)):
                    break
                # Only what the verdict condemns is measured again: the next attempt keeps the
                # other reps (their receipts where they are) and, rewarmed, measures the rest.
                gone = _condemn(run, where, attempt, row, reps, load_text(c, rate), pool)
                carried = [[attempt, i + 1] for i in range(len(reps)) if i not in gone]
                reps = [r for i, r in enumerate(reps) if i not in gone]
                paths = [p for i, p in enumerate(paths) if i not in gone]
                fresh = True
        except WindowFailed as e:
            fig = stats.row_figures(reps, c, policy, slo, pool) if reps else {}
            run.emit(EventKind.ROW_DONE, **where, axis=run.axis(ctx.window), attempts=attempt,
                        reason=f"the server failed after {plural(len(reps), 'rep')}: {e}",
                        source=";".join(paths), **{**fig, "status": RowStatus.FAILED},
                        **acceptance_kind(run, where, fig))
            raise
        reason = _row_reason(row, reps, c, load_text(c, rate), attempt, policy, pool)
        run.emit(EventKind.ROW_DONE, **where, axis=run.axis(ctx.window), attempts=attempt,
                    reason=reason, source=";".join(paths), **row, **acceptance_kind(run, where, row))

    def _rep_done(self, run: RunContext, where: dict[str, Any], attempt: int, rep: int,
                  res: PassResult, path: str, reps: list[Rep], pool: stats.Pool) -> None:
        c, policy, header = where["concurrency"], run.leak_policy, reps[-1][0]
        fig = stats.rep_figures(res.records, c, slo_of(run))
        acc = stats.row_figures([(header, res.records)], c, policy)
        figures = gpu.per_rep(header.get("gpu"))
        progress = self._precision(run, where, reps)
        run.emit(EventKind.REP_DONE, **where, attempt=attempt, rep=rep, **fig,
                 **({k: progress[k] for k in ("half_width", "precision_status")} if progress else {}),
                    accept_len=acc["accept_len"], accept_rate=acc["accept_rate"],
                    accept_per_pos=acc["rep_accept_per_pos"][0],
                    cache_hit=stats.rep_cache(header, res.records)["hit"],
                    client_bound=res.client_bound, lag_p99_ms=round(res.lag_p99_ms, 2), file=path,
                    **({"turns": turns} if (turns := stats.turn_figures(res.records)) else {}),
                    **({"gpu": figures} if figures else {}))
        aggs = stats.headline([stats.rep_figures(r, c) for _, r in reps])[0]
        suspect = stats.suspect_rep(aggs, policy, pool)
        row = run.state.rows.get(row_key(where["session"], where["window"], where["class"], c,
                                         where.get("rate")))
        # A rep whose requests failed is slow for that (its failed requests say so, and void the
        # row): a leak is a slow rep of a server that answered.
        if suspect is not None and any(r.get("error") for r in reps[suspect][1]):
            suspect = None
        if suspect is not None and not (row and (attempt, suspect + 1) in row.suspects):  # said once
            cause = stats.rep_cause([h for h, _ in reps], suspect)
            run.emit(EventKind.LEAK_SUSPECTED, **where, attempt=attempt, rep=suspect + 1,
                        agg_tok_s=aggs[suspect], median=stats.median(aggs),
                        **({"cause": stats.THROTTLED, "detail": cause} if cause else {}))

    def _wanted(self, run: RunContext, where: dict[str, Any], reps: list[Rep], pool: stats.Pool) -> int:
        """The reps the row's attempt takes so far: the workload's reps, then (with a precision)
        one more while the rule says another narrows its interval towards it; none more for a
        row that is void as it stands (a leak-shaped row is rerun, not grown)."""
        wl = run.campaign.workload
        if len(reps) < wl.reps or wl.precision is None:
            return wl.reps
        c = where["concurrency"]
        if stats.row_figures(reps, c, run.leak_policy, pool=pool)["status"] == RowStatus.VOID:
            return len(reps)
        grow = self._precision(run, where, reps).get("precision_status") == precision.Progress.MORE
        return len(reps) + 1 if grow else len(reps)

    def _precision(self, run: RunContext, where: dict[str, Any], reps: list[Rep]) -> dict[str, Any]:
        """The row's standing under the precision rule (engine.method.precision); {} without one."""
        wl = run.campaign.workload
        if wl.precision is None or not reps:
            return {}
        rule = precision.Rule(wl.precision, wl.max_reps, wl.reps)
        values = stats.headline([stats.rep_figures(records, where["concurrency"])
                                 for header, records in reps if not header.get("void")])[0]
        noise = judgement(run.state, run.campaign.verdict.rule()).noise_of(
            where["class"], where["concurrency"], where.get("rate"))
        between = noise.between if noise is not None and noise.measured else 0.0
        step = precision.step(values, self._control_reps(run, where), rule, between)
        return {"precision": wl.precision, "stage_reps": wl.reps,
                "half_width": None if step.half is None else round(step.half, 5),
                "precision_status": str(step.progress), "reps_needed": step.needed,
                **({"boot_half": round(step.boot_half, 5)} if step.boot_half is not None else {})}

    @staticmethod
    def _control_reps(run: RunContext, where: dict[str, Any]) -> list[float] | None:
        """The reps of the session's control row of this shape, for a window's delta; None for
        the control itself, or when its row has no figure (the window is judged on its own)."""
        if where["window"] == CONTROL:
            return None
        ctl = run.state.rows.get(row_key(where["session"], CONTROL, where["class"],
                                         where["concurrency"], where.get("rate")))
        if ctl is None or ctl.row.get("status") not in USABLE_ROWS or not ctl.row.get("rep_tok_s"):
            return None
        return list(ctl.row["rep_tok_s"])

    def _aborted(self, run: RunContext, where: dict[str, Any], c: int, reps: list[Rep],
                 paths: list[str], attempt: int, rerun: bool) -> None:
        window_status, why = run.controls.ending()
        if rerun:  # the void row stands as it was; the cut-short rerun is on record
            run.emit(EventKind.RERUN_ABORTED, **where, attempt=attempt, reason=why, reps=len(reps))
            return
        row = stats.row_figures(reps, c, run.leak_policy, slo_of(run)) if reps else {}
        said = (f"{why} ({plural(len(reps), 'rep')} done)" if window_status == WindowStatus.FAILED
                else f"{why} after {plural(len(reps), 'rep')}")
        run.emit(EventKind.ROW_DONE, **where, axis=run.axis(where["window"]), attempts=attempt,
                    reason=said, source=";".join(paths),
                    **{**row, "status": RowStatus.FAILED if window_status == WindowStatus.FAILED
                       else RowStatus.ABORTED})


def acceptance_kind(run: RunContext, where: dict[str, Any], row: dict[str, Any]) -> dict[str, str]:
    """A row's ``acceptance``: simulated, and how, on a window whose server was told to simulate
    it; natural where the server measured its own; none without acceptance figures."""
    ws = run.state.windows.get(f"{where['session']}-{where['window']}")
    if ws is not None and ws.simulated:
        return {"acceptance": acceptance.simulated_text(ws.simulated)}
    return {"acceptance": acceptance.NATURAL} if row.get("accept_len") is not None else {}


def probe_verdicts(run_dir: Path, state: RunState, session: str, window: str, cls: str,
                   search: capacity.Search, criteria: sla.Criteria) -> dict[float, dict[str, Any]]:
    """Every complete row of a window's class at the search's kind of load, judged against the
    criteria from its last attempt's receipts: load -> its probe (load, verdict, reps held, row)."""
    out: dict[float, dict[str, Any]] = {}
    for row in state.rows.values():
        if (row.session, row.window, row.cls) != (session, window, cls) or not row.complete:
            continue
        load = float(row.concurrency) if search.whole else row.rate
        if not load or (search.whole and row.rate):
            continue
        figures: list[dict[str, Any]] = []
        if row.status in USABLE_ROWS:
            files = row.files.get(row.attempt, {})
            figures = [sla.rep_figures(read_rep(run_dir / files[r])[1], criteria) for r in sorted(files)]
        out[load] = {"load": load, "probe": str(sla.judge(figures)), "row": row.key,
                     "held": sum(bool(f["holds"]) for f in figures), "reps": len(figures),
                     "figures": figures}
    return out


def precision_text(row: dict[str, Any]) -> str:
    """How a row stands against the campaign's precision, for its reason."""
    status, reps, target = row.get("precision_status"), row.get("reps"), row.get("precision") or 0
    half = row.get("half_width")
    got = f"+-{half:.1%}" if half is not None else "no interval"
    if status == precision.Progress.REACHED:
        return f"precision +-{target:.1%} reached: {got} with {reps} reps"
    if status == precision.Progress.CAP:
        return f"precision +-{target:.1%} not reached within max_reps: {got} with {reps} reps"
    if status == precision.Progress.CANNOT:
        boots = row.get("boot_half")
        if boots is not None and boots >= target:
            return (f"precision +-{target:.1%} out of reach by reps: the noise between boots at this "
                    f"shape alone is +-{boots:.1%} (more sessions narrow it; {got} with {reps} reps)")
        return f"precision +-{target:.1%} out of reach within max_reps: {got} with {reps} reps"
    return f"precision +-{target:.1%}: {got} with {reps} reps"


def _pause_point(run: RunContext, where: dict[str, Any], attempt: int, rep: int) -> None:
    """Where a pause takes effect, between reps: it is said, then waited out."""
    if run.controls.paused.is_set():
        run.emit(EventKind.PAUSED, **where, attempt=attempt, rep=rep)
    run.controls.wait_if_paused()


def _keep(run: RunContext, path: Path, rep: Rep, reps: list[Rep], paths: list[str]) -> None:
    """A rep's receipt written, the rep and its receipt's path among the attempt's."""
    write_rep(path, *rep)
    reps.append(rep)
    paths.append(str(path.relative_to(run.run_dir)))


def _condemn(run: RunContext, where: dict[str, Any], attempt: int, row: dict[str, Any],
             reps: list[Rep], load: str, pool: stats.Pool) -> set[int]:
    """The reps of a void row its verdict condemns (indices among ``reps``), said in ROW_VOID."""
    policy = run.leak_policy
    gone = set(stats.condemned(reps, where["concurrency"], policy, pool))
    run.emit(EventKind.ROW_VOID, **where, attempt=attempt, spread=row["spread"],
             reason=_void_reason(row, policy, load, pool),
             rep_tok_s=row["rep_tok_s"], condemned=[i + 1 for i in sorted(gone)],
             rerun=True, spread_shape=row["spread_shape"], spread_why=row["spread_why"],
             **({"cause": stats.THROTTLED} if row["throttle_cause"] else {}))
    return gone


def _row_reason(row: dict[str, Any], reps: list[Rep], c: int, load: str, attempt: int,
                policy: stats.LeakPolicy, pool: stats.Pool) -> str:
    """What a finished row's ROW_DONE says of it: why it is void, its precision, what was not
    measured, why its figures are over the whole reps."""
    reasons = []
    if row["status"] == RowStatus.VOID:
        reasons.append(_void_reason(row, policy, load, pool) + f" after {plural(attempt, 'attempt')}")
    if row.get("precision_status"):
        reasons.append(precision_text(row))
    if row["metrics_rejected"]:
        reasons.append(f"acceptance not measured: {row['metrics_rejected']}")
    if row["basis"] == stats.WHOLE and (why := stats.basis_why(
            [stats.rep_figures(records, c) for h, records in reps if not h.get("void")])):
        reasons.append(f"over the whole reps: {why}")
    return "; ".join(reasons)


def _void_reason(row: dict[str, Any], policy: stats.LeakPolicy, load: str, pool: stats.Pool) -> str:
    if row.get("void_reps"):
        why: str = row["void_reps"]
        return why
    if row["failed_requests"]:
        return f"{row['failed_requests']} failed requests ({row['error']})"
    # A leak-shaped row: the rep the rule condemned, against the bar it cleared.
    reading = stats.leak_reading(row["rep_tok_s"], policy, pool)
    rep = "the lowest rep" if reading.rep is None else f"rep {reading.rep + 1}"
    leaked = (f"{rep} {reading.below or 0.0:.1%} below the next lowest > the leak bar "
              f"{reading.bar or 0.0:.1%} at {load}")
    return f"{stats.THROTTLED} ({row['throttle_cause']}): {leaked}" if row.get("throttle_cause") else leaked
