"""The server's log pane: plain lines, bounded, highlighted by the adapter's classes, searchable."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Self

from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual.message import Message

from engine.sanitize import terminal
from tui.core.logview import overstruck
from tui.widgets._textual_hacks import NoLineMeasure, WheelBackHook


class _LogHighlighter(Highlighter):
    def __init__(self, log: BootLog) -> None:
        self.log = log

    def highlight(self, text: Text) -> None:
        tag = self.log.classify(text.plain)
        if tag:
            text.stylize(self.log.tags.get(tag, Style()))
        term = self.log.term
        if term:
            match = self.log.tags.get("match", Style(reverse=True))
            text.highlight_words([term], match, case_sensitive=False)


class BootLog(NoLineMeasure, WheelBackHook):
    """The server's log: plain lines, bounded, boot facts and errors highlighted, searchable.

    ``auto_scroll`` is the follow switch: while on, every write and every resize shows the tail;
    scrolling back (keys or wheel) turns it off, as reading old lines should not be yanked away.
    """

    class FollowChanged(Message):
        pass

    def __init__(self, classify: Callable[[str], str], max_lines: int, **kw: Any) -> None:
        super().__init__(highlight=True, max_lines=max_lines, auto_scroll=True, **kw)
        self.classify = classify
        self.tags: dict[str, Style] = {}
        self.term = ""
        self.match: int | None = None
        self.highlighter = _LogHighlighter(self)

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> Self:
        # A server's line is shown as a terminal shows it (a progress bar's CRs write over it)
        # and never acted on: Log would keep ESC (an OSC retitles the terminal's pane) and split
        # at a CR (a forged line of its own).
        return super().write_lines((terminal(overstruck(line)) for line in lines), scroll_end)

    def follow_tail(self) -> None:
        if self.auto_scroll:
            # Now, from the size already known: the lazy scroll_end waits a refresh, a frame of
            # latency per batch. Forced, as it does nothing while the widget is not laid out.
            self.scroll_end(animate=False, immediate=True, force=True, x_axis=False)

    def set_follow(self, on: bool) -> None:
        if on != self.auto_scroll:
            self.auto_scroll = on
            self.post_message(self.FollowChanged())
        if on:
            self.match = None
            self.follow_tail()

    def on_resize(self) -> None:
        self.follow_tail()

    def action_scroll_up(self) -> None:
        self.set_follow(False)
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.set_follow(False)
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.set_follow(False)
        super().action_scroll_home()

    def scrolled_back(self) -> None:
        self.set_follow(False)

    def find(self, term: str) -> int | None:
        """The next older line holding ``term`` (wrapping around); scrolls to it."""
        if term != self.term:
            self.term, self.match = term, None
        lines = self.lines
        if not term or not lines:
            self.refresh()
            return None
        needle = term.lower()
        start = (self.match if self.match is not None else len(lines)) - 1
        n = len(lines)
        for i in range(n):
            y = (start - i) % n
            if needle in lines[y].lower():
                self.set_follow(False)  # the operator is reading: stop following
                self.match = y
                self.scroll_to(y=max(0, y - self.size.height // 2), animate=False)
                self.refresh()
                return y
        self.match = None
        self.refresh()
        return None
