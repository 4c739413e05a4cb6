"""The measurement phase of a window: every shape's row (engine.run.attempt: per shape a warm
pass, N reps, live leak checks, reruns), capacity searches, operator reruns.

The GPUs the server owns are sampled around every pass (engine.run.passes): a rep's receipt has
their summary and names its sample file, and a slow rep the telemetry explains is journaled as
throttled rather than as a leak.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.context import RunContext, WindowContext
from engine.errors import WindowFailed
from engine.method import capacity, sla, stats
from engine.record.events import Capacity, EventKind
from engine.record.receipts import read_rep
from engine.record.state import RunState, capacity_key
from engine.run.attempt import Row, shape_of, slo_of
from engine.run.passes import Passes, ShapeKey
from engine.words import USABLE_ROWS, RowStatus, WindowStatus, row_key


def recompute_row(run_dir: Path, source: str, concurrency: int, policy: stats.LeakPolicy,
                  slo: stats.Slo = stats.NO_SLO, pool: stats.Pool = ()) -> dict[str, Any]:
    """A throughput.csv row recomputed from the receipts it names; ``pool`` as the row met it
    (:func:`noise_pool` when it started), for the same leak reading."""
    reps = [read_rep(run_dir / p) for p in source.split(";") if p]
    row: dict[str, Any] = stats.row_figures(reps, concurrency, policy, slo, pool)
    return row


class Measurement:
    """Callable phase: ``Measurement()(run, ctx)`` measures every shape of the window.

    On resume, rows already complete are skipped and an interrupted row continues at its next rep
    (after a fresh warm pass: the server is a new one). Operator reruns of void rows queued for this
    window run after its regular shapes.
    """

    def __init__(self) -> None:
        # Chunks per second of each shape's last pass: the next pass's shards are judged on it.
        self._rates: dict[ShapeKey, float] = {}

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
                said: Capacity = {
                    "session": ctx.session, "window": ctx.window, "class": cls, "over": search.over,
                    "criteria": criteria.text(), "found": str(answer.found), "lo": answer.lo,
                    "hi": answer.hi, "mixed": list(answer.mixed),
                    "probes": [probes[x] for x in sorted(probes)]}
                run.emit(EventKind.CAPACITY, **said)
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
                run.emit(EventKind.ROW_DONE, **shape_of(ctx.session, ctx.window, cls, c, rate),
                         axis=run.axis(ctx.window), attempts=0, status=RowStatus.FAILED, reason=reason,
                         source="")

    def reruns(self, run: RunContext, ctx: WindowContext) -> None:
        prefix = f"{ctx.session}-{ctx.window}/"
        while not run.controls.stopping():
            key = next((k for k in run.controls.reruns if k.startswith(prefix)), None)
            if key is None:
                return
            run.controls.take_rerun(key)
            row = run.state.rows[key]
            self.shape(run, ctx, row.cls, row.concurrency, rerun=True, rate=row.rate)

    def shape(self, run: RunContext, ctx: WindowContext, cls: str, c: int,
              rerun: bool = False, rate: float | None = None) -> None:
        """One shape's row, measured attempt by attempt (engine.run.attempt)."""
        where = shape_of(ctx.session, ctx.window, cls, c, rate)
        Row(run, Passes(run, ctx, self._rates), where, rerun).measure()


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
