"""Text in a fixed box, the reps' bars from zero, and a box's title set only when it changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widget import Widget


class Panel(Widget):
    """Text in a box whose size CSS fixes. Unlike Static.update, setting new text only repaints
    this widget, never re-lays out the screen, and the same text again costs nothing: the header
    and panels change at every journal batch while a log floods."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._text = Text()

    @property
    def text(self) -> Text:
        return self._text

    def set(self, text: Text) -> None:
        if text != self._text:
            self._text = text
            self.refresh()

    def render(self) -> Text:
        return self._text


class RepBars(Widget):
    """Tok/s per rep as bars from zero: a bar's height is its share of the largest rep.

    Textual's Sparkline stretches min..max over the full height, so 1.78 against 1.81 tok/s draws
    as an empty bar beside a full one: a leak where there is none. From zero, a leaked rep (135
    against 700) is a stub and two equal reps are two equal bars. Newest reps on the right; as
    many as fit.
    """

    BLOCKS = " ▁▂▃▄▅▆▇█"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._data: tuple[float, ...] = ()

    @property
    def data(self) -> tuple[float, ...]:
        return self._data

    @data.setter
    def data(self, values: Sequence[float]) -> None:
        if tuple(values) != self._data:
            self._data = tuple(values)
            self.refresh()

    def render(self) -> Text:
        width, height = max(self.size.width, 1), max(self.size.height, 1)
        values = self._data[-width:]
        top = max(values, default=0.0)
        levels = [round(v / top * 8 * height) if top > 0 else 0 for v in values]
        lines = []
        for row in range(height - 1, -1, -1):  # top line first
            cells = [self.BLOCKS[min(max(n - row * 8, 0), 8)] for n in levels]
            lines.append("".join(cells))
        return Text("\n".join(lines), style="bold")


def retitle(widget: Widget, title: str) -> None:
    if widget.border_title != title:  # a border title repaints the whole box
        widget.border_title = title
