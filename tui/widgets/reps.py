"""The reps of the window shown (#right): a row per shape with its reps and figures
(tui.core.reps), its cursor on the live row unless the operator picked one, the chart under them;
its title says where a cell cut to fit is whole (a row's why is cut at any width)."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical

from tui.core.reps import REP_COLS, REP_COLUMNS, row_cells
from tui.core.sorting import sort_rows
from tui.core.windows import live_row, window_rows
from tui.widgets.chart import Chart
from tui.widgets.panels import retitle
from tui.widgets.tables import WHOLE, FollowTable
from tui.widgets.view import View, watched


class RepsPane(Vertical):
    view = watched()

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.table = FollowTable(REP_COLS, id="reps")
        self.chart = Chart(id="chart")
        self._view: View | None = None  # the last snapshot: the chart follows the cursor with it

    def compose(self) -> ComposeResult:
        yield self.table
        yield self.chart

    def on_mount(self) -> None:
        self.watch(self.table, "cut", lambda: self._retitle(), init=False)

    def watch_view(self, view: View | None) -> None:
        if view is None:
            return
        self._view, sel, table = view, view.sel, self.table
        rows = window_rows(view.state, sel.shown) if sel.shown else []
        reps = view.plan.reps
        waiting = view.state.reruns_waiting
        cells = [(r.key, [c[col] for col in REP_COLUMNS])
                 for r in rows for c in (row_cells(r, reps, view.leak, waiting.get(r.key, "")),)]
        table.sync(sort_rows(cells, REP_COLUMNS, sel.sorts.get("reps")), view.tags)
        if not sel.row_pinned:
            live = live_row(view.state, sel.shown)
            table.show_key(live.key if live else (rows[-1].key if rows else None))
        self._retitle()
        self.chart.draw(view, table.cursor_key())

    def _retitle(self) -> None:
        if self._view is None:
            return
        sel = self._view.sel
        title = f"reps · {sel.shown or '-'}"
        if sel.pinned:
            title += " (picked; esc: live)"
        sort = sel.sorts.get("reps")
        if sort:
            title += f" · by {sort.column} {'↓' if sort.descending else '↑'} (N: campaign order)"
        retitle(self, title + (f" · {WHOLE}" if self.table.cut else ""))

    @on(FollowTable.Picked, "#reps")
    def _row_picked(self) -> None:
        """The operator moved the cursor: the chart's figures are the row's under it (the message
        goes on up: the screen keeps the row picked)."""
        if self._view is not None:
            self.chart.draw(self._view, self.table.cursor_key())
