"""The boot facts of the window shown (#facts), marked where they differ from its session's control's
(tui.core.facts)."""

from __future__ import annotations

from tui.core.facts import facts_lines
from tui.widgets.panels import Panel, retitle
from tui.widgets.text import lines_text
from tui.widgets.view import View, watched


class Facts(Panel):
    view = watched()

    def watch_view(self, view: View | None) -> None:
        if view is None:
            return
        retitle(self, f"boot facts · {view.sel.shown or '-'}")
        self.set(lines_text(facts_lines(view.state, view.sel.shown), view.tags))
