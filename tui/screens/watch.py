"""A run directory followed and drawn: the run screen's (tui.screens.run) first half, the one
that needs no operator.

It folds the journal batches the App's follower reads (engine.record.fold.apply, the one way state
is derived), keeps what the operator looks at (tui.core.selection) and, after each change, hands
each pane one snapshot of both (tui.widgets.view.View): the panes draw themselves (memray's live
TUI: a thread reads, the screen snapshots, each pane watches its view).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Input

from engine.method.verdict import Rule
from engine.record.fold import apply
from engine.record.journal import Event
from engine.record.state import RunState
from engine.servers import get_adapter
from engine.words import RunStatus
from tui.core.ending import ended, is_over
from tui.core.fmt import Seg, steered
from tui.core.follow import Follower, Link, engine_pid, pid_alive
from tui.core.logview import LineClassifier, ServingView
from tui.core.operator import attached
from tui.core.rules import LeakRule, leak_rule, verdict_rule
from tui.core.selection import LogWatch, Selection
from tui.screens.detail import DetailScreen
from tui.screens.messages import CaughtUp, Followed, Linked
from tui.widgets.banner import Banner
from tui.widgets.command import CommandBox
from tui.widgets.facts import Facts
from tui.widgets.head import Head
from tui.widgets.log import BootLog
from tui.widgets.logbox import LogBox
from tui.widgets.reps import RepsPane
from tui.widgets.status import Said, StatusLine
from tui.widgets.tables import FollowTable
from tui.widgets.text import tag_styles
from tui.widgets.view import View
from tui.widgets.windows import WindowsList

HISTORY = 1000  # events in one batch that say the journal's history is being read
JUDGE_AFTER = 1.0  # seconds after the first frame by which the calls are judged (WatchScreen.judged)


@dataclass
class Panes:
    """The screen's widgets, held: a screen on top must not hide them from the handlers."""

    head: Head
    filter: Input
    windows: WindowsList
    right: RepsPane
    logbox: LogBox
    facts: Facts
    banner: Banner
    command: CommandBox
    status: StatusLine

    @property
    def reps(self) -> FollowTable:
        return self.right.table

    @property
    def log(self) -> BootLog:
        return self.logbox.bootlog

    @property
    def search(self) -> Input:
        return self.logbox.search


class WatchScreen(Screen[None]):
    """``clock`` gives the wall time for elapsed/remaining (tests freeze it)."""

    def __init__(self, run_dir: Path, follower: Follower, *, clock: Callable[[], float],
                 max_log_lines: int) -> None:
        super().__init__()
        self.run_dir, self.follower, self.clock = run_dir, follower, clock
        # The snapshot read before the first frame: that frame shows the run, where an empty one
        # was drawn while the follower read it, then drawn again.
        preloaded = follower.preload()
        self.state = preloaded or RunState()
        # The events folded so far while the journal's history is read (None: read to its end):
        # the header says so, and the panes wait for its end (each batch of a long history
        # judged again took seconds a batch on a day-long run).
        self.reading: int | None = None if preloaded else 0
        self.sel, self.logw = Selection(), LogWatch()
        self.link: Link | None = None
        self.caught_up = False  # the journal and the shown log were read to their end
        # The run's calls judged (its deltas and each window's call, engine.record.judgement): not
        # before the first screen is up and read to its end, or JUDGE_AFTER seconds after it at
        # the latest (a log too busy to reach its end): a day-long run's first judgement, scipy
        # imported, takes half a second. The panes say "…" for them until then.
        self.judged = False
        self.engine_gone = False  # the probe found no engine and no process: it will not answer
        self.classify = LineClassifier()
        self._adapter_name = ""  # the server whose patterns self.classify uses
        self.tags = tag_styles({})  # the theme's colours once mounted
        self._adapt()
        self._was_over = False
        self.ui = Panes(
            Head(id="head"),
            Input(id="filter", placeholder="filter the windows: words of a name, status, axis or "
                                           "note (!word: without it); enter keeps it, esc clears"),
            WindowsList(id="windows"), RepsPane(id="right"),
            LogBox(self.classify, max_log_lines, id="logbox"), Facts(id="facts"),
            Banner(id="banner"), CommandBox(lambda: [*self.state.order, *self.state.rows], id="command"),
            StatusLine([("attaching to " + str(run_dir), "muted")], id="status"))

    def compose(self) -> ComposeResult:
        ui = self.ui
        yield ui.head
        yield ui.filter
        # The windows list above the reps of the window picked, each the screen's whole width: side
        # by side, a window's row and another window's reps read as one line.
        yield ui.windows
        yield ui.right
        with Horizontal(id="bottom"):
            yield ui.logbox
            yield ui.facts
        yield ui.banner  # the end of the run: its outcome and what to type next
        yield ui.command
        yield ui.status
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.tags = tag_styles(self.app.theme_variables)
        self.ui.filter.display = self.ui.command.display = False
        self.ui.windows.border_title = "windows"
        self.ui.windows.focus()  # arrows pick a window at once; enter opens its reps
        self.render_all()
        self.set_interval(1.0, self._render_head)
        self.set_timer(JUDGE_AFTER, self._judge)

    @property
    def leak(self) -> LeakRule:
        return leak_rule(self.state)

    @property
    def rule(self) -> Rule:
        """The Δ column's calls: the run's own verdict rule, as run_started recorded it."""
        return verdict_rule(self.state)

    @property
    def over(self) -> bool:
        """Nothing the console sends can act any more: the run ended, or its engine is gone."""
        return is_over(self.state, self.engine_gone, self.reading is not None)

    def say(self, segs: list[Seg]) -> None:
        self.ui.status.say(segs, self.tags)

    def on_said(self, message: Said) -> None:
        self.say(message.segs)

    # ------------------------------------------------------------ drawing

    def snapshot(self) -> View:
        return View(self.state, self.sel, self.logw, self.leak, self.rule if self.judged else None,
                    self.link, self.engine_gone, self.run_dir, self.clock(), self.tags, self.reading)

    def render_all(self) -> None:
        """Every pane from one snapshot, in the order each one's selection needs."""
        self.sel.follow(self.state)
        view, ui = self.snapshot(), self.ui
        self._render_end(view)
        ui.head.view = view
        keys = view.windows.keys
        if keys and self.sel.shown not in keys:  # filtered out: the first window left is shown
            self.sel.pick_window(self.state, keys[0])
        ui.windows.view = view
        if self.sel.new_reps():
            ui.reps.reset()
        ui.right.view = view
        ui.facts.view = view
        self._watch_log()
        ui.logbox.view = view
        ui.status.view = view
        if isinstance(self.app.screen, DetailScreen):
            self.app.screen.update()

    def _render_head(self) -> None:
        self.ui.head.view = self.snapshot()

    def _render_end(self, view: View) -> None:
        """The banner once the run is over, the keys that no longer act greyed, said once."""
        if view.over != self._was_over:
            self._was_over = view.over
            self.app.refresh_bindings()
            if view.over and self.caught_up:  # it ended while the console watched
                self.say(ended())
        self.ui.banner.view = view

    def _watch_log(self) -> None:
        """Have the follower read the shown window's log, raw or through the serving view."""
        self._adapt()
        adapter = self.classify.adapter
        wanted = self.logw.wants(self.state, self.sel.shown, adapter is not None)
        if wanted is not None:
            rel, serving = wanted
            self.logw.gen = self.follower.watch_log(
                rel, ServingView(adapter) if serving and adapter is not None else None)
            self.ui.logbox.restart()
            self.caught_up = False


    # ------------------------------------------------------------ what the App hands over

    def on_followed(self, message: Followed) -> None:
        b = message.batch
        # Following starts (from the snapshot: already shown when preloaded), or starts over.
        new_base = b.base is not None and b.base is not self.state
        if b.base is not None:
            self.state = b.base
        self.state.damage += b.damage  # lines that are not events; apply() adds seq anomalies
        self._apply(zip(b.lines, b.events, strict=True))
        self._adapt()
        # A long history being read: a batch of many events that is not the journal's end (a live
        # run journals a few events a second; a batch is at most 0.1 s of them).
        behind = not b.caught_up and len(b.events) >= HISTORY
        with self.app.batch_update():
            if behind:
                self.reading = self.state.last_seq
                self.say([("attaching:", "bold"), (f"{self.state.last_seq:,} journal events read, "
                                                   "more to read", "muted")])
                self._render_head()
            elif b.events or b.damage or new_base or self.reading is not None:
                self.reading = None
                self.render_all()
            if b.log_gen == self.logw.gen:
                if b.log_view != self.logw.view:
                    self.logw.view = b.log_view
                    self.ui.logbox.retitle()
                self.ui.logbox.write(b)
        was = self.caught_up
        self.caught_up = b.caught_up and b.log_gen == self.logw.gen
        if self.caught_up and not was:
            self.post_message(CaughtUp())
            if self.ui.status.said[0][0].startswith("attaching"):
                self.say(attached(self.state, self.over))
            if not self.judged:
                self.call_after_refresh(self._judge)  # once that screen is drawn
        self.follower.ack()

    def _judge(self) -> None:
        if not self.judged:
            self.judged = True
            self.render_all()

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
        was, link = self.link, message.link
        self.link = link
        if was is not None and was.connected and not link.connected \
                and self.state.status == RunStatus.RUNNING:
            self.say([("engine disconnected:", "error"), (link.detail, "")])
        elif was is not None and not was.connected and link.connected:
            self.say([("engine connected again:", "success"), (link.detail, "")])
        # Gone, not just slow to answer: the console has nothing left to steer.
        self.engine_gone = not link.connected and not pid_alive(engine_pid(self.run_dir, self.state.pid))
        view = self.snapshot()
        self.ui.head.view = view
        self._render_end(view)
