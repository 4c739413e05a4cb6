"""A row's measurement, attempt by attempt: each attempt is a warm pass (recorded, discarded), then
its reps; the row's live checks (a suspected leak, the precision rule's progress) are said as
each rep lands. A void attempt (a leaked autotune pass at C >= min_concurrency, failed requests,
a failed cache flush, the client's own stall) condemns the reps its verdict names: the next
attempt keeps the others (their receipts where they are), is rewarmed and measures the rest, up
to ``max_reruns`` times. Every attempt's receipts stay on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from engine import gpu
from engine.context import RunContext
from engine.errors import WindowFailed
from engine.method import acceptance, precision, stats
from engine.record.events import EventKind, Shape
from engine.record.judgement import judgement
from engine.record.receipts import read_rep, write_rep
from engine.record.request import RequestRecord
from engine.record.state import RunState
from engine.run.loadgen import PassResult
from engine.run.passes import Passes, shape_files
from engine.words import CONTROL, USABLE_ROWS, RowStatus, WindowStatus, load_text, plural, row_key

Rep = tuple[dict[str, Any], list[RequestRecord]]

# A client's own stall says nothing of the server, so it is not charged to leak.max_reruns (the
# server's budget): a campaign that allows no leak rerun still measures such a rep again. These
# many of its own, so that an engine starved for good still ends its row.
CLIENT_STALL_RERUNS = 2
CLIENT_STALLED = "client stalled"  # how a rep the client stalled is voided: its reason starts so


def shape_of(session: str, window: str, cls: str, c: int, rate: float | None = None) -> Shape:
    """The fields every event of a row has: its shape (an open-loop row's rate last)."""
    where: Shape = {"session": session, "window": window, "class": cls, "concurrency": c}
    if rate:
        where["rate"] = rate
    return where


def slo_of(run: RunContext) -> stats.Slo:
    slo = run.campaign.workload.slo
    return stats.Slo(slo.ttft_ms, slo.tpot_ms)


def noise_pool(state: RunState, key: str, cls: str, concurrency: int,
               rate: float | None) -> list[list[float]]:
    """The leak rule's noise (engine.method.leak): the reps of the run's finished rows of this
    class at this load (any window or session), the most recent last, the row ``key`` itself left
    out. Noise differs by class (on an H100 prose C8 rows moved 1.5 % where code C8 moved 25 %):
    a code row read against prose's noise is a noisy row voided. A void row is left out too: its
    wide reps are what the rule condemned, not the server's noise."""
    return [list(r.row["rep_tok_s"]) for r in state.rows.values()
            if r.key != key and r.cls == cls and r.concurrency == concurrency and r.rate == rate
            and r.complete and r.row.get("status") in USABLE_ROWS and r.row.get("rep_tok_s")]


def _spent(reruns: int, stalls: int, stalled: bool, policy: stats.LeakPolicy) -> bool:
    """Whether a void row has had all its measurements again: ``reruns`` attempts past its first,
    ``stalls`` of them (this one included when ``stalled``) ended by the client's stall."""
    if stalled:
        return stalls > CLIENT_STALL_RERUNS
    return reruns - stalls >= policy.max_reruns


class Row:
    """A row measured in this window: its shape, its noise pool, and its attempts here
    (:meth:`measure`). On resume, an interrupted attempt goes on at its next rep, after a fresh
    warm pass (the server is a new one); an operator's rerun starts a fresh attempt."""

    def __init__(self, run: RunContext, passes: Passes, where: Shape, rerun: bool) -> None:
        self.run, self.passes, self.where, self.rerun = run, passes, where, rerun
        self.c, self.rate = where["concurrency"], where.get("rate")
        self.key = row_key(where["session"], where["window"], where["class"], self.c, self.rate)
        self.load = load_text(self.c, self.rate)
        self.pool: stats.Pool = ()
        self.first = 0  # the first attempt measured here
        self.stalls = 0  # attempts here that ended on the client's own stall

    def measure(self) -> None:
        """Attempts until the row stands (or its reruns are spent), then its row_done; a window
        that fails under it fails the row, said, before the failure goes on up."""
        attempt = self._first()
        try:
            while True:
                if not attempt.measure():
                    return  # cut short: its end is on record
                figures = attempt.judged()
                if attempt.ends(figures):
                    break
                attempt = attempt.condemn(figures)
        except WindowFailed as e:
            attempt.failed(e)
            raise
        attempt.done(figures)

    def _first(self) -> Attempt:
        """The attempt the row goes on with: the interrupted one, read back from its receipts,
        or a fresh one."""
        number, reps, paths = 0, [], []
        st = self.run.state.rows.get(self.key)
        if st and st.attempt:
            files = st.files.get(st.attempt, {})
            paths = [files[r] for r in sorted(files)]
            number, reps = st.attempt, [read_rep(self.run.run_dir / p) for p in paths]
        if self.rerun:
            reps, paths = [], []  # an operator rerun starts a fresh attempt
        elif reps:
            self.run.emit(EventKind.SHAPE_RESUMED, **self.where, attempt=number, reps_kept=len(reps))
        # Fixed for the row, so its live checks, its stopping and its figures read alike.
        self.pool = noise_pool(self.run.state, self.key, self.where["class"], self.c, self.rate)
        attempt = Attempt(self, number, reps, paths) if reps else Attempt(self, number + 1, [], [], [])
        self.first = attempt.number
        return attempt

    def control_reps(self) -> list[float] | None:
        """The reps of the session's control row of this shape, for a window's delta; None for
        the control itself, or when its row has no figure (the window is judged on its own)."""
        where = self.where
        if where["window"] == CONTROL:
            return None
        ctl = self.run.state.rows.get(row_key(where["session"], CONTROL, where["class"], self.c, self.rate))
        if ctl is None or ctl.row.get("status") not in USABLE_ROWS or not ctl.row.get("rep_tok_s"):
            return None
        return list(ctl.row["rep_tok_s"])


Took = Literal["measured", "void", "cut"]  # what a rep came to (Attempt._rep)


class Attempt:
    """One attempt at a row: its number, the reps it holds (those a void attempt before it kept,
    then its own) and their receipts. ``carried``: [attempt, rep] of each kept rep, None for an
    attempt resumed where it stood (it was started before)."""

    def __init__(self, row: Row, number: int, reps: list[Rep], paths: list[str],
                 carried: list[list[int]] | None = None) -> None:
        self.row, self.number, self.reps, self.paths, self.carried = row, number, reps, paths, carried
        self.run, self.where = row.run, row.where

    # ------------------------------------------------------------ its reps

    def measure(self) -> bool:
        """Its reps until the row takes no more or one voids the attempt; False when the window
        was stopped first (the row's end is then on record)."""
        run, ctl = self.run, self.run.controls
        if self.carried is not None:
            run.emit(EventKind.SHAPE_STARTED, **self.where, attempt=self.number, rerun=self.row.rerun,
                     **({"carried": self.carried} if self.carried else {}))
        warm = True  # a fresh attempt, or a resumed one on a new server
        while len(self.reps) < self._wanted():
            if warm:
                self._warm(f"warm{len(self.reps) + 1}" if self.reps else "warm")
                warm = False
            self._pause_point()
            if ctl.stopping():
                self._aborted()
                return False
            if ctl.rewarm.is_set():
                ctl.rewarm.clear()
                self._warm(f"rewarm{len(self.reps) + 1}")
            took = self._rep()
            if took == "cut":
                self._aborted()
                return False
            if took == "void":
                break  # the attempt is void: rewarmed and measured again, or the row is
        return True

    def _rep(self) -> Took:
        """One rep, its receipt kept: measured; void (the cache flush failed, or the client
        stalled: the attempt ends); or cut short mid-flight (no rep)."""
        row, where, passes = self.row, self.where, self.row.passes
        rep = len(self.reps) + 1
        cache = passes.flush()
        path = shape_files(passes.ctx.dir, where["class"], row.c, self.number, rep, row.rate)
        header: dict[str, Any] = {**where, "attempt": self.number, "rep": rep}
        if "flush_failed" in cache:  # the rep would measure a cache it was to empty
            self._keep(path, ({**header, "cache": cache,
                               "void": f"cache flush failed: {cache['flush_failed']}"}, []))
            return "void"
        measured = passes.sampled(where["class"], row.c, row.rate, path)
        if self.run.controls.cut():  # the pass was cancelled mid-flight: not a rep
            return "cut"
        res = measured.result
        header |= {"metrics_delta": measured.metrics, "cache": {**cache, "metrics": measured.cache},
                   "client": res.summary(), "gpu": measured.gpu}
        if res.stalled:  # the engine itself stopped: the rep timed it, not the server
            header["void"] = (f"{CLIENT_STALLED}: its load loop stopped for {res.stall_s:.1f} s (the "
                              "engine was paused or starved: SIGSTOP, a suspended VM, swapping), not "
                              "the server")
        self._keep(path, (header, res.records))
        if res.stalled:
            return "void"
        self._rep_done(rep, res)
        return "measured"

    def _warm(self, label: str) -> None:
        row, where, passes = self.row, self.where, self.row.passes
        cache = passes.flush()  # a failed flush before a warm pass voids nothing: it is said
        path = shape_files(passes.ctx.dir, where["class"], row.c, self.number, label, row.rate)
        warm = passes.sampled(where["class"], row.c, row.rate, path)
        write_rep(path, {**where, "attempt": self.number, "rep": label, "metrics_delta": warm.metrics,
                         "cache": {**cache, "metrics": warm.cache}, "client": warm.result.summary(),
                         "gpu": warm.gpu}, warm.result.records)
        fig = stats.rep_figures(warm.result.records, row.c)
        self.run.emit(EventKind.WARM_DONE, **where, attempt=self.number, label=label,
                      agg_tok_s=fig["agg_tok_s"], failed=fig["failed"],
                      file=str(path.relative_to(self.run.run_dir)))

    def _keep(self, path: Path, rep: Rep) -> None:
        """A rep's receipt written, the rep and its receipt's path among the attempt's."""
        write_rep(path, *rep)
        self.reps.append(rep)
        self.paths.append(str(path.relative_to(self.run.run_dir)))

    def _pause_point(self) -> None:
        """Where a pause takes effect, between reps: it is said, then waited out."""
        run = self.run
        if run.controls.paused.is_set():
            run.emit(EventKind.PAUSED, **self.where, attempt=self.number, rep=len(self.reps) + 1)
        run.controls.wait_if_paused()

    def _rep_done(self, rep: int, res: PassResult) -> None:
        """A measured rep's figures said (rep_done), then the leak check on the attempt's reps."""
        run, c, header = self.run, self.row.c, self.reps[-1][0]
        fig = stats.rep_figures(res.records, c, slo_of(run))
        acc = stats.row_figures([(header, res.records)], c, run.leak_policy)
        figures = gpu.per_rep(header.get("gpu"))
        progress = self._precision()
        turns = stats.turn_figures(res.records)
        # The fields a rep has or not (as dict[str, Any]: engine.record.send says why).
        held: dict[str, Any] = {"turns": turns} if turns else {}
        held |= {"gpu": figures} if figures else {}
        # A rep's acceptance set by the server, not measured, says so as its row does (natural
        # reps carry nothing: a rep_done is otherwise as it was).
        kind = acceptance_kind(run, self.where, {"accept_len": acc["accept_len"]}).get("acceptance", "")
        held |= {"acceptance": kind} if kind.startswith("simulated") else {}
        run.emit(EventKind.REP_DONE, **self.where, attempt=self.number, rep=rep, **fig,
                 **({k: progress[k] for k in ("half_width", "precision_status")} if progress else {}),
                 accept_len=acc["accept_len"], accept_rate=acc["accept_rate"],
                 accept_per_pos=acc["rep_accept_per_pos"][0],
                 cache_hit=stats.rep_cache(header, res.records)["hit"],
                 client_bound=res.client_bound, lag_p99_ms=round(res.lag_p99_ms, 2),
                 file=self.paths[-1], **held)
        self._suspect()

    def _suspect(self) -> None:
        """A rep the leak rule suspects as the reps stand, said once (leak_suspected)."""
        run, reps = self.run, self.reps
        aggs = stats.headline([stats.rep_figures(r, self.row.c) for _, r in reps])[0]
        suspect = stats.suspect_rep(aggs, run.leak_policy, self.row.pool)
        # A rep whose requests failed is slow for that (its failed requests say so, and void the
        # row): a leak is a slow rep of a server that answered.
        if suspect is None or any(r.get("error") for r in reps[suspect][1]):
            return
        st = run.state.rows.get(self.row.key)
        if st and (self.number, suspect + 1) in st.suspects:  # said once
            return
        cause = stats.rep_cause([h for h, _ in reps], suspect)
        run.emit(EventKind.LEAK_SUSPECTED, **self.where, attempt=self.number, rep=suspect + 1,
                 agg_tok_s=aggs[suspect], median=stats.median(aggs),
                 **({"cause": stats.THROTTLED, "detail": cause} if cause else {}))

    def _wanted(self) -> int:
        """The reps the attempt takes so far: the workload's reps, then (with a precision) one
        more while the rule says another narrows its interval towards it; none more for a row
        that is void as it stands (a leak-shaped row is rerun, not grown)."""
        wl, reps = self.run.campaign.workload, self.reps
        if len(reps) < wl.reps or wl.precision is None:
            return wl.reps
        if stats.row_figures(reps, self.row.c, self.run.leak_policy, pool=self.row.pool)["status"] \
                == RowStatus.VOID:
            return len(reps)
        grow = self._precision().get("precision_status") == precision.Progress.MORE
        return len(reps) + 1 if grow else len(reps)

    def _precision(self) -> dict[str, Any]:
        """The row's standing under the precision rule (engine.method.precision); {} without one."""
        run, row, wl = self.run, self.row, self.run.campaign.workload
        if wl.precision is None or not self.reps:
            return {}
        rule = precision.Rule(wl.precision, wl.max_reps, wl.reps)
        values = stats.headline([stats.rep_figures(records, row.c)
                                 for header, records in self.reps if not header.get("void")])[0]
        noise = judgement(run.state, run.campaign.verdict.rule()).noise_of(
            self.where["class"], row.c, row.rate)
        between = noise.between if noise is not None and noise.measured else 0.0
        step = precision.step(values, row.control_reps(), rule, between)
        return {"precision": wl.precision, "stage_reps": wl.reps,
                "half_width": None if step.half is None else round(step.half, 5),
                "precision_status": str(step.progress), "reps_needed": step.needed,
                **({"boot_half": round(step.boot_half, 5)} if step.boot_half is not None else {})}

    # ------------------------------------------------------------ its verdict

    def judged(self) -> dict[str, Any]:
        """The row's figures over the attempt's reps, with its standing under the precision."""
        run, row = self.run, self.row
        return {**stats.row_figures(self.reps, row.c, run.leak_policy, slo_of(run), row.pool),
                **self._precision()}

    def ends(self, figures: dict[str, Any]) -> bool:
        """Whether the row ends with this attempt: it is not void, or its reruns are spent (an
        attempt the client's stall ended is counted apart)."""
        reps = self.reps
        stalled = bool(reps) and str(reps[-1][0].get("void", "")).startswith(CLIENT_STALLED)
        self.row.stalls += stalled
        return (figures["status"] != RowStatus.VOID
                or _spent(self.number - self.row.first, self.row.stalls, stalled, self.run.leak_policy))

    def condemn(self, figures: dict[str, Any]) -> Attempt:
        """The reps of a void attempt its verdict condemns, said (row_void); the next attempt,
        which keeps the others. Only what the verdict condemns is measured again."""
        run, row = self.run, self.row
        gone = set(stats.condemned(self.reps, row.c, run.leak_policy, row.pool))
        run.emit(EventKind.ROW_VOID, **self.where, attempt=self.number, spread=figures["spread"],
                 reason=_void_reason(figures, run.leak_policy, row.load, row.pool),
                 rep_tok_s=figures["rep_tok_s"], condemned=[i + 1 for i in sorted(gone)],
                 rerun=True, spread_shape=figures["spread_shape"], spread_why=figures["spread_why"],
                 **({"cause": stats.THROTTLED} if figures["throttle_cause"] else {}))
        kept = [i for i in range(len(self.reps)) if i not in gone]
        return Attempt(row, self.number + 1, [self.reps[i] for i in kept], [self.paths[i] for i in kept],
                       [[self.number, i + 1] for i in kept])

    # ------------------------------------------------------------ the row's end

    def done(self, figures: dict[str, Any]) -> None:
        run, row = self.run, self.row
        reason = _row_reason(figures, self.reps, row.c, row.load, self.number, run.leak_policy, row.pool)
        run.emit(EventKind.ROW_DONE, **self.where, axis=run.axis(self.where["window"]),
                 attempts=self.number, reason=reason, source=";".join(self.paths), **figures,
                 **acceptance_kind(run, self.where, figures))

    def failed(self, error: WindowFailed) -> None:
        """The row failed with its window's server, after the reps it had."""
        run, row, reps = self.run, self.row, self.reps
        fig = stats.row_figures(reps, row.c, run.leak_policy, slo_of(run), row.pool) if reps else {}
        run.emit(EventKind.ROW_DONE, **self.where, axis=run.axis(self.where["window"]),
                 attempts=self.number, reason=f"the server failed after {plural(len(reps), 'rep')}: {error}",
                 source=";".join(self.paths), **{**fig, "status": RowStatus.FAILED},
                 **acceptance_kind(run, self.where, fig))

    def _aborted(self) -> None:
        run, reps = self.run, self.reps
        window_status, why = run.controls.ending()
        if self.row.rerun:  # the void row stands as it was; the cut-short rerun is on record
            run.emit(EventKind.RERUN_ABORTED, **self.where, attempt=self.number, reason=why, reps=len(reps))
            return
        row = stats.row_figures(reps, self.row.c, run.leak_policy, slo_of(run)) if reps else {}
        said = (f"{why} ({plural(len(reps), 'rep')} done)" if window_status == WindowStatus.FAILED
                else f"{why} after {plural(len(reps), 'rep')}")
        run.emit(EventKind.ROW_DONE, **self.where, axis=run.axis(self.where["window"]),
                 attempts=self.number, reason=said, source=";".join(self.paths),
                 **{**row, "status": RowStatus.FAILED if window_status == WindowStatus.FAILED
                    else RowStatus.ABORTED})


def acceptance_kind(run: RunContext, where: Shape, row: dict[str, Any]) -> dict[str, str]:
    """A row's ``acceptance``: simulated, and how, on a window whose server was told to simulate
    it; natural where the server measured its own; none without acceptance figures."""
    ws = run.state.windows.get(f"{where['session']}-{where['window']}")
    if ws is not None and ws.simulated:
        return {"acceptance": acceptance.simulated_text(ws.simulated)}
    return {"acceptance": acceptance.NATURAL} if row.get("accept_len") is not None else {}


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
