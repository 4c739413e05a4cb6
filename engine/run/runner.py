"""The campaign state machine: session -> window (control first) -> boot -> measure -> stop.

Every step is a journal event; files under the run directory are receipts written beside it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine import files
from engine.campaign.launch import campaign_items
from engine.campaign.machines import Place
from engine.campaign.redact import Redactor, redactor_for, references
from engine.campaign.sources import Item, chosen
from engine.campaign.sources.item import plain_item
from engine.campaign.spec import Campaign, Leak, VerdictSpec
from engine.context import Controls, Phase, RunContext
from engine.control import CommandRefused
from engine.errors import EngineError
from engine.method.stats import LeakPolicy
from engine.record import results
from engine.record.eventcheck import check
from engine.record.events import FORMAT, EventKind, LeakRecord, VerdictRecord, Workload
from engine.record.journal import Event
from engine.record.judgement import baseline_record
from engine.record.looks import take
from engine.record.receipts import ThroughputWriter
from engine.record.send import Emit
from engine.record.snapshot import fold_journal
from engine.record.state import RunState
from engine.record.writer import JournalClosed, JournalWriter
from engine.run.gpuwatch import GpuWatch
from engine.run.measure import Measurement
from engine.run.operator import handle
from engine.run.window import Lane, Windows
from engine.runtime import get_runtime
from engine.runtime.base import LaunchError, Runtime
from engine.servers import get_adapter
from engine.servers.logs import BootFacts, Fact
from engine.words import COMPLETE_WINDOWS, CONTROL, RunStatus


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


def workload_record(campaign: Campaign) -> Workload:
    """The workload as run_started records it (events.Workload): what the console's ETA reads."""
    wl = campaign.workload
    out: Workload = {"classes": list(wl.classes), "concurrency": list(wl.concurrency), "reps": wl.reps,
                     "requests": [wl.requests_for(n) for n in wl.concurrency], "max_tokens": wl.max_tokens}
    if wl.rate:
        out["rate"] = list(wl.rate)
        out["rate_requests"] = [wl.requests_at(r) for r in wl.rate]
    return out


def leak_record(leak: Leak) -> LeakRecord:
    """The leak rule as run_started records it (events.LeakRecord)."""
    return {"spread": leak.spread, "min_concurrency": leak.min_concurrency}


def verdict_record(verdict: VerdictSpec) -> VerdictRecord:
    """The verdict rule as run_started records it (events.VerdictRecord)."""
    r = verdict.rule()
    return {"error_rate": r.error_rate, "correction": r.correction, "margin": r.margin,
            "boot_noise": r.boot_noise, "allow_different": r.allow_different,
            "until_decided": r.until_decided, "max_boots": r.max_boots, "max_minutes": r.max_minutes}


def runtime_for(campaign: Campaign, name: str, secrets: Mapping[str, str],
                place: Place | None = None, cancelled: threading.Event | None = None) -> Runtime:
    """The runtime a resolved name stands for on a place. ``secrets``: a redacted value -> the
    variable that holds it, which a Slurm job script names instead; ``cancelled``: the run's abort, which
    cuts short a wait on a place's host."""
    return get_runtime(name, secrets=secrets, partition=campaign.slurm.partition,
                       docker_host=place.docker_host if place else None,
                       url=campaign.attach.url, connect_timeout=campaign.timeouts.connect,
                       cancelled=cancelled)


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
        secrets = references(campaign)
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
        # A journal already there means a resume: its fold is where the campaign stands. The
        # journal's writer folds each event it appends: that fold is the campaign's state.
        self.state = self.journal.state
        self.resuming = self.state.last_seq > 0
        self.items = frozen_items(campaign, run_dir, variables, self.redact)
        self.reboots: dict[str, int] = {}
        self._emit_lock = threading.RLock()
        self.emit: Emit = self._send  # typed per kind at each send (engine.record.send)
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
        self.windows = Windows(self.ctx, self.runtime, self.adapter, self.redact, self.gpuwatch)

    def _lane(self, place: Place, runtime: str | Runtime, secrets: Mapping[str, str]) -> Lane:
        rt = runtime_for(self.campaign, runtime, secrets, place, self.controls.abort) \
            if isinstance(runtime, str) else runtime
        # Each place's window has its own advance, pause and clock; an abort, a signal and the
        # queue of operator reruns are the whole run's (a place takes the reruns of its sessions).
        controls = Controls(abort=self.controls.abort, signals=self.controls.signals,
                            reruns=self.controls.reruns)
        return Lane(place, rt, controls, replace(self.ctx, controls=controls))

    # ------------------------------------------------------------ plumbing

    def _send(self, kind: EventKind, /, **data: Any) -> Event:
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

    def _say_started(self) -> None:
        """run_started, or run_resumed where the journal was there."""
        c = self.campaign
        if self.resuming:
            self.emit(EventKind.RUN_RESUMED, pid=os.getpid(), rows_done=sum(
                r.complete for r in self.state.rows.values()))
            return
        # What a run has or not (as dict[str, Any]: engine.record.send says why).
        held: dict[str, Any] = {"sweeps": sweeps} if (sweeps := sweep_record(c)) else {}
        held |= {"baseline": self._baseline()} if self.baseline is not None else {}
        self.emit(EventKind.RUN_STARTED, format=FORMAT, campaign=c.name, run=self.run_id,
                  runtime=self.runtime, server=c.server, pid=os.getpid(),
                  sessions={s: c.windows_in(s) for s in c.sessions},
                  axes={w.name: w.axis for w in c.windows}, workload=workload_record(c),
                  leak=leak_record(c.leak), verdict=verdict_record(c.verdict), **held)

    def run(self) -> str:
        c = self.campaign
        self._say_started()
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
                self.windows.reject(lane, session, window,
                                    f"place {lane.name} did not answer as its session began: {host['error']}")
                continue
            self.windows.run_window(lane, session, window, self.phases)
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
            for found in stopped:
                ident: dict[str, Any] = dict(found)  # an open kind: the runtime's own fields
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
            self.windows.run_window(lane, row.session, row.window, self._rerun_phases(),
                                    tag=f"-rerun{reboot}")
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
