"""The measurement phase of a window: per shape a warm pass, N reps, live leak checks, reruns.

Per shape (prompt class x concurrency) an attempt is: one warm pass (recorded, discarded), then the
reps. A void attempt (a leaked autotune pass at C >= min_concurrency) is rewarmed and rerun, up to
``max_reruns`` times; every attempt's receipts stay on disk.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from engine import results, stats
from engine.load import PassResult, measure_pass
from engine.servers.base import ServerAdapter
from engine.state import RunState, row_key

if TYPE_CHECKING:
    from engine.runner import Runner, WindowContext

CSV_COLUMNS = ["session", "window", "axis", "class", "concurrency", "reps", "agg_tok_s",
               "per_user_tok_s", "ttft_ms", "decode_tok_s", "accept_len", "accept_rate",
               "accept_source", "spread", "status", "attempts", "reason", "source", "ruler_check"]


class WindowFailed(RuntimeError):
    """The server died or stopped answering mid-window: the window fails, the campaign goes on."""


def scrape(base_url: str, adapter: ServerAdapter) -> tuple[dict[str, float] | None, str | None]:
    """The adapter's speculative-decoding counters, or None and why (naming the server flag)."""
    try:
        r = httpx.get(base_url + adapter.metrics_path, timeout=10.0)
    except httpx.HTTPError:
        return None, adapter.missing_metrics(None, None)
    samples = adapter.metric_samples(r.text) if r.status_code == 200 else None
    why = adapter.missing_metrics(r.status_code, samples)
    return (adapter.spec_counters(samples) if samples is not None else None), why


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


def throughput_rows(state: RunState) -> list[dict[str, Any]]:
    """The finished rows, each with its window's ruler check verdict ("ruler suspect" loudly)."""
    def ruler(session: str, window: str) -> str:
        ws = state.windows.get(f"{session}-{window}")
        return str(ws.verdicts.get("knobs", {}).get("verdict", "")) if ws else ""

    return [{**r.row, "ruler_check": ruler(r.session, r.window)} for r in state.rows.values() if r.row]


def write_throughput(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS})
    results.write_atomic(run_dir / results.THROUGHPUT, buf.getvalue())


Rep = tuple[dict[str, Any], list[dict[str, Any]]]


class Measurement:
    """Callable phase: ``Measurement()(runner, ctx)`` measures every shape of the window.

    On resume, rows already complete are skipped and an interrupted row continues at its next rep
    (after a fresh warm pass: the server is a new one). Operator reruns of void rows queued for this
    window run after its regular shapes.
    """

    def __call__(self, runner: Runner, ctx: WindowContext) -> None:
        wl = runner.campaign.workload
        for cls in wl.classes:
            for c in wl.concurrency:
                if runner.controls.stopping():
                    return
                row = runner.state.rows.get(row_key(ctx.session, ctx.window, cls, c))
                if row and row.complete:
                    continue
                try:
                    self.shape(runner, ctx, cls, c)
                except WindowFailed:
                    self._not_measured(runner, ctx)
                    raise
        self.reruns(runner, ctx)

    def _not_measured(self, runner: Runner, ctx: WindowContext) -> None:
        """Every shape of a failed window without a row gets one: throughput.csv has no gaps."""
        wl = runner.campaign.workload
        for cls in wl.classes:
            for c in wl.concurrency:
                row = runner.state.rows.get(row_key(ctx.session, ctx.window, cls, c))
                if row and row.row:
                    continue
                runner.emit("row_done", session=ctx.session, window=ctx.window, **{"class": cls},
                            concurrency=c, axis=runner.axis(ctx.window), attempts=0, status="failed",
                            reason="not measured: the server failed earlier in the window", source="")

    def reruns(self, runner: Runner, ctx: WindowContext) -> None:
        prefix = f"{ctx.session}-{ctx.window}/"
        while not runner.controls.stopping():
            key = next((k for k in runner.controls.reruns if k.startswith(prefix)), None)
            if key is None:
                return
            runner.controls.reruns.remove(key)
            row = runner.state.rows[key]
            self.shape(runner, ctx, row.cls, row.concurrency, rerun=True)

    def _pass(self, runner: Runner, ctx: WindowContext, cls: str,
              c: int) -> tuple[PassResult, dict[str, float] | None]:
        wl = runner.campaign.workload
        before, _ = scrape(ctx.server.base_url, ctx.adapter)
        res = measure_pass(ctx.server.base_url, ctx.adapter, runner.prompts[cls], c,
                           wl.requests_for(c), wl.max_tokens, dict(wl.sampling), dict(wl.knobs),
                           runner.campaign.timeouts.request, stop=runner.controls.abort.is_set)
        after, why = scrape(ctx.server.base_url, ctx.adapter)
        delta = _delta(before, after)
        if delta is None:
            res.extra["metrics_missing"] = why or "metrics counters changed shape during the pass"
        if any(r.get("error") for r in res.records) and not ctx.server.alive():
            raise WindowFailed(f"server died during a pass (exit code {ctx.server.exit_code()})")
        return res, delta

    def _warm(self, runner: Runner, ctx: WindowContext, where: dict[str, Any], attempt: int,
              label: str) -> None:
        warm, delta = self._pass(runner, ctx, where["class"], where["concurrency"])
        path = shape_files(ctx.dir, where["class"], where["concurrency"], attempt, label)
        write_rep(path, {**where, "attempt": attempt, "rep": label, "metrics_delta": delta,
                         "client": warm.summary()}, warm.records)
        fig = stats.rep_figures(warm.records, where["concurrency"])
        runner.emit("warm_done", **where, attempt=attempt, label=label, agg_tok_s=fig["agg_tok_s"],
                    failed=fig["failed"], file=str(path.relative_to(runner.run_dir)))

    def _resumed(self, runner: Runner, key: str) -> tuple[int, list[Rep], list[str]]:
        """The interrupted attempt of a row and its finished reps, read back from the receipts."""
        row = runner.state.rows.get(key)
        if not row or not row.attempt:
            return 0, [], []
        files = row.files.get(row.attempt, {})
        paths = [files[r] for r in sorted(files)]
        return row.attempt, [read_rep(runner.run_dir / p) for p in paths], paths

    def shape(self, runner: Runner, ctx: WindowContext, cls: str, c: int,
              rerun: bool = False) -> None:
        policy, ctl = runner.leak_policy, runner.controls
        where = {"session": ctx.session, "window": ctx.window, "class": cls, "concurrency": c}
        key = row_key(ctx.session, ctx.window, cls, c)
        attempt, reps, paths = self._resumed(runner, key)
        if rerun:
            reps, paths = [], []  # an operator rerun starts a fresh attempt
        elif reps:
            runner.emit("shape_resumed", **where, attempt=attempt, reps_kept=len(reps))
        first_attempt, row = attempt + (0 if reps else 1), {}
        try:
            while True:
                if not reps:
                    attempt += 1
                    runner.emit("shape_started", **where, attempt=attempt, rerun=rerun)
                if len(reps) < runner.campaign.workload.reps:
                    self._warm(runner, ctx, where, attempt, f"warm{len(reps) + 1}" if reps else "warm")
                while len(reps) < runner.campaign.workload.reps:
                    if ctl.paused.is_set():  # the pause takes effect here, between reps: say so
                        runner.emit("paused", **where, attempt=attempt, rep=len(reps) + 1)
                    ctl.wait_if_paused()
                    if ctl.stopping():
                        return self._aborted(runner, where, c, reps, paths, attempt, rerun)
                    if ctl.rewarm.is_set():
                        ctl.rewarm.clear()
                        self._warm(runner, ctx, where, attempt, f"rewarm{len(reps) + 1}")
                    rep = len(reps) + 1
                    res, delta = self._pass(runner, ctx, cls, c)
                    if ctl.abort.is_set():  # the pass was cancelled mid-flight: not a rep
                        return self._aborted(runner, where, c, reps, paths, attempt, rerun)
                    header = {**where, "attempt": attempt, "rep": rep, "metrics_delta": delta,
                              "client": res.summary()}
                    path = shape_files(ctx.dir, cls, c, attempt, rep)
                    write_rep(path, header, res.records)
                    reps.append((header, res.records))
                    paths.append(str(path.relative_to(runner.run_dir)))
                    self._rep_done(runner, where, attempt, rep, res, header, paths[-1], reps)
                row = stats.row_figures(reps, c, policy)
                if row["status"] != "void" or attempt - first_attempt >= policy.max_reruns:
                    break
                runner.emit("row_void", **where, attempt=attempt, spread=row["spread"],
                            reason=_void_reason(row, policy, c), rep_tok_s=row["rep_tok_s"], rerun=True)
                reps, paths = [], []
        except WindowFailed as e:
            fig = stats.row_figures(reps, c, policy) if reps else {}
            runner.emit("row_done", **where, axis=runner.axis(ctx.window), attempts=attempt,
                        reason=f"the server failed after {len(reps)} reps: {e}",
                        source=";".join(paths), **{**fig, "status": "failed"})
            raise
        reason = ""
        if row["status"] == "void":
            reason = _void_reason(row, policy, c) + f" after {attempt - first_attempt + 1} attempts"
        runner.emit("row_done", **where, axis=runner.axis(ctx.window), attempts=attempt,
                    reason=reason, source=";".join(paths), **row)

    def _rep_done(self, runner: Runner, where: dict[str, Any], attempt: int, rep: int,
                  res: PassResult, header: dict[str, Any], path: str, reps: list[Rep]) -> None:
        c, policy = where["concurrency"], runner.leak_policy
        fig = stats.rep_figures(res.records, c)
        acc = stats.row_figures([(header, res.records)], c, policy)
        runner.emit("rep_done", **where, attempt=attempt, rep=rep, **fig,
                    accept_len=acc["accept_len"], accept_rate=acc["accept_rate"],
                    client_bound=res.client_bound, lag_p99_ms=round(res.lag_p99_ms, 2), file=path)
        aggs = [stats.rep_figures(r, c)["agg_tok_s"] for _, r in reps]
        suspect = stats.suspect_rep(aggs, policy.spread)
        row = runner.state.rows.get(row_key(where["session"], where["window"], where["class"], c))
        if suspect is not None and not (row and (attempt, suspect + 1) in row.suspects):  # said once
            runner.emit("leak_suspected", **where, attempt=attempt, rep=suspect + 1,
                        agg_tok_s=aggs[suspect], median=stats.median(aggs))

    def _aborted(self, runner: Runner, where: dict[str, Any], c: int, reps: list[Rep],
                 paths: list[str], attempt: int, rerun: bool) -> None:
        why = "operator abort" if runner.controls.abort.is_set() else "operator advanced the window"
        if rerun:  # the void row stands as it was; the cut-short rerun is on record
            runner.emit("rerun_aborted", **where, attempt=attempt, reason=why, reps=len(reps))
            return
        row = stats.row_figures(reps, c, runner.leak_policy) if reps else {}
        runner.emit("row_done", **where, axis=runner.axis(where["window"]), attempts=attempt,
                    reason=f"{why} after {len(reps)} reps", source=";".join(paths),
                    **{**row, "status": "aborted"})


def _void_reason(row: dict[str, Any], policy: stats.LeakPolicy, c: int) -> str:
    if row["failed_requests"]:
        return f"{row['failed_requests']} failed requests"
    return f"spread {row['spread']:.1%} > {policy.spread:.0%} at C{c}"
