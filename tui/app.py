"""The ruler console: a thin client of a run directory.

It learns everything from ``journal.jsonl`` (folded with ``engine.record.state.apply``, the one way state is
derived) and acts only through ``control.sock``. I/O happens in thread workers that never touch a
widget (harlequin's rule): they post messages, and the handlers here own every change of state and
screen, inside ``batch_update()``. Quitting leaves the engine running; reattaching takes the journal's
snapshot (engine.record.snapshot), folds the events after it and follows it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SuspendNotSupported, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Input
from textual.worker import get_current_worker

from engine import control
from engine.commands.eta import LoadPlan, load_plan
from engine.commands.invocation import ruler_command
from engine.record.journal import Event
from engine.record.state import RunState, apply
from engine.sanitize import terminal
from engine.servers import get_adapter
from engine.words import RERUNNABLE_ROWS, UP_WINDOWS, RunStatus
from tui.commandline import CommandLine, CommandSuggester, Reported
from tui.core.detail import Detail, detail, pager_argv, receipts
from tui.core.ending import earlier_run, is_over, next_commands, outcome
from tui.core.facts import facts_lines
from tui.core.fmt import Seg, fmt_tok, steered
from tui.core.follow import Batch, Follower, Link, engine_pid, pid_alive, probe
from tui.core.header import header_lines
from tui.core.logview import LineClassifier, ServingView
from tui.core.plan import frozen_leak, frozen_rule
from tui.core.reps import REP_COLS, REP_COLUMNS, rep_series, row_cells, window_series
from tui.core.selection import LogWatch, Selection
from tui.core.sessions import keyed_session, running_sessions, session_args, session_paused
from tui.core.sorting import filter_rows, sort_rows
from tui.core.sweep import picked_sweep, sweep_lines
from tui.core.versus import bars_lines, delta_cells
from tui.core.windows import (
    WINDOW_COLS,
    WINDOW_COLUMNS,
    live_row,
    window_notes,
    window_rows,
    window_status,
)
from tui.plain import farewell, follow_plain
from tui.widgets.detail import DetailScreen
from tui.widgets.dialogs import ConfirmAbort, HelpScreen
from tui.widgets.log import BootLog
from tui.widgets.panels import Panel, RepBars
from tui.widgets.sweep import SweepScreen
from tui.widgets.tables import FollowTable
from tui.widgets.text import lines_text, tag_styles, to_text

Probe = Callable[[Path, "int | None"], Link]
Send = Callable[..., dict[str, Any]]
GC_EVERY = 1.0  # seconds between the console's full collections (see on_followed)
ENGINE_ACTIONS = frozenset({"abort", "advance", "rewarm", "rerun", "pause"})  # they need an engine


class Followed(Message):
    """A batch of journal events and log lines from the follower thread."""

    def __init__(self, batch: Batch) -> None:
        super().__init__()
        self.batch = batch


class Linked(Message):
    """What the engine probe found; only the latest matters."""

    def __init__(self, link: Link) -> None:
        super().__init__()
        self.link = link

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Linked)


class Replied(Message):
    """The engine's answer to one command."""

    def __init__(self, cmd: str, args: list[str], reply: dict[str, Any]) -> None:
        super().__init__()
        self.cmd, self.args, self.reply = cmd, args, reply


@dataclass
class Ui:
    head: Panel
    windows: FollowTable
    reps: FollowTable
    right: Vertical
    spark: RepBars
    spark_label: Panel
    bars: Panel
    log: BootLog
    logbox: Vertical
    search: Input
    facts: Panel
    banner: Panel
    status: Panel


class RulerConsole(App[None]):
    """The console on one run directory.

    ``clock`` gives the wall time for elapsed/remaining (tests freeze it); ``probe`` checks the
    engine (None: never, the header says "engine ?"); ``send`` is ``engine.control.send``.
    """

    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "ruler"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("a", "abort", "abort"),
        Binding("n", "advance", "advance"),
        Binding("w", "rewarm", "rewarm"),
        Binding("r", "rerun", "rerun"),
        Binding("p", "pause", "pause"),
        Binding("slash", "search", "filter"),
        Binding("colon", "command_line", "cmd"),
        Binding("f", "follow", "follow", show=False),  # the log's keys: in the help and the palette
        Binding("v", "raw_log", "raw", show=False),
        Binding("t", "sweep", "sweep", show=False),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit_console", "quit"),
        Binding("escape", "live", "live", show=False),
        # k9s's sort keys (shift): on the table with the keys, the windows list otherwise.
        *(Binding(k, f"sort('{k}')", f"sort by {what}", show=False) for k, what in
          (("N", "campaign order"), ("S", "status"), ("D", "delta"), ("T", "tok/s"), ("P", "spread"))),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    def __init__(self, run_dir: Path, *, clock: Callable[[], float] = time.time,
                 probe: Probe | None = probe, probe_interval: float = 2.0,
                 send: Send = control.send, max_log_lines: int = 5000,
                 follow_interval: float = 0.1, pager: Callable[[list[str]], None] | None = None) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)
        self.clock, self.probe, self.probe_interval = clock, probe, probe_interval
        self.send, self.max_log_lines = send, max_log_lines
        self.pager = pager or self._run_pager
        self.state = RunState()
        self.leak = frozen_leak(self.run_dir / "campaign.yaml")
        self.rule = frozen_rule(self.run_dir / "campaign.yaml")  # the Δ column's calls
        self.link: Link | None = None
        self.caught_up = False  # the journal and the shown log were read to their end
        self.sel = Selection()
        self.classify = LineClassifier()
        self._adapter_name = ""  # the server whose patterns self.classify uses
        self.tags = tag_styles({})  # the theme's colours once mounted
        self.follower = Follower(self.run_dir, lambda b: self.post_message(Followed(b)),
                                 interval=follow_interval, max_log_lines=max_log_lines)
        # The snapshot read before the first frame: that frame shows the run, where an empty one
        # was drawn while the follower read it, then drawn again.
        self.state = self.follower.preload() or self.state
        self._adapt()
        self.logw = LogWatch()
        self._status: list[Seg] = [("attaching to " + str(self.run_dir), "muted")]
        self._ui: Ui | None = None  # the widgets, once mounted
        self.commands = CommandLine(self)  # the : line and the sorting
        self.engine_gone = False  # the probe found no engine and no process: it will not answer
        self._was_over = False
        self._frozen = False
        self._pending: dict[str, Timer] = {}  # commands sent, not answered yet

    # ------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Panel(id="head")
        yield Input(id="filter", placeholder="filter the windows: words of a name, status, axis or "
                                             "note (!word: without it); enter keeps it, esc clears")
        # The windows list above the reps of the window picked, each the screen's whole width: side
        # by side, a window's row and another window's reps read as one line.
        yield FollowTable(WINDOW_COLS, id="windows")
        with Vertical(id="right"):
            yield FollowTable(REP_COLS, id="reps")
            with Horizontal(id="chart"):
                with Vertical(id="sparkbox"):
                    yield Panel(id="spark-label")
                    yield RepBars(id="spark")
                yield Panel(id="bars")
        with Horizontal(id="bottom"):
            with Vertical(id="logbox"):
                yield BootLog(self.classify, self.max_log_lines, id="log")
                yield Input(id="search", placeholder="search the log: enter = next older match, "
                                                     "esc = close")
            yield Panel(id="facts")
        yield Panel(id="banner")  # the end of the run: its outcome and what to type next
        yield Input(id="command", placeholder=":rerun ROW · :report · :open ROW · :filter WORDS · "
                                              ":sort COLUMN · :help (tab completes, esc closes)",
                    suggester=CommandSuggester(self))
        yield Panel(id="status")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        q = self.query_one
        # Held, not queried: a modal screen on top must not hide them from the handlers.
        self._ui = Ui(q("#head", Panel), q("#windows", FollowTable), q("#reps", FollowTable),
                      q("#right", Vertical), q("#spark", RepBars), q("#spark-label", Panel),
                      q("#bars", Panel), q(BootLog), q("#logbox", Vertical), q("#search", Input),
                      q("#facts", Panel), q("#banner", Panel), q("#status", Panel))
        self.tags = tag_styles(self.theme_variables)
        self.ui.log.tags = self.tags
        self.ui.search.display = False
        for box in ("#filter", "#command"):
            self.query_one(box).display = False
        self.ui.windows.border_title = "windows"
        self.ui.windows.focus()  # arrows pick a window at once; enter opens its reps
        self.render_all()
        self._follow()
        if self.probe is not None:
            self._probe_loop()
        self.set_interval(1.0, self._render_head)

    @property
    def plan(self) -> LoadPlan:
        return load_plan(self.state)

    @property
    def ui(self) -> Ui:
        assert self._ui is not None, "used before mount"
        return self._ui

    # ------------------------------------------------------------ workers (no widgets in here)

    @work(thread=True, exclusive=True, group="follow", exit_on_error=False)
    def _follow(self) -> None:
        worker = get_current_worker()
        self.follower.run(lambda: worker.is_cancelled)

    @work(thread=True, exclusive=True, group="probe", exit_on_error=False)
    def _probe_loop(self) -> None:
        worker = get_current_worker()
        assert self.probe is not None
        while not worker.is_cancelled:
            link = self.probe(self.run_dir, self.state.pid)
            self.post_message(Linked(link))
            # Retry a lost engine every second; a healthy one is asked less often.
            deadline = time.monotonic() + (self.probe_interval if link.connected else 1.0)
            while time.monotonic() < deadline and not worker.is_cancelled:
                time.sleep(0.05)

    @work(thread=True, group="command", exit_on_error=False)
    def _send(self, cmd: str, args: list[str]) -> None:
        try:
            reply = self.send(self.run_dir, cmd, args, timeout=5.0)
        except (OSError, ValueError) as e:
            reply = {"ok": False, "error": f"no engine answers on {control.SOCKET} "
                                           f"({getattr(e, 'strerror', None) or e})"}
        self.post_message(Replied(cmd, args, reply))

    # ------------------------------------------------------------ messages

    def on_followed(self, message: Followed) -> None:
        b = message.batch
        # Following starts (from the snapshot: already shown when preloaded), or starts over.
        new_base = b.base is not None and b.base is not self.state
        if b.base is not None:
            self.state = b.base
        self.state.damage += b.damage  # lines that are not events; apply() adds seq anomalies
        self._apply(zip(b.lines, b.events, strict=True))
        self._adapt()
        log = self.ui.log
        with self.batch_update():
            if b.events or b.damage or new_base:
                self.render_all()
            if b.log_gen == self.logw.gen:
                if b.log_view != self.logw.view:
                    self.logw.view = b.log_view
                    self._render_log_title()
                if b.log_clear:
                    log.clear()
                lines = b.log
                if b.log_dropped:
                    lines = [f"[ruler: {b.log_dropped:,} lines not shown: the log outran the "
                             f"screen; they are in the file]", *lines]
                if lines:
                    log.write_lines(lines, scroll_end=False)
                    log.follow_tail()
        was = self.caught_up
        self.caught_up = b.caught_up and b.log_gen == self.logw.gen
        if self.caught_up and not was and not self._frozen:
            # Textual's startup objects and the folded journal live as long as the console: out
            # of the collector's sight, a full collection scans only what the flood leaves behind
            # (unfrozen, those pauses reached 80 ms under a 10,000 lines/s log).
            gc.collect()
            gc.freeze()
            # Textual leaves cyclic garbage behind every frame (Strips that cache themselves, a
            # table's row renders, each command's worker): 600 objects a second under a log flood,
            # and RSS grew with them for as long as no full collection ran (64 -> 78 MiB in two
            # minutes). A full collection of only what came after the freeze, every second
            # between two frames, keeps it bounded and short (a second's garbage: 4-10 ms on two
            # busy cores), where the collector's own came rarely, at any moment, with all of it.
            first, second, _ = gc.get_threshold()
            gc.set_threshold(first, second, 100)  # the collector's own: ten times rarer
            self.set_interval(GC_EVERY, lambda: gc.collect())  # Textual takes no builtin
            self._frozen = True
        if self.caught_up and not was and self._status[0][0].startswith("attaching"):
            said: list[Seg] = [("attached:", "bold"), (f"{self.state.last_seq} journal events", "muted")]
            if not self.over:  # once over, the banner says how it ended
                said += [("·", "muted"), ("following", "")]
            self.say(said)
        self.follower.ack()

    def _adapt(self) -> None:
        """The log pane reads the shown window's log in its server's words: the campaign's
        (run_started, or the snapshot's), or the other stack's for a window on another stack."""
        ws = self.state.windows.get(self.sel.shown or "")
        name = (ws.stack if ws else "") or self.state.server
        if name and name != self._adapter_name:
            with contextlib.suppress(ValueError):  # an adapter this client does not know: plain lines
                self.classify.use(get_adapter(name))
                self._adapter_name = name

    def _apply(self, events: Iterable[tuple[int, Event]]) -> None:
        for line, e in events:
            commands = len(self.state.commands)
            apply(self.state, e, line)
            # A command the fold took (one it cannot use is damage, with its line): when someone
            # else (`ruler ctl`, a second console) steered the engine, say so.
            if self.caught_up and len(self.state.commands) > commands:
                said = steered(self.state.commands[-1], os.getpid())
                if said:
                    self.say(said)

    def on_linked(self, message: Linked) -> None:
        was = self.link
        self.link = message.link
        if was is not None and was.connected and not message.link.connected \
                and self.state.status == RunStatus.RUNNING:
            self.say([("engine disconnected:", "error"), (message.link.detail, "")])
        elif was is not None and not was.connected and message.link.connected:
            self.say([("engine connected again:", "success"), (message.link.detail, "")])
        # Gone, not just slow to answer: the console has nothing left to steer.
        self.engine_gone = not message.link.connected and not pid_alive(
            engine_pid(self.run_dir, self.state.pid))
        self._render_head()
        self._render_end()

    def on_replied(self, message: Replied) -> None:
        r, what = message.reply, " ".join([message.cmd, *message.args])
        # "waiting" is only worth a frame when the engine is slow to answer.
        timer = self._pending.pop(what, None)
        if timer is not None:
            timer.stop()
        if r.get("ok"):
            self.say([(f"{what}:", "bold"), (str(r.get("reply", "")), "success")])
        else:
            self.say([(f"{what} refused:", "error"), (str(r.get("error", "")), "")])
            # The refusal quotes what was typed: shown as text, neither markup nor escapes.
            self.notify(terminal(r.get("error", "")), title=terminal(f"{what} refused"),
                        severity="error", timeout=6, markup=False)

    @on(FollowTable.Picked, "#windows")
    def _window_picked(self, message: FollowTable.Picked) -> None:
        self.sel.pick_window(self.state, message.key)
        self.render_all()

    @on(DataTable.RowSelected, "#windows")
    @on(DataTable.RowSelected, "#reps")
    def _opened(self, message: DataTable.RowSelected) -> None:
        """Enter on a window or a row (or a click on the one under the cursor): its detail."""
        if message.row_key.value is not None:
            self.open_detail(message.row_key.value)

    def open_detail(self, key: str) -> None:
        self.push_screen(DetailScreen(key, lambda: self._detail(key), self.page, self.rerun,
                                      lambda: self.over, self.tags))

    def _detail(self, key: str) -> Detail | None:
        ws = self.state.windows.get(key)
        return detail(self.state, key, self.leak, self.rule, receipts(self.run_dir, ws.key) if ws else None)

    def page(self, rel: str) -> None:
        """A log of the run in $PAGER, the console suspended meanwhile."""
        path = self.run_dir / rel
        if not path.is_file():
            self.say([("log:", "bold"), (f"{rel} is not there (yet)", "warning")])
            return
        try:
            self.pager(pager_argv(path, os.environ))
        except (OSError, SuspendNotSupported) as e:
            self.say([("pager:", "bold"), (f"cannot open {rel}: {e}", "error")])

    def _run_pager(self, argv: list[str]) -> None:
        with self.suspend():
            subprocess.run(argv, check=False)

    @on(FollowTable.Picked, "#reps")
    def _row_picked(self, message: FollowTable.Picked) -> None:
        self.sel.pick_row(self.state, message.key)
        self._render_chart()

    @on(Input.Submitted, "#search")
    def _search(self, message: Input.Submitted) -> None:
        log = self.ui.log
        y = log.find(message.value)
        if y is None:
            self.say([(f"/{message.value}:", "bold"),
                       (f"no match in the {log.line_count} lines held", "warning")])
        else:
            self.say([(f"/{message.value}:", "bold"), (f"line {y + 1} of {log.line_count}", "")])
        self._render_log_title()

    @on(Input.Changed, "#filter")
    def _filtered(self, message: Input.Changed) -> None:
        self.sel.filter = message.value
        self.render_all()

    @on(Input.Submitted, "#filter")
    def _filter_kept(self) -> None:
        self.query_one("#filter").display = False
        self.ui.windows.focus()

    @on(Input.Submitted, "#command")
    def _command_line(self, message: Input.Submitted) -> None:
        box = self.query_one("#command", Input)
        box.display, box.value = False, ""
        self.ui.windows.focus()
        self.commands.submit(message.value)

    @on(DataTable.HeaderSelected)
    def _header_clicked(self, message: DataTable.HeaderSelected) -> None:
        """A click on a column's header sorts its table by it; again, the other way."""
        name = "reps" if message.data_table is self.ui.reps else "windows"
        self.commands.sort_by(name, str(message.column_key.value))

    # ------------------------------------------------------------ actions (keys and palette)

    def action_abort(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.command("abort")
            else:
                self.say([("abort cancelled: nothing sent", "muted")])

        self.push_screen(ConfirmAbort(), answered)

    def action_advance(self) -> None:
        self.window_command("advance")

    def action_rewarm(self) -> None:
        self.window_command("rewarm")

    def action_rerun(self) -> None:
        """The window under the cursor on the windows list (its void and failed rows), else the row
        under the reps cursor."""
        table = self.ui.windows if self.focused is self.ui.windows else self.ui.reps
        key = table.cursor_key()
        if key is None:
            self.say([("rerun:", "bold"), ("put the cursor on a void or failed row first", "warning")])
        else:
            self.rerun(key)

    def rerun(self, key: str) -> None:
        """Ask the engine to measure a void or failed row again, or every such row of a window;
        told here when there is none, without bothering the engine."""
        row, st = self.state.rows.get(key), self.state
        if row is not None and row.status not in RERUNNABLE_ROWS:
            self.say([("rerun:", "bold"), (f"{key} is {row.status}; only void or failed rows "
                                            "rerun", "warning")])
        elif row is None and not any(r.status in RERUNNABLE_ROWS for r in window_rows(st, key)):
            word = st.windows[key].status if key in st.windows else "not a row or window"
            self.say([("rerun:", "bold"), (f"{key} ({word}) has no void or failed row", "warning")])
        else:
            self.command("rerun", [key])

    def action_pause(self) -> None:
        session = keyed_session(self.state, self.sel.shown)
        self.window_command("resume" if session_paused(self.state, session) else "pause")

    def action_search(self) -> None:
        """``/``: on the log, find a line; anywhere else, filter the windows list."""
        focused = self.focused
        box = self.ui.search if focused is not None and (
            focused is self.ui.log or focused is self.ui.search) else self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def action_command_line(self) -> None:
        box = self.query_one("#command", Input)
        box.display = True
        box.focus()

    def action_sort(self, key: str) -> None:
        self.commands.sort_key(key)

    def on_reported(self, message: Reported) -> None:
        self.commands.reported(message)

    def write_report(self, args: list[str]) -> None:
        self.run_worker(partial(self._report, args), thread=True, group="report", exclusive=True,
                        exit_on_error=False)

    def _report(self, args: list[str]) -> None:
        """``ruler report`` on this run, as its own process (matplotlib stays out of the console);
        a thread worker's: it posts what came of it."""
        proc = subprocess.run([sys.executable, "-m", "engine", "report", str(self.run_dir), *args],
                              capture_output=True, text=True, check=False)
        self.post_message(Reported(proc.returncode, proc.stdout, proc.stderr))

    def set_filter(self, text: str) -> None:
        self.query_one("#filter", Input).value = text  # its Changed message applies it

    @property
    def on_reps(self) -> bool:
        return self.focused is self.ui.reps

    def action_follow(self) -> None:
        log = self.ui.log
        log.set_follow(not log.auto_scroll)
        self.say([("follow", "bold"), ("on" if log.auto_scroll else "off (f to follow again)", "")])

    def action_raw_log(self) -> None:
        self.logw.raw = not self.logw.raw
        self.say([("log:", "bold"), ("raw, every line (v: serving view)" if self.logw.raw else
                                      "serving view: past the ready line, errors, warnings and "
                                      "the lines the adapter reads; the rest folded (v: raw)", "")])
        self._watch_log()

    def on_boot_log_follow_changed(self) -> None:
        self._render_log_title()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_sweep(self) -> None:
        sweep = picked_sweep(self.state, self.sel.shown)
        self.push_screen(SweepScreen(lambda: sweep_lines(self.state, self.rule, sweep), self.tags))

    def action_quit_console(self) -> None:
        self.exit()

    def action_live(self) -> None:
        """esc: close the command line, then clear the filter, then close the log search; else
        back to following the live window and row."""
        command, filt = self.query_one("#command", Input), self.query_one("#filter", Input)
        if command.display:
            command.display, command.value = False, ""
            self.ui.windows.focus()
            return
        if filt.display or self.sel.filter:
            filt.display, filt.value = False, ""  # its Changed message shows every window again
            self.ui.windows.focus()
            return
        box = self.ui.search
        if box.display:
            box.display = False
            log = self.ui.log
            log.term, log.match = "", None
            log.refresh()
            self.ui.reps.focus()
            self._render_log_title()
            return
        self.sel.live()
        self.render_all()

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # Textual's own, less those ruler has (quit, keys) or does its own way (the screenshot,
        # into the run directory, where Textual's aimed at a ~/Downloads a server may not have).
        for c in super().get_system_commands(screen):
            if c.title not in ("Quit", "Keys", "Screenshot"):
                yield c
        yield SystemCommand("Screenshot (an SVG in the run directory)", "Save the screen as it is",
                            self.action_screenshot_here)
        yield SystemCommand("Abort the campaign (a)", "Stop the campaign; asks first", self.action_abort)
        yield SystemCommand("Advance (n)", "End the current window, go on with the next",
                            self.action_advance)
        yield SystemCommand("Rewarm (w)", "A warm pass before the next rep", self.action_rewarm)
        yield SystemCommand("Rerun (r)", "Measure the void or failed row under the cursor again, "
                            "or the window's", self.action_rerun)
        yield SystemCommand("Pause / resume (p)", "Pause or resume between reps", self.action_pause)
        yield SystemCommand("Filter the windows (/)", "Keep the windows whose text holds the words "
                            "typed; on the log, find a line", self.action_search)
        yield SystemCommand("Command line (:)", ":rerun ROW, :report, :open ROW, :filter, :sort",
                            self.action_command_line)
        yield SystemCommand("Follow the log on/off (f)", "Toggle following the live log",
                            self.action_follow)
        yield SystemCommand("Raw log / serving view (v)", "Every line of the server log, or only "
                            "what matters once it serves", self.action_raw_log)
        yield SystemCommand("Sweep view (t)", "Each swept value against the control, per class and "
                            "load, and the answer in words", self.action_sweep)
        yield SystemCommand("Help (?)", "Keys and marks", self.action_help)
        yield SystemCommand("Quit the console (q)", "The engine keeps running",
                            self.action_quit_console)

    def action_screenshot_here(self) -> None:
        path = self.save_screenshot(path=str(self.run_dir))
        self.say([("screenshot:", "bold"), (path, "success")])

    def window_command(self, cmd: str) -> None:
        """A command on a window: with sessions on places, the window under the cursor's session."""
        args = session_args(self.state, self.sel.shown)
        if args is None:
            running = ", ".join(running_sessions(self.state))
            self.say([(f"{cmd}:", "bold"), (f"sessions {running} run at once: put the cursor on a "
                                              "window of the one to act on", "warning")])
        else:
            self.command(cmd, args)

    def command(self, cmd: str, args: list[str] | None = None) -> None:
        what = " ".join([cmd, *(args or [])])
        self._pending[what] = self.set_timer(
            0.15, lambda: self.say([(what, "bold"), ("sent, waiting for the engine…", "muted")]))
        self._send(cmd, list(args or []))

    def say(self, segs: list[Seg]) -> None:
        self._status = segs
        self.ui.status.set(to_text(segs, self.tags))

    # ------------------------------------------------------------ rendering

    def render_all(self) -> None:
        self.sel.follow(self.state)
        self._render_end()
        self._render_head()
        self._render_windows()
        self._render_reps()
        self._render_facts()
        self._render_chart()
        self._watch_log()
        self.ui.status.set(to_text(self._status, self.tags))
        if isinstance(self.screen, DetailScreen):
            self.screen.update()

    @property
    def over(self) -> bool:
        """Nothing the console sends can act any more: the run ended, or its engine is gone."""
        return is_over(self.state, self.engine_gone)

    def _render_end(self) -> None:
        """The banner once the run is over, the keys that no longer act greyed, said once."""
        banner, over = self.ui.banner, self.over
        if over != self._was_over:
            self._was_over = over
            banner.display = over
            self.refresh_bindings()
            if over and self.caught_up:  # it ended while the console watched
                self.say([outcome(self.state, self.engine_gone, self.clock())])
        if over:
            other = earlier_run(self.run_dir, self.state.campaign)
            lines = [[outcome(self.state, self.engine_gone, self.clock())],
                     next_commands(self.state, self.run_dir, ruler_command(), other)]
            text = Text("\n").join(to_text(line, self.tags) for line in lines)
            text.no_wrap = False  # whole, on as many lines as it takes: what to type next
            banner.set(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Under the detail view only its own keys and the help (its r reruns what it shows); the
        engine's keys greyed once the run is over (no engine to act)."""
        if isinstance(self.screen, DetailScreen):
            return action == "help"
        if action in ENGINE_ACTIONS and self.over:
            return None
        return True

    def _render_head(self) -> None:
        link = (self.link.connected, self.link.detail) if self.link else None
        lines = header_lines(self.state, self.plan, self.sel.shown, link, self.clock())
        head = self.ui.head
        if head.styles.height is None or head.styles.height.value != len(lines):
            head.styles.height = len(lines)  # a line per place when sessions run on places
        text = to_text(lines[0], self.tags)
        for line in lines[1:]:
            text.append("\n")
            text.append_text(to_text(line, self.tags))
        head.set(text)

    def _render_windows(self) -> None:
        st, table = self.state, self.ui.windows
        rows = []
        for key in st.order:
            ws = st.windows[key]
            # Every window up now: one per place when sessions run on places.
            mark = "▶ " if key == st.current or ws.status in UP_WINDOWS else "  "
            delta, ci = delta_cells(st, key, self.rule)
            rows.append((key, [[(f"{mark}{ws.session} {ws.window}", "bold" if mark.strip() else "")],
                               [window_status(st, key)], [delta], [ci],
                               window_notes(st, key), [(ws.axis, "muted")]]))
        shown = sort_rows(filter_rows(rows, self.sel.filter), WINDOW_COLUMNS,
                          self.sel.sorts.get("windows"))
        keys = [k for k, _ in shown]
        if keys and self.sel.shown not in keys:  # filtered out: the first window left is shown
            self.sel.pick_window(st, keys[0])
        table.sync(shown, self.tags)
        table.show_key(self.sel.shown)
        title = "windows"
        if self.sel.filter:
            title += f" · /{self.sel.filter} ({len(shown)} of {len(rows)}; esc clears)"
        sort = self.sel.sorts.get("windows")
        if sort:
            title += f" · by {sort.column} {'↓' if sort.descending else '↑'} (N: campaign order)"
        self._title(table, title)

    def _render_reps(self) -> None:
        table = self.ui.reps
        if self.sel.new_reps():
            table.reset()
        rows = window_rows(self.state, self.sel.shown) if self.sel.shown else []
        reps = self.plan.reps
        cells = [(r.key, [c[col] for col in REP_COLUMNS])
                 for r in rows for c in (row_cells(r, reps, self.leak),)]
        table.sync(sort_rows(cells, REP_COLUMNS, self.sel.sorts.get("reps")), self.tags)
        if not self.sel.row_pinned:
            live = live_row(self.state, self.sel.shown)
            table.show_key(live.key if live else (rows[-1].key if rows else None))
        title = f"reps · {self.sel.shown or '-'}"
        if self.sel.pinned:
            title += " (picked; esc: live)"
        sort = self.sel.sorts.get("reps")
        if sort:
            title += f" · by {sort.column} {'↓' if sort.descending else '↑'} (N: campaign order)"
        self._title(self.ui.right, title)

    def _render_facts(self) -> None:
        facts = self.ui.facts
        self._title(facts, f"boot facts · {self.sel.shown or '-'}")
        facts.set(lines_text(facts_lines(self.state, self.sel.shown), self.tags))

    def _render_chart(self) -> None:
        # The window's reps in landing order, bars from zero: a leak is a stub among full bars.
        series = window_series(self.state, self.sel.shown)
        self.ui.spark.data = series  # reassigned, never mutated
        label: list[Seg] = [("reps vs their shape's median", "muted")]
        if series:
            label += [(f"{len(series)} reps, lowest {min(series):.0%}", "")]
        key = self.ui.reps.cursor_key()
        row = self.state.rows.get(key or "")
        if row and row.reps:
            label += [("·", "muted"), (f"{row.cls} {row.load}:", "bold"),
                      (" ".join(fmt_tok(v) for v in rep_series(row)), "")]
        self.ui.spark_label.set(to_text(label, self.tags))
        bars = bars_lines(self.state, self.sel.shown, self.rule, width=8)
        self.ui.bars.set(Text("\n").join(to_text(line, self.tags, sep="") for line in bars))

    def _watch_log(self) -> None:
        self._adapt()
        adapter = self.classify.adapter
        wanted = self.logw.wants(self.state, self.sel.shown, adapter is not None)
        if wanted is not None:
            rel, serving = wanted
            self.logw.gen = self.follower.watch_log(
                rel, ServingView(adapter) if serving and adapter is not None else None)
            log = self.ui.log
            log.clear()
            log.match = None
            self.caught_up = False
        self._render_log_title()

    def _render_log_title(self) -> None:
        log = self.ui.log
        follow = "following" if log.auto_scroll else "follow off (f)"
        rel = self.logw.rel
        name = Path(rel).name if rel else ""
        where = (self.sel.shown or "-") + ("" if name in ("", "boot.log") else f" {name}")
        # What changes and matters first: a narrow pane cuts the title's end.
        view, what, mode = self.logw.view, "boot log", ""
        if not rel:
            where += " (no log yet)"
        elif self.logw.raw:
            what, mode = "log", " · raw (v: serving view)"
        elif view is not None and view.ready:
            what, mode = "log", f" · serving view, {view.folded:,} lines folded (v: raw)"
        search = f" · /{log.term}" if log.term else ""
        self._title(self.ui.logbox, f"{what} {where} · {follow}{search}{mode}")

    @staticmethod
    def _title(widget: Widget, title: str) -> None:
        if widget.border_title != title:  # a border title repaints the whole box
            widget.border_title = title


def run_console(run_dir: Path) -> int:
    """Open the console on ``run_dir``; returns when the operator quits. The engine is left alone."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return follow_plain(Path(run_dir))
    app = RulerConsole(Path(run_dir))
    app.run()
    print(farewell(Path(run_dir), app.state))
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(run_console(Path(sys.argv[1])))
