"""The measurement phase of a window: per shape a warm pass, N reps, live leak checks, reruns.

Per shape (prompt class x concurrency) an attempt is: one warm pass (recorded, discarded), then the
reps. A void attempt (a leaked autotune pass at C >= min_concurrency) is rewarmed and rerun, up to
``max_reruns`` times; every attempt's receipts stay on disk.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from engine import results, stats
from engine.load import PassResult, run_pass
from engine.servers.base import ServerAdapter

if TYPE_CHECKING:
    from engine.runner import Runner, WindowContext

CSV_COLUMNS = ["session", "window", "axis", "class", "concurrency", "reps", "agg_tok_s",
               "per_user_tok_s", "ttft_ms", "decode_tok_s", "accept_len", "accept_rate",
               "accept_source", "spread", "status", "attempts", "reason", "source"]


class WindowFailed(RuntimeError):
    """The server died or stopped answering mid-window: the window fails, the campaign goes on."""


def scrape(base_url: str, adapter: ServerAdapter) -> dict[str, float] | None:
    """The adapter's speculative-decoding counters from /metrics, or None when not exposed."""
    try:
        r = httpx.get(base_url + adapter.metrics_path, timeout=10.0)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if not s.labels:
                samples[s.name] = float(s.value)
    return adapter.spec_counters(samples)


def _delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float] | None:
    if not before or not after:
        return None
    return {k: after[k] - before[k] for k in after if k in before}


def shape_files(wdir: Path, cls: str, c: int, attempt: int, rep: int | str) -> Path:
    d = wdir / "reps"
    d.mkdir(exist_ok=True)
    return d / f"{cls}-c{c}-{attempt}-{rep}.jsonl"


def write_rep(path: Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
    lines = [json.dumps({"kind": "rep", **header})]
    lines += [json.dumps({"kind": "request", **r}) for r in records]
    results.write_atomic(path, "\n".join(lines) + "\n")


def read_rep(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    header: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        kind = obj.pop("kind")
        if kind == "rep":
            header = obj
        else:
            records.append(obj)
    return header, records


def recompute_row(run_dir: Path, source: str, concurrency: int,
                  policy: stats.LeakPolicy) -> dict[str, Any]:
    """A throughput.csv row recomputed from the receipts it names."""
    reps = [read_rep(run_dir / p) for p in source.split(";") if p]
    return stats.row_figures(reps, concurrency, policy)


def write_throughput(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS})
    results.write_atomic(run_dir / results.THROUGHPUT, buf.getvalue())


class Measurement:
    """Callable phase: ``Measurement()(runner, ctx)`` measures every shape of the window."""

    def __call__(self, runner: Runner, ctx: WindowContext) -> None:
        wl = runner.campaign.workload
        for cls in wl.classes:
            prompts = runner.campaign.prompts(cls)
            for c in wl.concurrency:
                if runner.controls.abort.is_set() or runner.controls.advance.is_set():
                    return
                self.shape(runner, ctx, cls, prompts, c)

    def _pass(self, runner: Runner, ctx: WindowContext, prompts: list[str],
              c: int) -> tuple[PassResult, dict[str, float] | None]:
        wl = runner.campaign.workload
        n = wl.requests_for(c)
        before = scrape(ctx.server.base_url, ctx.adapter)
        res = asyncio.run(run_pass(ctx.server.base_url, ctx.adapter, prompts, c, n, wl.max_tokens,
                                   dict(wl.sampling), dict(wl.knobs),
                                   runner.campaign.timeouts.request))
        delta = _delta(before, scrape(ctx.server.base_url, ctx.adapter))
        if any(r.get("error") for r in res.records) and not ctx.server.alive():
            raise WindowFailed(f"server died during a pass (exit code {ctx.server.exit_code()})")
        return res, delta

    def shape(self, runner: Runner, ctx: WindowContext, cls: str, prompts: list[str],
              c: int) -> None:
        policy = runner.leak_policy
        where = {"session": ctx.session, "window": ctx.window, "class": cls, "concurrency": c}
        attempt, sources, row = 0, [], {}
        while True:
            attempt += 1
            runner.emit("shape_started", **where, attempt=attempt)
            warm, delta = self._pass(runner, ctx, prompts, c)
            warm_path = shape_files(ctx.dir, cls, c, attempt, "warm")
            write_rep(warm_path, {**where, "attempt": attempt, "rep": "warm",
                                  "metrics_delta": delta, "client": warm.summary()}, warm.records)
            warm_fig = stats.rep_figures(warm.records, c)
            runner.emit("warm_done", **where, attempt=attempt, agg_tok_s=warm_fig["agg_tok_s"],
                        failed=warm_fig["failed"])
            reps: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
            paths: list[str] = []
            for rep in range(1, runner.campaign.workload.reps + 1):
                if runner.controls.abort.is_set():
                    return
                res, delta = self._pass(runner, ctx, prompts, c)
                header = {**where, "attempt": attempt, "rep": rep, "metrics_delta": delta,
                          "client": res.summary()}
                path = shape_files(ctx.dir, cls, c, attempt, rep)
                write_rep(path, header, res.records)
                reps.append((header, res.records))
                paths.append(str(path.relative_to(runner.run_dir)))
                fig = stats.rep_figures(res.records, c)
                acc = stats.row_figures([(header, res.records)], c, policy)
                runner.emit("rep_done", **where, attempt=attempt, rep=rep, **fig,
                            accept_len=acc["accept_len"], accept_rate=acc["accept_rate"],
                            client_bound=res.client_bound, lag_p99_ms=round(res.lag_p99_ms, 2),
                            file=paths[-1])
                aggs = [stats.rep_figures(r, c)["agg_tok_s"] for _, r in reps]
                suspect = stats.suspect_rep(aggs, policy.spread)
                if suspect is not None:
                    runner.emit("leak_suspected", **where, attempt=attempt, rep=suspect + 1,
                                agg_tok_s=aggs[suspect], median=stats.median(aggs))
            sources.extend(paths)
            row = stats.row_figures(reps, c, policy)
            if row["status"] != "void" or attempt > policy.max_reruns:
                break
            reason = (f"{row['failed_requests']} failed requests" if row["failed_requests"]
                      else f"spread {row['spread']:.1%} > {policy.spread:.0%} at C{c}")
            runner.emit("row_void", **where, attempt=attempt, spread=row["spread"], reason=reason,
                        rep_tok_s=row["rep_tok_s"], rerun=True)
        reason = ""
        if row["status"] == "void":
            reason = (f"{row['failed_requests']} failed requests" if row["failed_requests"] else
                      f"spread {row['spread']:.1%} after {attempt} attempts: operator, look")
        axis = "control" if ctx.window == "control" else runner.campaign.window(ctx.window).axis
        runner.emit("row_done", **where, axis=axis, attempts=attempt, reason=reason,
                    source=";".join(paths), all_sources=sources, **row)
