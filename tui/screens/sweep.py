"""The sweep view (key ``t``): the trade table of the sweep under the cursor, redrawn every
second from the console's state while the sweep runs (tui.core.sweep)."""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from tui.core.fmt import Seg
from tui.widgets.panels import Panel
from tui.widgets.text import lines_text


class SweepScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("t", "dismiss", "close"),
                Binding("q", "dismiss", "close")]

    def __init__(self, lines: Callable[[], list[Seg]], styles: dict[str, Style]) -> None:
        super().__init__()
        self.lines, self.tags = lines, styles

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog") as dialog:
            dialog.border_title = "sweep: each value against the control"
            dialog.border_subtitle = "↑ ↓ scroll · esc close"
            yield Panel(id="sweep")

    def on_mount(self) -> None:
        self._draw()
        self.set_interval(1.0, self._draw)

    def _draw(self) -> None:
        self.query_one("#sweep", Panel).set(lines_text(self.lines(), self.tags))
