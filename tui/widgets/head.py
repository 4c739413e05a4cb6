"""The header (#head): where the campaign stands, the engine link and the shape in flight; a line
per place when sessions run on places (tui.core.header)."""

from __future__ import annotations

from tui.core.header import header_lines
from tui.widgets.panels import Panel
from tui.widgets.text import to_text
from tui.widgets.view import View, watched


class Head(Panel):
    view = watched()

    def watch_view(self, view: View | None) -> None:
        if view is None:
            return
        link = (view.link.connected, view.link.detail) if view.link else None
        lines = header_lines(view.state, view.plan, view.sel.shown, link, view.now, view.engine_gone,
                             view.reading)
        if self.styles.height is None or self.styles.height.value != len(lines):
            self.styles.height = len(lines)  # a line per place when sessions run on places
        text = to_text(lines[0], view.tags)
        for line in lines[1:]:
            text.append("\n")
            text.append_text(to_text(line, view.tags))
        self.set(text)
