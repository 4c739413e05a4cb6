"""The windows list as shown: each window's cells (its name with the live mark, status, delta and
its interval, notes, axis), the windows the filter keeps, in the order a sort asks for."""

from __future__ import annotations

from dataclasses import dataclass

from engine.method.verdict import Rule
from engine.record.state import RunState
from engine.words import UP_WINDOWS
from tui.core.sorting import Row, Sort, filter_rows, sort_rows
from tui.core.versus import delta_cells
from tui.core.windows import WINDOW_COLUMNS, window_notes, window_status


@dataclass(frozen=True)
class Listed:
    rows: list[Row]  # the windows shown, in their order
    total: int  # the windows of the run, shown or not

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self.rows]


def window_cells(state: RunState, rule: Rule) -> list[Row]:
    """Every window's row, in the campaign's order."""
    rows = []
    for key in state.order:
        ws = state.windows[key]
        # Every window up now: one per place when sessions run on places.
        mark = "▶ " if key == state.current or ws.status in UP_WINDOWS else "  "
        delta, ci = delta_cells(state, key, rule)
        rows.append((key, [[(f"{mark}{ws.session} {ws.window}", "bold" if mark.strip() else "")],
                           [window_status(state, key)], [delta], [ci],
                           window_notes(state, key), [(ws.axis, "muted")]]))
    return rows


def listed(state: RunState, rule: Rule, query: str, sort: Sort | None) -> Listed:
    rows = window_cells(state, rule)
    return Listed(sort_rows(filter_rows(rows, query), WINDOW_COLUMNS, sort), len(rows))
