"""The server's log of the window shown (#logbox): the log (tui.widgets.log), its search box and its
title: which log, raw or the serving view (what it folded), following or not, the word searched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input

from tui.core.follow import Batch
from tui.widgets.log import BootLog
from tui.widgets.panels import retitle
from tui.widgets.status import Said
from tui.widgets.view import View, watched


class LogBox(Vertical):
    view = watched()

    def __init__(self, classify: Callable[[str], str], max_lines: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.bootlog = BootLog(classify, max_lines, id="log")
        self.search = Input(id="search", placeholder="search the log: enter = next older match, "
                                                     "esc = close")
        self._view: View | None = None  # the last snapshot: the title follows the log's own changes

    def compose(self) -> ComposeResult:
        yield self.bootlog
        yield self.search

    def on_mount(self) -> None:
        self.search.display = False

    def watch_view(self, view: View | None) -> None:
        if view is not None:
            self._view = view
            self.bootlog.tags = view.tags
            self.retitle()

    def retitle(self) -> None:
        if self._view is None:
            return
        log, logw = self.bootlog, self._view.logw
        follow = "following" if log.auto_scroll else "follow off (f)"
        rel = logw.rel
        name = Path(rel).name if rel else ""
        where = (self._view.sel.shown or "-") + ("" if name in ("", "boot.log") else f" {name}")
        # What changes and matters first: a narrow pane cuts the title's end.
        view, what, mode = logw.view, "boot log", ""
        if not rel:
            where += " (no log yet)"
        elif logw.raw:
            what, mode = "log", " · raw (v: serving view)"
        elif view is not None and view.ready:
            what, mode = "log", f" · serving view, {view.folded:,} lines folded (v: raw)"
        search = f" · /{log.term}" if log.term else ""
        retitle(self, f"{what} {where} · {follow}{search}{mode}")

    def restart(self) -> None:
        """Another log is watched: shown from its first line."""
        self.bootlog.clear()
        self.bootlog.match = None

    def write(self, batch: Batch) -> None:
        """A batch's lines of the log watched."""
        log = self.bootlog
        if batch.log_clear:
            log.clear()
        lines = batch.log
        if batch.log_dropped:
            lines = [f"[ruler: {batch.log_dropped:,} lines not shown: the log outran the screen; "
                     f"they are in the file]", *lines]
        if lines:
            log.write_lines(lines, scroll_end=False)
            log.follow_tail()

    def close_search(self) -> bool:
        """Close the search box, its match no longer marked; False when it was not open."""
        if not self.search.display:
            return False
        self.search.display = False
        self.bootlog.term, self.bootlog.match = "", None
        self.bootlog.refresh()
        self.retitle()
        return True

    @on(Input.Submitted, "#search")
    def _find(self, message: Input.Submitted) -> None:
        log, term = self.bootlog, message.value
        y = log.find(term)
        if y is None:
            said = [(f"/{term}:", "bold"), (f"no match in the {log.line_count} lines held", "warning")]
        else:
            said = [(f"/{term}:", "bold"), (f"line {y + 1} of {log.line_count}", "")]
        self.post_message(Said(said))
        self.retitle()

    def on_boot_log_follow_changed(self) -> None:
        self.retitle()
