"""The status line (#status): the last thing the console said (a command's answer, a refusal, the
engine lost or back). A pane with something to say posts :class:`Said`; the screen says it."""

from __future__ import annotations

from typing import Any

from rich.style import Style
from textual.message import Message

from tui.core.fmt import Seg
from tui.widgets.panels import Panel
from tui.widgets.text import to_text
from tui.widgets.view import View, watched


class Said(Message):
    """What a pane has to tell the operator, for the status line."""

    def __init__(self, segs: list[Seg]) -> None:
        super().__init__()
        self.segs = segs


class StatusLine(Panel):
    view = watched()

    def __init__(self, said: list[Seg], **kw: Any) -> None:
        super().__init__(**kw)
        self.said = said

    def say(self, segs: list[Seg], tags: dict[str, Style]) -> None:
        self.said = segs
        self.set(to_text(segs, tags))

    def watch_view(self, view: View | None) -> None:
        if view is not None:
            self.set(to_text(self.said, view.tags))
