"""A window's life on its place: its launch planned, its server started, a batch job's queue
waited out, its boot watched, its phases run and its server stopped however it ended; a window
that never came up is rejected with its receipts (rejection.txt, boot-facts.json).

The runner (engine.run.runner) schedules sessions on places and hands each window here
(:meth:`Windows.run`); every step is a journal event, every file under the window's directory a
receipt beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.campaign.launch import WindowStart, plan_launch
from engine.campaign.machines import Place
from engine.campaign.redact import Redactor
from engine.campaign.spec import ServerConfig
from engine.context import Controls, Phase, RunContext, WindowContext
from engine.errors import WindowFailed
from engine.gpu import Gpus
from engine.record import results
from engine.record.events import EventKind
from engine.run.boot import BootOutcome, LogPump, wait_ready
from engine.run.gpuwatch import GpuWatch, flag_free, window_gpus
from engine.run.operator import say_waiting, stopping_wait
from engine.runtime.base import BatchServer, LaunchError, LaunchPlan, Runtime, Server
from engine.servers import get_adapter
from engine.servers.adapter import ServerAdapter
from engine.servers.logs import BootFacts, Fact, stack_diff
from engine.words import CONTROL, WindowStatus


@dataclass
class Lane:
    """Where sessions run one after another: a place (None: the one place of a campaign that names
    none), its runtime, and the controls and server of the window in flight there."""

    place: Place | None
    rt: Runtime
    controls: Controls
    ctx: RunContext
    server: Server | None = None
    session: str = ""  # the session it runs now

    @property
    def name(self) -> str:
        return self.place.name if self.place else ""


@dataclass
class Windows:
    """What every window of a run is started with: the run as its phases see it, the runtime's
    name, the control's server, the run's filter of secrets, the GPU watch; and which sessions'
    control logs gave no boot fact (their windows are compared on none)."""

    run: RunContext
    runtime: str
    adapter: ServerAdapter  # the control's (a window on another stack boots its own)
    redact: Redactor
    gpuwatch: GpuWatch
    unlogged_controls: set[str] = field(default_factory=set)

    def run_window(self, lane: Lane, session: str, window: str, phases: list[Phase],
                   tag: str = "") -> None:
        """One window's whole life on ``lane``; ``tag``: "" or "-rerunN" (its receipts' suffix)."""
        Window(self, lane, session, window, tag).live(phases)

    def reject(self, lane: Lane, session: str, window: str, reason: str) -> None:
        """A window that is not started at all (its place did not answer), rejected saying why."""
        Window(self, lane, session, window).reject(reason, [])


@dataclass(frozen=True)
class Started:
    """A window's server that has started: what its boot and its phases are run with."""

    server: Server
    pump: LogPump  # the server's log, read for its boot facts and kept in boot{tag}.log
    config: ServerConfig
    adapter: ServerAdapter  # the server it boots: the campaign's, or the window's own stack's
    gpus: Gpus


class Window:
    """One window's life on its lane (:meth:`live`)."""

    def __init__(self, windows: Windows, lane: Lane, session: str, window: str, tag: str = "") -> None:
        self.windows, self.lane, self.tag = windows, lane, tag
        self.run = windows.run
        self.session, self.window = session, window
        self.dir = results.window_dir(self.run.run_dir, session, window)

    def _finished(self, status: WindowStatus, reason: str | None) -> None:
        self.run.emit(EventKind.WINDOW_FINISHED, session=self.session, window=self.window, status=status,
                      **({"reason": reason} if reason is not None else {}))

    # ------------------------------------------------------------ its start

    def live(self, phases: list[Phase]) -> None:
        config = self.run.campaign.config_for(self.window)
        adapter = get_adapter(config.server)  # a window on another stack boots its own server
        plan = self._plan(adapter)
        if plan is None:
            return
        self.lane.controls.start_window(self.run.campaign.timeouts.window)  # boot included
        self._say_started(plan, config, adapter)
        started = self._start(plan, config, adapter)
        if started is None:
            return
        with results.after(lambda: self._stop(started, plan.keep)):
            self._boot_and_measure(started, phases)
        if started.pump.error:  # boot.log could not be written: the run stops rather than lose receipts
            raise started.pump.error

    def _plan(self, adapter: ServerAdapter) -> LaunchPlan | None:
        """The window's launch, as the dry run prints it; None (rejected) when a variable of it is
        unresolved."""
        run, lane = self.run, self.lane
        try:
            return plan_launch(run.campaign, adapter, WindowStart(
                self.windows.runtime, run.run_id, self.session, self.window, run.variables,
                tag=self.tag, workdir=self.dir.resolve(), node=self._node(), place=lane.place,
                run_dir=run.run_dir.resolve(), run_dir_id=results.dir_identity(run.run_dir) or ""))
        except KeyError as e:
            self.reject(f"unresolved variable {e}", [])
            return None

    def _say_started(self, plan: LaunchPlan, config: ServerConfig, adapter: ServerAdapter) -> None:
        run = self.run
        self.run.emit(EventKind.WINDOW_STARTED, session=self.session, window=self.window,
                      axis=run.axis(self.window), runtime=self.windows.runtime, plan=plan.describe(),
                      tag=self.tag, log=str((self.dir / f"boot{self.tag}.log").relative_to(run.run_dir)),
                      **({"stack": config.server} if config.own_stack else {}),
                      **({"simulated": how} if (how := adapter.simulated_acceptance(
                          plan.argv, {**plan.env, **plan.secret_env})) else {}))

    def _start(self, plan: LaunchPlan, config: ServerConfig, adapter: ServerAdapter) -> Started | None:
        """Its server started (once the GPUs it owns are back to the session's level) and its log
        read; None when it did not start (rejected, or ended by an abort)."""
        lane, campaign = self.lane, self.run.campaign
        attach = campaign.attach.url if campaign.attach else None
        gpus = window_gpus(self.windows.runtime, plan, lane.place, attach)
        at_boot = self.windows.gpuwatch.before_boot(self.session, self.window, gpus,
                                                    lane.controls.stopping)
        try:
            server = lane.rt.start(plan)
        except LaunchError as e:
            if lane.controls.abort.is_set():  # a start cut short (a place's host over ssh)
                self._finished(WindowStatus.ABORTED, f"operator abort during its start: {e}")
            else:
                self.reject(str(e), [])
            return None
        ident: dict[str, Any] = dict(server.identity)  # an open kind: the runtime's own fields
        self.run.emit(EventKind.SERVER_STARTED, session=self.session, window=self.window, **ident)
        pump = LogPump(server, adapter, self.dir / f"boot{self.tag}.log", self._on_fact,
                       self.windows.redact)
        pump.start()
        for fact in pump.add_facts(at_boot, "nvml"):  # the free GPU memory at boot
            self._on_fact(fact)
        lane.server = server
        return Started(server, pump, config, adapter, gpus)

    def _node(self) -> str | None:
        """Every window of a session runs where its control ran, so each delta is within one box:
        the place's node, else wherever the scheduler put the control."""
        place = self.lane.place
        if place and place.node:
            return place.node
        control = self.run.state.windows.get(f"{self.session}-{CONTROL}")
        return control.placed or None if control else None

    def _on_fact(self, fact: Fact) -> None:
        self.run.emit(EventKind.BOOT_FACT, session=self.session, window=self.window, key=fact.key,
                      value=fact.value)

    # ------------------------------------------------------------ its boot and its phases

    def _boot_and_measure(self, started: Started, phases: list[Phase]) -> None:
        boot = self._boot(started)
        if boot is None:
            return
        facts = started.pump.freeze()
        self._record_boot(facts, boot, started.pump.log_facts())
        ctx = WindowContext(self.session, self.window, self.dir, started.server, started.adapter,
                            started.config, facts, started.gpus)
        ctl = self.lane.controls
        try:
            for phase in phases:
                if ctl.stopping():
                    break
                phase(self.lane.ctx, ctx)
        except WindowFailed as e:
            why = self._with_end(str(e), started.server)
            self._write_failure(started.pump, why)
            self._finished(WindowStatus.FAILED, why)
            return
        status, why = ctl.ending()
        ctl.advance.clear()
        if status == WindowStatus.FAILED:
            self._write_failure(started.pump, why)
        self._finished(status, why if status == WindowStatus.FAILED else None)

    def _boot(self, started: Started) -> BootOutcome | None:
        """The server up and ready, after a batch job's queue; None when the window ended before
        (rejected, or ended by the operator or its timeout)."""
        server, pump, ctl = started.server, started.pump, self.lane.controls
        unplaced = self._wait_placed(server, pump)
        if unplaced is not None and not ctl.stopping():
            self.reject(unplaced, [], pump)
            return None
        boot = (BootOutcome(False, 0.0, "cancelled in the queue") if unplaced is not None else
                wait_ready(server, started.adapter, pump, self.run.campaign.timeouts.boot,
                           cancelled=ctl.stopping))
        if not boot.ready and ctl.stopping():
            status, why = ctl.ending()
            ctl.advance.clear()
            why = (f"{why} during its boot" if status == WindowStatus.FAILED
                   else "the operator ended the window during its boot")
            if status == WindowStatus.FAILED:
                self._write_failure(pump, why)
            self._finished(status, why)
            return None
        if not boot.ready:
            self.reject(self._with_end(boot.reason, server), boot.error_lines, pump)
            return None
        return boot

    def _wait_placed(self, server: Server, pump: LogPump) -> str | None:
        """A batch job waits in its scheduler's queue: each new reason is journaled, and the boot
        and window clocks start when it runs. Returns why it never ran, or None."""
        if not isinstance(server, BatchServer):
            return None
        job = str(server.identity.get("job", ""))
        run, ctl = self.run, self.lane.controls

        def on_queue(state: str, reason: str) -> None:
            run.emit(EventKind.WINDOW_QUEUED, session=self.session, window=self.window, job=job,
                     state=state, reason=reason)

        placed = server.wait_placed(run.campaign.timeouts.queue, ctl.stopping, on_queue)
        if not placed.placed:
            return placed.reason
        ctl.start_window(run.campaign.timeouts.window)
        run.emit(EventKind.WINDOW_PLACED, session=self.session, window=self.window, job=job,
                 node=placed.facts.get("node", ""), url=server.base_url,
                 queued_s=round(placed.waited_s, 2))
        for fact in pump.add_facts(placed.facts, "slurm"):
            self._on_fact(fact)
        return None

    # ------------------------------------------------------------ its end

    def _stop(self, started: Started, kept: bool) -> None:
        """The window's server stopped and its stop recorded, however the window ended."""
        server, lane = started.server, self.lane
        lane.server, lane.controls.deadline = None, None
        self._say_stopping(server.alive())
        server.stop()
        started.pump.join(timeout=10)
        record: dict[str, Any] = {}
        if isinstance(server, BatchServer):
            record = server.record()
            # The node wrote boot.log unfiltered: secrets come out of it now, as from any record.
            results.scrub_file(server.log_path, self.windows.redact)
        self.run.emit(EventKind.SERVER_STOPPED, session=self.session, window=self.window,
                      exit_code=server.exit_code(), kept=kept, **({"record": record} if record else {}))

    def _say_stopping(self, alive: bool) -> None:
        """A server's stop is journaled as it begins (a server may take seconds to go, and the
        console says so); a rerun queued on this place now waits on it."""
        run, lane = self.run, self.lane
        run.emit(EventKind.SERVER_STOPPING, session=self.session, window=self.window, alive=alive)
        wait = stopping_wait(f"{self.session}-{self.window}").waiting
        queued: dict[tuple[str, str], list[str]] = {}
        for key in dict.fromkeys(lane.controls.reruns):
            row = run.state.rows[key]
            if run.state.session_places.get(row.session, "") == lane.name:
                queued.setdefault((row.session, row.window), []).append(key)
        for (session, window), keys in queued.items():
            say_waiting(run, session, window, keys, wait)

    @staticmethod
    def _with_end(reason: str, server: Server) -> str:
        """A batch job's end, as its scheduler records it, beside ruler's own reason."""
        if not isinstance(server, BatchServer):
            return reason
        ended = server.ended_text()
        return f"{reason}; {ended}" if ended else reason

    def _write_failure(self, pump: LogPump, reason: str) -> None:
        if not pump.server.alive():
            pump.join(timeout=5)  # let the dead server's last lines land
        results.write_atomic(self.dir / "failure.txt",
                             f"reason: {reason}\n\nlast lines of the log:\n{pump.tail_text()}\n")

    def reject(self, reason: str, errors: list[str], pump: LogPump | None = None) -> None:
        tail = pump.tail_text() if pump else ""
        text = f"reason: {reason}\n\nerror lines (verbatim):\n" + "\n".join(errors or ["(none)"])
        if tail:
            text += f"\n\nlast lines of the log:\n{tail}"
        results.write_atomic(self.dir / "rejection.txt", text + "\n")
        if pump:
            results.write_json(self.dir / "boot-facts.json", {
                "session": self.session, "window": self.window, "rejected": True,
                **pump.facts.as_json()})
        self.run.emit(EventKind.WINDOW_REJECTED, session=self.session, window=self.window,
                      reason=reason, errors=[self.windows.redact(e) for e in errors[:20]])

    # ------------------------------------------------------------ its boot's receipts

    def _record_boot(self, facts: BootFacts, boot: BootOutcome, logged: bool = True) -> None:
        """boot-facts.json, the boot's excerpt and window_ready. ``logged``: the server's log gave
        boot facts."""
        data = self._boot_facts(facts, boot, logged)
        results.write_json(self.dir / f"boot-facts{self.tag}.json", data)
        excerpt = [f.line for f in facts.facts.values()] + facts.warnings + facts.errors
        results.write_atomic(self.dir / f"boot-excerpt{self.tag}.txt",
                             "\n".join(dict.fromkeys(excerpt)) + "\n")
        self.run.emit(EventKind.WINDOW_READY, session=self.session, window=self.window,
                      boot_s=round(boot.seconds, 2), facts={k: f.value for k, f in facts.facts.items()},
                      diff=data.get("diff_vs_control"))

    def _boot_facts(self, facts: BootFacts, boot: BootOutcome, logged: bool) -> dict[str, Any]:
        """What boot-facts.json holds. A window is compared on none when its log or its control's
        gave none (the runtime's facts, a node or a job, say nothing of the server booted)."""
        session, window, campaign = self.session, self.window, self.run.campaign
        control_facts, unlogged = self.run.control_facts, self.windows.unlogged_controls
        data: dict[str, Any] = {"session": session, "window": window,
                                "boot_seconds": round(boot.seconds, 2), **facts.as_json()}
        if window == CONTROL:
            control_facts[session] = facts
            (unlogged.discard if logged else unlogged.add)(session)
        whose = "its log" if not logged else "its control's log" if (
            window != CONTROL and session in unlogged) else ""
        if self.windows.runtime == "attach":
            data["note"] = "attach runtime: no lifecycle and no boot log, so no boot facts"
        elif whose:
            data["note"] = f"no boot fact in {whose}: " + (
                "its windows are compared on none" if window == CONTROL else "not compared with the control")
        if window != CONTROL and session in control_facts:
            mine = BootFacts() if whose else facts
            ours, theirs = campaign.server_for(window), campaign.server
            data["diff_vs_control"] = flag_free(
                mine.diff(control_facts[session]) if ours == theirs and
                campaign.window(window).server is None else
                stack_diff(mine, get_adapter(ours), control_facts[session], self.windows.adapter,
                           (ours, theirs)))
        return data

