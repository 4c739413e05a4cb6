"""The end of the run (#banner): shown once it is over, its outcome and what to type next
(tui.core.ending)."""

from __future__ import annotations

from rich.text import Text

from engine.commands.invocation import ruler_command
from tui.core.ending import earlier_run, next_commands, outcome
from tui.core.header import look_segs
from tui.widgets.panels import Panel
from tui.widgets.text import to_text
from tui.widgets.view import View, watched


class Banner(Panel):
    view = watched()

    def watch_view(self, view: View | None) -> None:
        if view is None:
            return
        self.display = view.over
        if not view.over:
            return
        st = view.state
        other = earlier_run(view.run_dir, st.campaign)
        lines = [[outcome(st, view.engine_gone, view.now), *look_segs(st)[1:]],
                 next_commands(st, view.run_dir, ruler_command(), other)]
        text = Text("\n").join(to_text(line, view.tags) for line in lines)
        text.no_wrap = False  # whole, on as many lines as it takes: what to type next
        self.set(text)
