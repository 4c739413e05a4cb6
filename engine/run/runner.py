"""The campaign state machine: session -> window (control first) -> boot -> measure -> stop.

Every step is a journal event; files under the run directory are receipts written beside it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import files
from engine.campaign.launch import WindowStart, campaign_items, plan_launch
from engine.campaign.machines import Place
from engine.campaign.redact import Redactor, redactor_for
from engine.campaign.sources import Item, chosen
from engine.campaign.sources.item import plain_item
from engine.campaign.spec import Campaign, ServerConfig
from engine.context import Controls, Phase, RunContext, WindowContext
from engine.control import CommandRefused
from engine.errors import EngineError, WindowFailed
from engine.gpu import Gpus
from engine.method.stats import LeakPolicy
from engine.record import results
from engine.record.events import FORMAT, EventKind, check
from engine.record.journal import Event
from engine.record.judgement import baseline_record
from engine.record.looks import take
from engine.record.receipts import ThroughputWriter
from engine.record.snapshot import fold_journal
from engine.record.state import RunState
from engine.record.writer import JournalClosed, JournalWriter
from engine.run.boot import BootOutcome, LogPump, wait_ready
from engine.run.gpuwatch import GpuWatch, flag_free, window_gpus
from engine.run.measure import Measurement
from engine.run.operator import handle, say_waiting, stopping_wait
from engine.runtime import get_runtime
from engine.runtime.base import BatchServer, LaunchError, Runtime, Server
from engine.servers import get_adapter
from engine.servers.adapter import ServerAdapter
from engine.servers.logs import BootFacts, Fact, stack_diff
from engine.words import COMPLETE_WINDOWS, CONTROL, RunStatus, WindowStatus


def _classes_of(kind: type) -> Callable[[Any], bool]:
    """What a frozen items file holds: per class name, a list of ``kind`` (a prompt, an item)."""
    return lambda data: isinstance(data, dict) and all(
        isinstance(v, list) and all(isinstance(x, kind) for x in v) for v in data.values())


def frozen_items(campaign: Campaign, run_dir: Path, variables: Mapping[str, str],
                 redact: Redactor | None = None) -> dict[str, list[Item]]:
    """The classes' items are frozen into the run at its start, so a resume and the receipts see
    the same ones: a plain class's prompts as strings in prompts.json, any other class's items
    whole in items.json (written only when the campaign has such a class). Written through the
    run's filter like every file of it: a prompt that holds a secret is kept with its marker.
    Read back, such items are the campaign's own again when they are what it gives now, filtered
    (the secret is sent, not its marker); else each marker whose name holds one value is."""
    prompts, items = run_dir / results.PROMPTS, run_dir / results.ITEMS
    if prompts.exists():
        kept = results.read_frozen(prompts, _classes_of(str))
        whole = results.read_frozen(items, _classes_of(dict)) if items.exists() else {}
        if redact is not None and redact.marked(json.dumps([kept, whole])):
            fresh = campaign_items(campaign, variables)
            if _frozen_form(campaign, fresh, redact) == (kept, whole):
                return fresh
            kept, whole = results.scrub_data([kept, whole], redact.restore)
        frozen: dict[str, list[Item]] = {cls: [plain_item(p) for p in texts] for cls, texts in kept.items()}
        frozen.update(whole)
        return frozen
    frozen = campaign_items(campaign, variables)
    kept, whole = _frozen_form(campaign, frozen, None)
    results.write_json(prompts, kept)
    if whole:
        results.write_json(items, whole)
    return frozen


def _frozen_form(campaign: Campaign, frozen: dict[str, list[Item]],
                 redact: Redactor | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(prompts.json's, items.json's) of the items: a plain class's prompts, every other class's
    items; through ``redact`` as the run's filter writes them."""
    plain = {cls for cls, spec in campaign.workload.classes.items() if chosen(spec)[0].plain}
    kept = {cls: [i["messages"][0]["content"] for i in v] for cls, v in frozen.items() if cls in plain}
    whole = {cls: v for cls, v in frozen.items() if cls not in plain}
    if redact is not None:
        kept, whole = results.scrub_data([kept, whole], redact)
    return kept, whole


def sweep_record(campaign: Campaign) -> dict[str, Any]:
    """Each sweep as run_started records it (events.Sweep): its axis, the control's value, and
    each window's value in order."""
    out: dict[str, Any] = {}
    for name, windows in campaign.sweeps().items():
        axis = windows[0].axes()[0]
        out[name] = {"axis": axis, "control": campaign.control_value(axis),
                     "windows": {w.name: w.change.value(axis) for w in windows}}
    return out


def runtime_for(campaign: Campaign, name: str, secrets: Mapping[str, str],
                place: Place | None = None, cancelled: threading.Event | None = None) -> Runtime:
    """The runtime a resolved name stands for on a place. ``secrets``: a redacted value -> the
    variable that holds it, which a Slurm job script names instead; ``cancelled``: the run's abort, which
    cuts short a wait on a place's host."""
    return get_runtime(name, secrets=secrets, partition=campaign.slurm.partition,
                       docker_host=place.docker_host if place else None,
                       url=campaign.attach.url, connect_timeout=campaign.timeouts.connect,
                       cancelled=cancelled)


@dataclass(frozen=True)
class StartedWindow:
    """A window whose server has started: what its boot and its phases are run with."""

    session: str
    window: str
    dir: Path
    server: Server
    pump: LogPump  # the server's log, read for its boot facts and kept in boot{tag}.log
    config: ServerConfig
    tag: str
    gpus: Gpus
    adapter: ServerAdapter  # the server it boots: the campaign's, or the window's own stack's


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


class Runner:
    def __init__(self, campaign: Campaign, run_dir: Path, runtime: str | Runtime,
                 variables: dict[str, str], printer: Callable[[Event], None] | None = None,
                 phases: list[Phase] | None = None, controls: Controls | None = None,
                 baseline: Path | None = None) -> None:
        self.campaign, self.run_dir = campaign, run_dir
        self.baseline = baseline  # an earlier run: its noise between boots stands in or pools
        self.redact = redactor_for(campaign)
        # Whatever part of the run writes a file under run_dir writes it through the redactor.
        results.guard(run_dir, self.redact)
        secrets = self.redact.references()
        # A name from the campaign or the command line; tests hand a Runtime of their own.
        self.rt = runtime_for(campaign, runtime, secrets) if isinstance(runtime, str) else runtime
        self.runtime = self.rt.name
        self.variables = variables
        self.printer = printer
        self.phases = phases or []
        self.controls = controls or Controls()
        self.adapter = get_adapter(campaign.server)  # the control's; a window may boot another
        self.journal = JournalWriter(run_dir / results.JOURNAL)
        # The run's label on its servers; a directory ruler run did not prepare: its name.
        self.run_id = results.run_id(run_dir) or run_dir.name
        self.control_facts: dict[str, BootFacts] = {}
        self.unlogged_controls: set[str] = set()  # sessions whose control's log gave no boot fact
        # A journal already there means a resume: its fold is where the campaign stands. The
        # journal's writer folds each event it appends: that fold is the campaign's state.
        self.state = self.journal.state
        self.resuming = self.state.last_seq > 0
        self.items = frozen_items(campaign, run_dir, variables, self.redact)
        self.reboots: dict[str, int] = {}
        self._emit_lock = threading.RLock()
        # Files derived from the fold (throughput.csv) follow the journal, event by event.
        self.listeners: list[Callable[[Event, RunState], None]] = [
            ThroughputWriter(run_dir, campaign.verdict.rule())]
        leak = campaign.leak
        self.leak_policy = LeakPolicy(leak.min_concurrency, leak.spread, leak.max_reruns,
                                      campaign.workload.reps if campaign.workload.precision else 0)
        # What phases and operator commands see of the run: never the runner itself.
        self.ctx = RunContext(campaign, run_dir, self.run_id, self.state, self.controls, self.emit,
                              self.items, self.leak_policy, self.control_facts, dict(variables))
        # One lane per place; a campaign without places has one, on the controls above, as before.
        self.lanes = [self._lane(p, runtime, secrets) for p in campaign.places] if campaign.places \
            else [Lane(None, self.rt, self.controls, self.ctx)]
        self._place_names = {lane.name for lane in self.lanes}
        self._slots = threading.Semaphore(min(len(self.lanes), campaign.parallel or len(self.lanes)))
        self._pick = threading.Lock()
        self._working: set[str] = set()  # the places still taking sessions
        self.gpuwatch = GpuWatch(self.emit)

    def _lane(self, place: Place, runtime: str | Runtime, secrets: Mapping[str, str]) -> Lane:
        rt = runtime_for(self.campaign, runtime, secrets, place, self.controls.abort) \
            if isinstance(runtime, str) else runtime
        # Each place's window has its own advance, pause and clock; an abort, a signal and the
        # queue of operator reruns are the whole run's (a place takes the reruns of its sessions).
        controls = Controls(abort=self.controls.abort, signals=self.controls.signals,
                            reruns=self.controls.reruns)
        return Lane(place, rt, controls, replace(self.ctx, controls=controls))

    # ------------------------------------------------------------ plumbing

    def emit(self, kind: EventKind, **data: Any) -> Event:
        with self._emit_lock:  # the runner and the control socket's thread both emit
            while self.controls.signals:
                self._emit(EventKind.SIGNAL, {"signal": self.controls.signals.pop(0)})
            return self._emit(kind, data)

    def _emit(self, kind: EventKind, data: dict[str, Any]) -> Event:
        check(kind, data)  # a malformed event is a ruler bug: raised before it reaches the journal
        # The journal writer passes it through the run directory's filter (results.guard): the
        # plan's argv, error texts and boot facts alike.
        event = self.journal.append(kind, **data)
        for listen in self.listeners:
            listen(event, self.state)
        if self.printer:
            try:
                self.printer(event)
            except Exception as e:  # noqa: BLE001 - a display bug must not stop a campaign
                print(f"(could not print event {event['seq']}: {type(e).__name__}: {e})")
        return event

    # ------------------------------------------------------------ the campaign

    def run(self) -> str:
        c = self.campaign
        if self.resuming:
            self.emit(EventKind.RUN_RESUMED, pid=os.getpid(), rows_done=sum(
                r.complete for r in self.state.rows.values()))
        else:
            self.emit(EventKind.RUN_STARTED, format=FORMAT, campaign=c.name, run=self.run_id,
                      runtime=self.runtime, server=c.server, pid=os.getpid(),
                      sessions={s: c.windows_in(s) for s in c.sessions},
                      axes={w.name: w.axis for w in c.windows},
                      workload={"classes": list(c.workload.classes),
                                "concurrency": list(c.workload.concurrency), "reps": c.workload.reps,
                                "requests": [c.workload.requests_for(n) for n in c.workload.concurrency],
                                "max_tokens": c.workload.max_tokens,
                                **({"rate": list(c.workload.rate),
                                    "rate_requests": [c.workload.requests_at(r) for r in c.workload.rate]}
                                   if c.workload.rate else {})},
                      **({"sweeps": sweeps} if (sweeps := sweep_record(c)) else {}),
                      **({"baseline": self._baseline()} if self.baseline is not None else {}))
        status = RunStatus.FINISHED
        try:
            try:
                for rt in dict.fromkeys(lane.rt for lane in self.lanes):
                    rt.preflight(self.run_dir)
            except LaunchError as e:  # this host cannot run the campaign's runtime: nothing to retry
                raise EngineError(str(e)) from e
            if self.resuming:
                self._scrub_node_logs()
                self._stop_strays()
            pending = [*c.sessions, *self.state.added]
            if len(self.lanes) == 1:
                self._work(self.lanes[0], pending)
            else:
                self._in_parallel(pending)
            if c.verdict.until_decided:
                self._until_decided()
            self._settle()
            if self.controls.abort.is_set():
                status = RunStatus.ABORTED
        except Exception as e:
            try:
                self.emit(EventKind.ENGINE_ERROR, error=f"{type(e).__name__}: {e}")
                self.emit(EventKind.RUN_FINISHED, status=RunStatus.ERROR)
            except OSError:
                pass  # the journal itself cannot be written: the error raised below says why
            self.journal.close()
            raise
        self.emit(EventKind.RUN_FINISHED, status=status)
        self.journal.close()
        return status

    # ------------------------------------------------------------ sessions on places

    def _in_parallel(self, pending: list[str]) -> None:
        """A worker per place; each takes the next session no other place holds. An unexpected
        error on one place aborts the others (they end their windows as an abort does)."""
        errors: list[BaseException] = []

        def work(lane: Lane) -> None:
            try:
                self._work(lane, pending)
            except BaseException as e:  # noqa: BLE001 - re-raised on the run's thread below
                errors.append(e)
                self.controls.abort.set()

        threads = [threading.Thread(target=work, args=(lane,), name=f"place-{lane.name}", daemon=True)
                   for lane in self.lanes]
        self._working = {lane.name for lane in self.lanes}  # before any starts: see _work
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _next_session(self, lane: Lane, pending: list[str]) -> str | None:
        """The next session this place may run: one begun on it before a resume, else any not
        begun elsewhere (a session's control and windows stay on one box)."""
        with self._pick:
            for session in pending:
                begun = self.state.session_places.get(session)
                if begun is None or begun == lane.name or begun not in self._place_names:
                    pending.remove(session)
                    return session
            return None

    def _work(self, lane: Lane, pending: list[str]) -> None:
        try:
            while not self.controls.abort.is_set():
                session = self._next_session(lane, pending)
                if session is None:
                    break
                answered = True
                with self._slots:
                    if not self.controls.abort.is_set():
                        answered = self._run_session(lane, session)
                with self._pick:
                    if not answered and self._working - {lane.name}:
                        # Its session's windows are rejected saying why; the sessions left go to
                        # the places that answer (the last place left takes them all the same,
                        # so that every session ends with a result or a reason).
                        break
        finally:
            with self._pick:
                self._working.discard(lane.name)
        # Other places still run: an operator's rerun of a void row of this place's sessions is
        # booted here (its session's box) until they end.
        while not self.controls.abort.is_set() and self._working:
            self._drain_reruns(lane)
            self.controls.abort.wait(0.5)
        self._drain_reruns(lane)

    def _run_session(self, lane: Lane, session: str) -> bool:
        """One session on one place; False when the place did not answer at its start."""
        lane.session = session
        host: dict[str, Any] = {}
        if lane.place:
            host = self._host(lane)
            self.emit(EventKind.SESSION_STARTED, session=session, place=lane.name,
                      where=lane.place.model_dump(exclude_none=True), host=host)
            self._record_place(lane, session, host)
        else:
            self.emit(EventKind.SESSION_STARTED, session=session)
        self.control_facts.pop(session, None)
        for window in self._order(session):
            if self.controls.abort.is_set():
                break
            if self._window_complete(session, window):
                self._reload_control_facts(session, window)
                continue
            if "error" in host:  # asking again per window would wait on a dead host each time
                self._reject(session, window, results.window_dir(self.run_dir, session, window),
                             f"place {lane.name} did not answer as its session began: {host['error']}", [])
                continue
            self.run_window(session, window, lane=lane)
            self._drain_reruns(lane)
        lane.session = ""
        return "error" not in host

    def _baseline(self) -> dict[str, Any]:
        """The baseline run's noise between boots per shape, as run_started records it (its own
        campaign's rule: what it measured is the same whatever this run declares)."""
        assert self.baseline is not None
        earlier = fold_journal(self.baseline / results.JOURNAL)
        return baseline_record(earlier, self.campaign.verdict.rule(), self.baseline.name)

    def _settle(self) -> None:
        """Each phase that holds verdicts on the whole run's calls settles them again now that the
        family is whole (engine.quality.Quality.settle)."""
        for phase in self.phases:
            settle = getattr(phase, "settle", None)
            if settle is not None:
                settle(self.ctx)

    def _order(self, session: str) -> list[str]:
        """A session's boot order: the campaign's, or the one a look added it with."""
        if session in self.campaign.sessions:
            return self.campaign.windows_in(session)
        return self.state.added[session]

    def _until_decided(self) -> None:
        """Boots added until decided (engine.record.looks): a look at the evidence, a session of
        the windows it left undecided, until the last look (all decided, or the budget)."""
        c = self.campaign
        while not self.controls.abort.is_set():
            if self.state.looks and self.state.looks[-1].get("final"):
                return
            look = take(self.state, c.verdict.rule(), c.control_position, [w.name for w in c.windows],
                        list(c.sessions))
            self.emit(EventKind.VERDICT_LOOK, **look.event())
            self._settle()
            if look.final:
                return
            self.emit(EventKind.SESSION_ADDED, session=look.session, windows=look.order, look=look.look)
            self._work(self.lanes[0], [look.session])

    def _host(self, lane: Lane) -> dict[str, Any]:
        """The place's machine as its runtime describes it, asked as each session starts there (a
        daemon may be replaced between sessions); ``{"error": why}`` when it does not answer."""
        assert lane.place is not None
        try:
            return dict(lane.rt.host(lane.place.node))
        except LaunchError as e:
            return {"error": str(e)}

    def _record_place(self, lane: Lane, session: str, host: dict[str, Any]) -> None:
        """env.json says, per place, what it is and which sessions it ran (rewritten whole, keeping
        what prepare wrote there)."""
        path = self.run_dir / results.ENV
        with self._emit_lock:  # the places' threads rewrite the same file
            env = json.loads(files.read_text(path)) if path.exists() else {}
            places = env.setdefault("places", {})
            entry = places.setdefault(lane.name, {"where": lane.place.model_dump(exclude_none=True)
                                                  if lane.place else {}, "sessions": []})
            entry["host"] = host
            if session not in entry["sessions"]:
                entry["sessions"].append(session)
            results.write_json(path, env)

    # ------------------------------------------------------------ resume and reruns

    def _window_complete(self, session: str, window: str) -> bool:
        ws = self.state.windows.get(f"{session}-{window}")
        return ws is not None and ws.status in COMPLETE_WINDOWS

    def _reload_control_facts(self, session: str, window: str) -> None:
        path = self.run_dir / "windows" / f"{session}-{window}" / "boot-facts.json"
        if window == CONTROL and path.exists():
            data = json.loads(files.read_text(path))
            self.control_facts[session] = BootFacts(facts={
                k: Fact(k, v, data.get("lines", {}).get(k, "")) for k, v in data["facts"].items()})

    def _scrub_node_logs(self) -> None:
        """A batch job's node writes its boot log unfiltered, and the window's end filters it: an
        engine killed before that end left it as the node wrote it. A resume filters them all."""
        for log in sorted((self.run_dir / "windows").glob("*/boot*.log")):
            try:
                results.scrub_file(log, self.redact)
            except OSError as e:  # a log that cannot be rewritten: said, the run goes on
                print(f"ruler: {log} could not be filtered of secrets: {e.strerror or e}",
                      file=sys.stderr)

    def _stop_strays(self) -> None:
        """A killed engine leaves its servers running: each place's runtime finds them and stops them."""
        servers = [ws.server for ws in self.state.windows.values() if ws.server]
        for rt in dict.fromkeys(lane.rt for lane in self.lanes):
            try:
                stopped = rt.stop_strays(self.run_id, results.dir_identity(self.run_dir) or "",
                                         servers)
            except LaunchError as e:  # a place's host is down: its session says so as it begins
                print(f"ruler: this run's servers were not looked for there: {e}", file=sys.stderr)
                continue
            for ident in stopped:
                self.emit(EventKind.STRAY_STOPPED, **ident)

    def _drain_reruns(self, lane: Lane) -> None:
        """Reruns the operator queued for windows no longer up: boot each such window again, on
        this place (the operator queues a row on its session's place)."""
        ctl = lane.controls
        while not ctl.abort.is_set():
            key = next((k for k in ctl.reruns if self.state.session_places.get(
                self.state.rows[k].session, "") == lane.name), None)
            if key is None:
                return
            row = self.state.rows[key]
            wkey = f"{row.session}-{row.window}"
            self.reboots[wkey] = reboot = self.reboots.get(wkey, 0) + 1
            self.emit(EventKind.WINDOW_REBOOT, session=row.session, window=row.window, row=key,
                      reason=f"operator rerun of a {row.status} row", reboot=reboot)
            taken = ctl.reruns_taken[key]
            self.run_window(row.session, row.window, tag=f"-rerun{reboot}",
                            phases=self._rerun_phases(), lane=lane)
            # A window that never measured it (rejected, stopped) drops the copy it booted for;
            # one queued again while it ran (its window stopping) stays, to boot it once more.
            if ctl.reruns_taken[key] == taken and key in ctl.reruns:
                ctl.reruns.remove(key)

    def _rerun_phases(self) -> list[Phase]:
        """A window booted again for reruns: the campaign's phases with the measurement of its
        queued rows in place of the whole measurement, so its quality checks run again on the
        new boot (the first boot may have died before them)."""
        reruns = Measurement().reruns
        phases = [reruns if isinstance(p, Measurement) else p for p in self.phases]
        return phases if reruns in phases else [reruns, *phases]

    # ------------------------------------------------------------ operator commands

    def command(self, cmd: str, args: list[str], who: dict[str, Any]) -> str:
        """One control-socket command (see engine.run.operator); called on the socket's thread."""
        try:
            return handle(self.ctx, cmd, args, who, {lane.session: lane.controls for lane in self.lanes
                                                      if lane.session})
        except JournalClosed as e:  # it raced the run's end: the journal has its last event
            raise CommandRefused(f"the run has ended (its journal is closed): nothing to {cmd}") from e

    def run_window(self, session: str, window: str, tag: str = "",
                   phases: list[Phase] | None = None, lane: Lane | None = None) -> None:
        lane = lane or self.lanes[0]
        config = self.campaign.config_for(window)
        adapter = get_adapter(config.server)  # a window on another stack boots its own server
        wdir = results.window_dir(self.run_dir, session, window)
        try:
            plan = plan_launch(self.campaign, adapter, WindowStart(
                self.runtime, self.run_id, session, window, self.variables, tag=tag,
                workdir=wdir.resolve(), node=self._node(session, lane), place=lane.place,
                run_dir=self.run_dir.resolve(), run_dir_id=results.dir_identity(self.run_dir) or ""))
        except KeyError as e:
            self._reject(session, window, wdir, f"unresolved variable {e}", [])
            return
        lane.controls.start_window(self.campaign.timeouts.window)  # boot included
        self.emit(EventKind.WINDOW_STARTED, session=session, window=window, axis=self.ctx.axis(window),
                  runtime=self.runtime, plan=plan.describe(), tag=tag,
                  log=str((wdir / f"boot{tag}.log").relative_to(self.run_dir)),
                  **({"stack": config.server} if config.own_stack else {}),
                  **({"simulated": how} if (how := adapter.simulated_acceptance(
                      plan.argv, {**plan.env, **plan.secret_env})) else {}))
        attach = self.campaign.attach.url if self.campaign.attach else None
        gpus = window_gpus(self.runtime, plan, lane.place, attach)
        at_boot = self.gpuwatch.before_boot(session, window, gpus, lane.controls.stopping)
        try:
            server = lane.rt.start(plan)
        except LaunchError as e:
            if lane.controls.abort.is_set():  # a start cut short (a place's host over ssh)
                self.emit(EventKind.WINDOW_FINISHED, session=session, window=window,
                          status=WindowStatus.ABORTED, reason=f"operator abort during its start: {e}")
            else:
                self._reject(session, window, wdir, str(e), [])
            return
        self.emit(EventKind.SERVER_STARTED, session=session, window=window, **server.identity)
        pump = LogPump(server, adapter, wdir / f"boot{tag}.log",
                       self._on_fact(session, window), self.redact)
        pump.start()
        for fact in pump.add_facts(at_boot, "nvml"):  # the free GPU memory at boot
            self._on_fact(session, window)(fact)
        lane.server = server
        started = StartedWindow(session, window, wdir, server, pump, config, tag, gpus, adapter)
        with results.after(lambda: self._stop_window(lane, started, plan.keep)):
            self._boot_and_measure(lane, started, self.phases if phases is None else phases)
        if pump.error:  # boot.log could not be written: the run stops rather than lose receipts
            raise pump.error

    def _stop_window(self, lane: Lane, started: StartedWindow, kept: bool) -> None:
        """The window's server stopped and its stop recorded, however the window ended."""
        server = started.server
        lane.server, lane.controls.deadline = None, None
        self._say_stopping(lane, started, server.alive())
        server.stop()
        started.pump.join(timeout=10)
        record: dict[str, Any] = {}
        if isinstance(server, BatchServer):
            record = server.record()
            # The node wrote boot.log unfiltered: secrets come out of it now, as from any record.
            results.scrub_file(server.log_path, self.redact)
        self.emit(EventKind.SERVER_STOPPED, session=started.session, window=started.window,
                  exit_code=server.exit_code(), kept=kept, **({"record": record} if record else {}))

    def _say_stopping(self, lane: Lane, started: StartedWindow, alive: bool) -> None:
        """A server's stop is journaled as it begins (a server may take seconds to go, and the
        console says so); a rerun queued on this place now waits on it."""
        self.emit(EventKind.SERVER_STOPPING, session=started.session, window=started.window,
                  alive=alive)
        wait = stopping_wait(f"{started.session}-{started.window}").waiting
        queued: dict[tuple[str, str], list[str]] = {}
        for key in dict.fromkeys(lane.controls.reruns):
            row = self.state.rows[key]
            if self.state.session_places.get(row.session, "") == lane.name:
                queued.setdefault((row.session, row.window), []).append(key)
        for (session, window), keys in queued.items():
            say_waiting(self.ctx, session, window, keys, wait)

    def _node(self, session: str, lane: Lane) -> str | None:
        """Every window of a session runs where its control ran, so each delta is within one box:
        the place's node, else wherever the scheduler put the control."""
        if lane.place and lane.place.node:
            return lane.place.node
        control = self.state.windows.get(f"{session}-{CONTROL}")
        return control.placed or None if control else None

    def _wait_placed(self, lane: Lane, session: str, window: str, server: Server,
                     pump: LogPump) -> str | None:
        """A batch job waits in its scheduler's queue: each new reason is journaled, and the boot
        and window clocks start when it runs. Returns why it never ran, or None."""
        if not isinstance(server, BatchServer):
            return None
        job = str(server.identity.get("job", ""))

        def on_queue(state: str, reason: str) -> None:
            self.emit(EventKind.WINDOW_QUEUED, session=session, window=window, job=job,
                      state=state, reason=reason)

        placed = server.wait_placed(self.campaign.timeouts.queue, lane.controls.stopping, on_queue)
        if not placed.placed:
            return placed.reason
        lane.controls.start_window(self.campaign.timeouts.window)
        self.emit(EventKind.WINDOW_PLACED, session=session, window=window, job=job,
                  node=placed.facts.get("node", ""), url=server.base_url,
                  queued_s=round(placed.waited_s, 2))
        for fact in pump.add_facts(placed.facts, "slurm"):
            self._on_fact(session, window)(fact)
        return None

    def _on_fact(self, session: str, window: str) -> Callable[[Fact], None]:
        def on_fact(fact: Fact) -> None:
            self.emit(EventKind.BOOT_FACT, session=session, window=window, key=fact.key, value=fact.value)
        return on_fact

    def _boot_and_measure(self, lane: Lane, started: StartedWindow, phases: list[Phase]) -> None:
        session, window, wdir = started.session, started.window, started.dir
        server, pump, ctl = started.server, started.pump, lane.controls
        unplaced = self._wait_placed(lane, session, window, server, pump)
        if unplaced is not None and not ctl.stopping():
            self._reject(session, window, wdir, unplaced, [], pump)
            return
        boot = (BootOutcome(False, 0.0, "cancelled in the queue") if unplaced is not None else
                wait_ready(server, started.adapter, pump, self.campaign.timeouts.boot,
                           cancelled=ctl.stopping))
        if not boot.ready and ctl.stopping():
            status, why = ctl.ending()
            ctl.advance.clear()
            why = (f"{why} during its boot" if status == WindowStatus.FAILED
                   else "the operator ended the window during its boot")
            if status == WindowStatus.FAILED:
                self._write_failure(wdir, pump, why)
            self.emit(EventKind.WINDOW_FINISHED, session=session, window=window, status=status,
                      reason=why)
            return
        if not boot.ready:
            self._reject(session, window, wdir, self._with_end(boot.reason, server), boot.error_lines,
                         pump, boot)
            return
        facts = pump.freeze()
        self._record_boot(session, window, wdir, facts, boot, started.tag, pump.log_facts())
        ctx = WindowContext(session, window, wdir, server, started.adapter, started.config, facts,
                            started.gpus)
        try:
            for phase in phases:
                if ctl.stopping():
                    break
                phase(lane.ctx, ctx)
        except WindowFailed as e:
            why = self._with_end(str(e), server)
            self._write_failure(wdir, pump, why)
            self.emit(EventKind.WINDOW_FINISHED, session=session, window=window, status=WindowStatus.FAILED,
                      reason=why)
            return
        status, why = ctl.ending()
        ctl.advance.clear()
        if status == WindowStatus.FAILED:
            self._write_failure(wdir, pump, why)
        self.emit(EventKind.WINDOW_FINISHED, session=session, window=window, status=status,
                  **({"reason": why} if status == WindowStatus.FAILED else {}))

    @staticmethod
    def _with_end(reason: str, server: Server) -> str:
        """A batch job's end, as its scheduler records it, beside ruler's own reason."""
        if not isinstance(server, BatchServer):
            return reason
        ended = server.ended_text()
        return f"{reason}; {ended}" if ended else reason

    def _write_failure(self, wdir: Path, pump: LogPump, reason: str) -> None:
        if not pump.server.alive():
            pump.join(timeout=5)  # let the dead server's last lines land
        results.write_atomic(wdir / "failure.txt",
                             f"reason: {reason}\n\nlast lines of the log:\n{pump.tail_text()}\n")

    def _record_boot(self, session: str, window: str, wdir: Path, facts: BootFacts,
                     boot: BootOutcome, tag: str = "", logged: bool = True) -> None:
        """``logged``: the server's log gave boot facts. A window is compared on none when its
        log or its control's gave none (the runtime's facts, a node or a job, say nothing of the
        server booted)."""
        data: dict[str, Any] = {"session": session, "window": window,
                                "boot_seconds": round(boot.seconds, 2), **facts.as_json()}
        if window == CONTROL:
            self.control_facts[session] = facts
            (self.unlogged_controls.discard if logged else self.unlogged_controls.add)(session)
        whose = "its log" if not logged else "its control's log" if (
            window != CONTROL and session in self.unlogged_controls) else ""
        if self.runtime == "attach":
            data["note"] = "attach runtime: no lifecycle and no boot log, so no boot facts"
        elif whose:
            data["note"] = f"no boot fact in {whose}: " + (
                "its windows are compared on none" if window == CONTROL else "not compared with the control")
        if window != CONTROL and session in self.control_facts:
            mine = BootFacts() if whose else facts
            ours, theirs = self.campaign.server_for(window), self.campaign.server
            data["diff_vs_control"] = flag_free(
                mine.diff(self.control_facts[session]) if ours == theirs and
                self.campaign.window(window).server is None else
                stack_diff(mine, get_adapter(ours), self.control_facts[session], self.adapter,
                           (ours, theirs)))
        results.write_json(wdir / f"boot-facts{tag}.json", data)
        excerpt = [f.line for f in facts.facts.values()] + facts.warnings + facts.errors
        results.write_atomic(wdir / f"boot-excerpt{tag}.txt", "\n".join(dict.fromkeys(excerpt)) + "\n")
        self.emit(EventKind.WINDOW_READY, session=session, window=window, boot_s=round(boot.seconds, 2),
                  facts={k: f.value for k, f in facts.facts.items()},
                  diff=data.get("diff_vs_control"))

    def _reject(self, session: str, window: str, wdir: Path, reason: str, errors: list[str],
                pump: LogPump | None = None, boot: BootOutcome | None = None) -> None:
        tail = pump.tail_text() if pump else ""
        text = f"reason: {reason}\n\nerror lines (verbatim):\n" + "\n".join(errors or ["(none)"])
        if tail:
            text += f"\n\nlast lines of the log:\n{tail}"
        results.write_atomic(wdir / "rejection.txt", text + "\n")
        if pump:
            results.write_json(wdir / "boot-facts.json", {
                "session": session, "window": window, "rejected": True, **pump.facts.as_json()})
        self.emit(EventKind.WINDOW_REJECTED, session=session, window=window, reason=reason,
                  errors=[self.redact(e) for e in errors[:20]])
