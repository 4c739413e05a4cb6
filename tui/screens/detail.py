"""The detail view: everything about one window or row (``tui.core.detail``), whole and wrapped to
the screen's width, over the console; it follows the journal while it is open."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.core.detail import Detail
from tui.screens.dialogs import HelpScreen
from tui.widgets.panels import Panel
from tui.widgets.text import to_text


class DetailScreen(Screen[None]):
    """``make`` gives the detail as it stands now (None: its window or row is gone); ``page`` opens a
    log, relative to the run directory, in the pager; ``rerun`` asks the engine to measure the
    window's or row's void and failed rows again, while the run is not ``over``."""

    BINDINGS = [
        Binding("escape", "close", "back"),
        Binding("q", "close", "back", show=False),
        Binding("l", "log", "log in $PAGER"),
        Binding("c", "copy", "copy the server command"),
        Binding("r", "rerun", "rerun"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(self, key: str, make: Callable[[], Detail | None], page: Callable[[str], None],
                 rerun: Callable[[str], None], over: Callable[[], bool], tags: dict[str, Style],
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.key, self.make, self.page, self.rerun, self.tags = key, make, page, rerun, tags
        self.over = over
        self.detail: Detail | None = None
        # Held: the run screen may redraw the detail before it is composed.
        self.head, self.body = Panel(id="detail-head"), Static(id="detail-body")

    def compose(self) -> ComposeResult:
        yield self.head
        with VerticalScroll(id="detail-scroll"):
            yield self.body
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.update()
        self.query_one("#detail-scroll").focus()  # the arrow and page keys scroll it

    def update(self) -> None:
        """Draw the detail as it stands now (the app calls it as the journal grows)."""
        d = self.make()
        if d is not None and d == self.detail:
            return
        self.detail = d
        head, body = self.head, self.body
        if d is None:
            head.set(Text(f"{self.key}: not in the journal", style="bold"))
            body.update("")
            return
        head.set(to_text([(d.title, "bold"), ("·", "muted"), ("esc back", "muted")], self.tags))
        text = Text()
        for i, line in enumerate(d.lines):
            if i:
                text.append("\n")
            text.append_text(to_text(line, self.tags))
        text.no_wrap, text.overflow = False, "fold"  # whole, wrapped: nothing cut short
        body.update(text)

    def action_close(self) -> None:
        self.dismiss()

    def action_log(self) -> None:
        if self.detail is not None and self.detail.log:
            self.page(self.detail.log)
        else:
            self.notify("no boot log yet", severity="warning")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "rerun" and self.over() else True  # no engine: greyed

    def action_rerun(self) -> None:
        self.rerun(self.key)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_copy(self) -> None:
        command = self.detail.command if self.detail else None
        if command:
            self.app.copy_to_clipboard(command)
            self.notify("the server command is on the clipboard (OSC 52)", timeout=3)
        else:
            self.notify("no server command recorded", severity="warning")
