"""The chart under the reps (#chart): the window's reps as bars from zero, the row under the reps
cursor in figures, and the window's deltas against its control as bars (tui.core.versus)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical

from tui.core.fmt import Seg, fmt_tok
from tui.core.reps import rep_series, window_series
from tui.core.versus import bars_lines
from tui.widgets.panels import Panel, RepBars
from tui.widgets.text import to_text
from tui.widgets.view import View


class Chart(Horizontal):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.label, self.spark, self.bars = Panel(id="spark-label"), RepBars(id="spark"), Panel(id="bars")

    def compose(self) -> ComposeResult:
        with Vertical(id="sparkbox"):
            yield self.label
            yield self.spark
        yield self.bars

    def draw(self, view: View, row_key: str | None) -> None:
        """The shown window's chart, with the figures of ``row_key``'s reps."""
        # The window's reps in landing order, bars from zero: a leak is a stub among full bars.
        series = window_series(view.state, view.sel.shown)
        self.spark.data = series  # reassigned, never mutated
        label: list[Seg] = [("reps vs their shape's median", "muted")]
        if series:
            label += [(f"{len(series)} reps, lowest {min(series):.0%}", "")]
        row = view.state.rows.get(row_key or "")
        if row and row.reps:
            label += [("·", "muted"), (f"{row.cls} {row.load}:", "bold"),
                      (" ".join(fmt_tok(v) for v in rep_series(row)), "")]
        self.label.set(to_text(label, view.tags))
        bars = bars_lines(view.state, view.sel.shown, view.rule, width=8)
        self.bars.set(Text("\n").join(to_text(line, view.tags, sep="") for line in bars))
