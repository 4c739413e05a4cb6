"""The windows list as shown: each window's cells (its name with the live mark, status, delta and
its interval, the window's call, notes, axis), the windows the filter keeps, in the order a sort asks for."""

from __future__ import annotations

from dataclasses import dataclass

from engine.method.verdict import Rule
from engine.record.state import RunState
from engine.words import CONTROL, UP_WINDOWS, is_control
from tui.core.fmt import Seg
from tui.core.sorting import Row, Sort, filter_rows, sort_rows
from tui.core.versus import delta_cells, window_call
from tui.core.windows import WINDOW_COLUMNS, window_notes, window_status


@dataclass(frozen=True)
class Listed:
    rows: list[Row]  # the windows shown, in their order
    total: int  # the windows of the run, shown or not

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self.rows]


JUDGING: Seg = ("…", "muted")  # a window's delta and call before the run is judged


def window_cells(state: RunState, rule: Rule | None) -> list[Row]:
    """Every window's row, in the campaign's order; without its delta and call while ``rule`` is
    None (not judged yet)."""
    rows = []
    for key in state.order:
        ws = state.windows[key]
        # Every window up now: one per place when sessions run on places.
        mark = "▶ " if key == state.current or ws.status in UP_WINDOWS else "  "
        if rule is None:
            delta, ci = (("ctl", "muted"), ("", "")) if ws.window == CONTROL else (JUDGING, ("", ""))
            call = ("", "") if is_control(ws.window) else JUDGING
        else:
            (delta, ci), call = delta_cells(state, key, rule), window_call(state, key, rule)
        rows.append((key, [[(f"{mark}{ws.session} {ws.window}", "bold" if mark.strip() else "")],
                           [window_status(state, key)], [delta], [ci], [call],
                           window_notes(state, key), [(ws.axis, "muted")]]))
    return rows


class Cells:
    """Every window's row, made again only when the fold changed (its last seq, or its size for a
    state built by hand): a key moves a cursor, and a day-long run's 800 windows cost tens of ms
    to make."""

    def __init__(self) -> None:
        self._state: RunState | None = None
        self._key: tuple[object, ...] = ()
        self._rows: list[Row] = []

    def __call__(self, state: RunState, rule: Rule | None) -> list[Row]:
        key = (state.last_seq, len(state.rows), len(state.windows), state.current, rule)
        if self._state is not state or self._key != key:
            self._rows = window_cells(state, rule)
            self._state, self._key = state, key
        return self._rows


cells = Cells()


_last: tuple[list[Row], str, Sort | None, Listed] | None = None


def listed(state: RunState, rule: Rule | None, query: str, sort: Sort | None) -> Listed:
    """The windows shown; the same object again while nothing it is made of changed (the list
    then has nothing to draw)."""
    global _last
    rows = cells(state, rule)
    if _last is not None and _last[0] is rows and _last[1:3] == (query, sort):
        return _last[3]
    out = Listed(sort_rows(filter_rows(rows, query), WINDOW_COLUMNS, sort), len(rows))
    _last = (rows, query, sort, out)
    return out
