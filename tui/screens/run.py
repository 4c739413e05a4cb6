"""The run screen: the console on one run directory (frogmouth's Main; the App's default screen).
It draws the run as tui.screens.watch does, and adds the operator's hands: the verbs of
tui.core.verbs as keys, palette entries and ``:`` commands. What one sends goes up to the App as a
message (Send, Report); the engine's answer comes back as one (Replied, Reported).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import SuspendNotSupported
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import Input

from engine.sanitize import terminal
from tui.core.detail import Detail, detail, pager_argv, receipts
from tui.core.follow import Follower
from tui.core.operator import Said, replied, reported, rerun_refused, sort_by, sort_key, sort_word
from tui.core.sessions import keyed_session, session_args, session_paused, which_session
from tui.core.sweep import picked_sweep, sweep_lines
from tui.core.verbs import ENGINE_VERBS, SORT_BY, VERBS, Command, CommandError, parse
from tui.screens.detail import DetailScreen
from tui.screens.dialogs import ConfirmAbort, HelpScreen
from tui.screens.messages import Replied, Report, Reported, Send
from tui.screens.sweep import SweepScreen
from tui.screens.watch import WatchScreen
from tui.widgets.tables import FollowTable


def bindings() -> list[BindingType]:
    """Each verb's key; a verb with several keys is given the key pressed (the sort keys)."""
    out: list[BindingType] = []
    for v in VERBS:
        keys = v.key.split()
        if len(keys) > 1:
            out += [Binding(k, f"{v.name}('{k}')", f"{v.footer} by {SORT_BY[k]}", show=False) for k in keys]
        elif keys:
            out.append(Binding(v.key, v.name, v.footer, show=v.show))
    return out



class RunScreen(WatchScreen):
    """``pager`` shows a log of the run (its argv; the App's runs it in the terminal)."""

    BINDINGS = bindings()

    def __init__(self, run_dir: Path, follower: Follower, *, clock: Callable[[], float],
                 pager: Callable[[list[str]], None], max_log_lines: int) -> None:
        super().__init__(run_dir, follower, clock=clock, max_log_lines=max_log_lines)
        self.pager = pager
        self._pending: dict[str, Timer] = {}  # commands sent, not answered yet

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Under the detail view only the help (its own r reruns what it shows); the engine's keys
        greyed once the run is over (no engine to act)."""
        if isinstance(self.app.screen, DetailScreen):
            return action == "help"
        if action in ENGINE_VERBS and self.over:
            return None
        return True

    def on_replied(self, message: Replied) -> None:
        what = " ".join([message.cmd, *message.args])
        # "waiting" is only worth a frame when the engine is slow to answer.
        timer = self._pending.pop(what, None)
        if timer is not None:
            timer.stop()
        self.say(replied(what, message.reply))
        if not message.reply.get("ok"):
            # The refusal quotes what was typed: shown as text, neither markup nor escapes.
            self.notify(terminal(message.reply.get("error", "")), title=terminal(f"{what} refused"),
                        severity="error", timeout=6, markup=False)

    def on_reported(self, message: Reported) -> None:
        self.say(reported(message.code, message.out, message.err))

    # ------------------------------------------------------------ what the panes post

    @on(FollowTable.Picked, "#windows")
    def _window_picked(self, message: FollowTable.Picked) -> None:
        self.sel.pick_window(self.state, message.key)
        self.render_all()

    @on(FollowTable.Picked, "#reps")
    def _row_picked(self, message: FollowTable.Picked) -> None:
        self.sel.pick_row(self.state, message.key)

    @on(FollowTable.Opened, "#windows")
    @on(FollowTable.Opened, "#reps")
    def _opened(self, message: FollowTable.Opened) -> None:
        """Enter on a window or a row (or a click on the one under the cursor): its detail."""
        self.open_detail(message.key)

    @on(Input.Changed, "#filter")
    def _filtered(self, message: Input.Changed) -> None:
        self.sel.filter = message.value
        self.render_all()

    @on(Input.Submitted, "#filter")
    def _filter_kept(self) -> None:
        self.ui.filter.display = False
        self.ui.windows.focus()

    @on(Input.Submitted, "#command")
    def _command_line(self, message: Input.Submitted) -> None:
        box = self.ui.command
        box.display, box.value = False, ""
        self.ui.windows.focus()
        try:
            self.run_line(parse(message.value))
        except CommandError as e:
            self.say([(f":{message.value.strip()}", "bold"), (str(e), "warning")])

    @on(FollowTable.HeaderClicked)
    def _header_clicked(self, message: FollowTable.HeaderClicked) -> None:
        """A click on a column's header sorts its table by it; again, the other way."""
        name = "reps" if message.table is self.ui.reps else "windows"
        self._sorted(sort_by(self.sel, name, message.column))

    # ------------------------------------------------------------ the verbs (keys, palette, : line)

    def run_line(self, cmd: Command) -> None:
        """A ``:`` command: what its key does, or what no key says (a row by its key, the report)."""
        name, args = cmd.name, cmd.args
        if name in ENGINE_VERBS and self.over:
            self.say([(f":{name}:", "bold"), ("the run is over: no engine to act", "warning")])
        elif name == "rerun":
            self.rerun(args[0]) if args else self.action_rerun()
        elif name in ("advance", "rewarm", "pause", "resume"):
            self.command(name, args) if args else self.window_command(name)
        elif name == "report":
            self.say([(":report", "bold"), ("writing the report…", "muted")])
            self.app.post_message(Report(args))
        elif name == "open":
            if args[0] in self.state.rows or args[0] in self.state.windows:
                self.open_detail(args[0])
            else:
                self.say([(":open", "bold"), (f"no row or window {args[0]!r}", "warning")])
        elif name == "filter":
            self.ui.filter.value = " ".join(args)  # its Changed message applies it
        elif name == "sort":
            self._sorted(sort_word(self.sel, self._sorting(), args[0]))
        elif name == "log":
            ws = self.state.windows.get(self.sel.shown or "")
            if ws and ws.log:
                self.page(ws.log)
        elif name == "abort":
            self.action_abort()
        elif name == "help":
            self.action_help()
        elif name == "quit":
            self.action_quit()

    def _sorting(self) -> str:
        """The table a sort acts on: the reps table when it has the keys, else the windows list."""
        return "reps" if self.focused is self.ui.reps else "windows"

    def _sorted(self, said: Said) -> None:
        self.say(said[0])
        if said[1]:
            self.render_all()

    def action_abort(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.command("abort")
            else:
                self.say([("abort cancelled: nothing sent", "muted")])

        self.app.push_screen(ConfirmAbort(self.state.runtime), answered)

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
        refused = rerun_refused(self.state, key)
        if refused:
            self.say(refused)
        else:
            self.command("rerun", [key])

    def action_pause(self) -> None:
        session = keyed_session(self.state, self.sel.shown)
        self.window_command("resume" if session_paused(self.state, session) else "pause")

    def action_search(self) -> None:
        """``/``: on the log, find a line; anywhere else, filter the windows list."""
        focused, ui = self.focused, self.ui
        box = ui.search if focused is not None and focused in (ui.log, ui.search) else ui.filter
        box.display = True
        box.focus()

    def action_command_line(self) -> None:
        self.ui.command.display = True
        self.ui.command.focus()

    def action_sort(self, key: str) -> None:
        self._sorted(sort_key(self.sel, self._sorting(), key))

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
        self.ui.logbox.retitle()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_sweep(self) -> None:
        sweep = picked_sweep(self.state, self.sel.shown)
        self.app.push_screen(SweepScreen(lambda: sweep_lines(self.state, self.rule, sweep), self.tags))

    def action_quit(self) -> None:
        self.app.exit()

    def action_live(self) -> None:
        """esc: close the command line, then clear the filter, then close the log search; else
        back to following the live window and row."""
        ui = self.ui
        if ui.command.display:
            ui.command.display, ui.command.value = False, ""
            ui.windows.focus()
        elif ui.filter.display or self.sel.filter:
            ui.filter.display, ui.filter.value = False, ""  # its Changed message shows every window
            ui.windows.focus()
        elif ui.logbox.close_search():
            ui.reps.focus()
        else:
            self.sel.live()
            self.render_all()

    def action_screenshot(self) -> None:
        path = self.app.save_screenshot(path=str(self.run_dir))
        self.say([("screenshot:", "bold"), (path, "success")])

    def window_command(self, cmd: str) -> None:
        """A command on a window: with sessions on places, the window under the cursor's session."""
        args = session_args(self.state, self.sel.shown)
        if args is None:
            self.say(which_session(self.state, cmd))
        else:
            self.command(cmd, args)

    def command(self, cmd: str, args: list[str] | None = None) -> None:
        what = " ".join([cmd, *(args or [])])
        self._pending[what] = self.set_timer(
            0.15, lambda: self.say([(what, "bold"), ("sent, waiting for the engine…", "muted")]))
        self.app.post_message(Send(cmd, list(args or [])))  # straight up: not behind a batch

    # ------------------------------------------------------------ the detail view and the pager

    def open_detail(self, key: str) -> None:
        self.app.push_screen(DetailScreen(key, lambda: self._detail(key), self.page, self.rerun,
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

