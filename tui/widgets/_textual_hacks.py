"""Every use of Textual's private API, in one place (as memray's live TUI keeps its own).

Each hack says what it works around and why the public API does not serve. All were checked against
textual 8.2 (the range pinned in pyproject.toml). Every private member they rely on is listed in
:data:`RELIES_ON`, and :func:`missing` detects each on the installed Textual
(tests/unit/tui/test_textual_hacks.py fails naming the one gone); after an upgrade the snapshot tests
(tests/unit/tui/test_app.py) say whether the hacks still draw the same.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.widgets import DataTable, Log


class ContentCachedCells(DataTable[Text]):
    """DataTable's cell rendering, cached by the cell's content rather than by the table's update
    counter: one landing rep used to re-render every cell of both tables through Rich (~1 ms a
    cell), the slowest frames under a log flood (bench/ui_bench.py).

    Private: ``_render_cell`` (the override point), ``_row_locations``, ``_column_locations``,
    ``_data`` (the cell behind a position), ``_show_hover_cursor`` and ``_pseudo_class_state``
    (state the rendering depends on, so part of the key), ``_clear_caches`` and
    ``_require_update_dimensions``.
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._rendered: dict[tuple[Any, ...], Any] = {}  # a cell's lines, keyed by what it shows

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> Any:
        if row_index < 0 or column_index < 0:  # the header row, row labels: DataTable's own cache
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        cell = self._data[row_key][column_key]  # type: ignore[index]  # a cell's position: both keys
        what = (cell.plain, tuple(cell.spans), cell.style) if isinstance(cell, Text) else str(cell)
        key = (row_index, column_index, what, base_style, width, cursor, hover,
               self._show_hover_cursor, self._pseudo_class_state, self.show_cursor)
        lines = self._rendered.get(key)
        if lines is None:
            if len(self._rendered) > 4096:  # old contents: a live table is a few dozen cells
                self._rendered.clear()
            lines = self._rendered[key] = super()._render_cell(
                row_index, column_index, base_style, width, cursor, hover)
        return lines

    def forget_rendered(self) -> None:
        """DataTable keys its render caches by an update counter, so every update leaves the old
        entries behind until 10,000 cells are cached: drop them (the live table is small)."""
        self._rendered.clear()
        self._clear_caches()

    def virtual_size_stale(self) -> None:
        """A column's width was set directly (``Column.content_width``: DataTable only widens
        columns, and on its next idle); have the table recompute its virtual width on the next
        idle. No public call does this without re-adding the columns."""
        self._require_update_dimensions = True


class OwnColumnWidths(ContentCachedCells):
    """A table that sets each column's width itself (``Column.content_width``, its cells cut to
    fit): DataTable measures every cell of every new row on its next idle to widen the columns,
    which found nothing to widen and took 0.07 s for the 800 rows of a day-long run's windows as
    the console attached. Rows are one line high (no ``height=None``) and have no labels, the two
    other things that pass looks at.

    Private: ``_update_dimensions`` (given no new rows: the virtual size is still recomputed).
    """

    def _update_dimensions(self, new_rows: Iterable[Any]) -> None:
        super()._update_dimensions(())


class NoLineMeasure(Log):
    """Log measures every new line's width in a thread worker (one per write) to size its
    horizontal scroll; a log that never scrolls sideways (long lines are cut, search finds them)
    skips it: at 10,000 lines/s that is a thread hop and 1,000 measurements a tick.

    Private: ``_update_size`` (overridden to do nothing).
    """

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]  # @work in Log
        return


class WheelBackHook(Log):
    """Scrolling back with the mouse wheel calls ``scrolled_back`` first (the keys have public
    actions to override; the wheel only has the private handler).

    Private: ``_on_mouse_scroll_up``.
    """

    def scrolled_back(self) -> None:
        """Called before the log scrolls up under the wheel."""

    def _on_mouse_scroll_up(self, event: Any) -> None:
        self.scrolled_back()
        super()._on_mouse_scroll_up(event)


# (class, private member, the parameters it is called or overridden with; None: an attribute).
# A dotted member is one of an attribute's. Attributes set in __init__ are looked up on an instance.
RELIES_ON: tuple[tuple[type[DataTable[Any]] | type[Log], str, tuple[str, ...] | None], ...] = (
    (DataTable, "_render_cell", ("row_index", "column_index", "base_style", "width", "cursor", "hover")),
    (DataTable, "_row_locations.get_key", ("value",)),
    (DataTable, "_column_locations.get_key", ("value",)),
    (DataTable, "_data", None),
    (DataTable, "_show_hover_cursor", None),
    (DataTable, "_pseudo_class_state", None),
    (DataTable, "_clear_caches", ()),
    (DataTable, "_require_update_dimensions", None),
    (DataTable, "_update_dimensions", ("new_rows",)),
    (Log, "_update_size", ("updates", "lines")),
    (Log, "_on_mouse_scroll_up", ("event",)),
)


def missing() -> list[str]:
    """Each member of :data:`RELIES_ON` the installed Textual lacks, or has with other parameters,
    as ``Class.member`` and what differs; empty when every hack still has what it relies on."""
    out = []
    instances: dict[type[Any], Any] = {}
    for cls, member, params in RELIES_ON:
        obj = instances.setdefault(cls, cls())
        name = f"{cls.__name__}.{member}"
        for part in member.split("."):
            if not hasattr(obj, part):
                out.append(f"{name}: no {part}")
                break
            obj = getattr(obj, part)
        else:
            if params is None:
                continue
            if not callable(obj):
                out.append(f"{name}: not callable")
                continue
            have = tuple(inspect.signature(obj).parameters)
            if have != params:
                out.append(f"{name}: parameters {have}, not {params}")
    return out
