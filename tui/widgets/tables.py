"""The console's tables: every row held as segments, only the rows on screen drawn, showing the
columns that fit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip

from engine.sanitize import terminal
from tui.core.columns import Col, fit_columns
from tui.core.fmt import Seg
from tui.widgets.text import to_text

Cells = tuple[tuple[Seg, ...], ...]  # a row's cells, each its segments, in column order
# What a pane's title says while a cell of its table is cut: where the cell is whole.
WHOLE = "… cut: enter shows it whole"


class _TableMessage(Message):
    """A message a FollowTable posts: its ``control`` is the table (``@on(..., "#id")``)."""

    def __init__(self, table: FollowTable) -> None:
        super().__init__()
        self.table = table

    @property
    def control(self) -> FollowTable:
        return self.table


class _RowMessage(_TableMessage):
    """A message about one of the table's rows, by its key."""

    def __init__(self, table: FollowTable, key: str) -> None:
        super().__init__(table)
        self.key = key


class FollowTable(ScrollView, can_focus=True):
    """A table virtualised as the day-long run needs it: its rows are kept as segments (the cells
    tui.core gives), and a row becomes text and a line on screen only while it is on screen.
    Textual's DataTable builds every row it is given (a Row, its cells' renderables, measured on
    its next idle) and lays the screen out again as they change: on a day-long run's 800 windows
    a key cost tens of ms (bench/key_bench.py). It looks as DataTable does (its component
    classes and their styles, a row cursor, a fixed header).

    It shows the columns that fit its width (:func:`tui.core.columns.fit_columns`): dropped by rank,
    a long one cut with an ellipsis, never one over another. Where a cell is cut or a column with
    something to say left out, :attr:`cut` is true: its pane says where it is whole (:data:`WHOLE`).

    Cursor moves made by the operator post :class:`Picked`; moves the app makes to follow the
    campaign do not, so "the operator chose this row" is never confused with "the live row moved".
    Enter, or a click on the row under the cursor, posts :class:`Opened`; a click on a column's
    header, :class:`HeaderClicked`.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("ctrl+home,home", "scroll_top", "Top", show=False),
        Binding("ctrl+end,end", "scroll_bottom", "Bottom", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "datatable--cursor", "datatable--hover", "datatable--header", "datatable--header-hover"}

    # DataTable's, for the classes a row cursor without fixed rows, labels or stripes uses.
    DEFAULT_CSS = """
    FollowTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;

        &:focus {
            background-tint: $foreground 5%;
            & > .datatable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .datatable--header {
                background-tint: $foreground 5%;
            }
        }
        & > .datatable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .datatable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .datatable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .datatable--header-hover {
            background: $accent 30%;
        }
        & > .datatable--hover {
            background: $block-hover-background;
        }
    }
    """

    cut = var(False)  # a cell is cut, or a column with something to say left out

    class Picked(_RowMessage):
        """The operator moved the cursor onto a row."""

    class Opened(_RowMessage):
        """Enter on a row, or a click on the row under the cursor: its detail."""

    class HeaderClicked(_TableMessage):
        def __init__(self, table: FollowTable, column: str) -> None:
            super().__init__(table)
            self.column = column

    def __init__(self, columns: Sequence[Col], **kw: Any) -> None:
        super().__init__(**kw)
        self._spec = list(columns)
        self._columns = [c.name for c in columns]
        self._order: list[str] = []  # the row keys, in order
        self._index: dict[str, int] = {}
        self._cells: dict[str, Cells] = {}  # every column's, shown or not
        self._widths: dict[str, list[int]] = {}  # row key -> each cell's full width
        # No cell padding: a trailing space per cell instead, so 80 columns hold five of them.
        self._shown: dict[str, int] = {c: len(c) + 1 for c in self._columns}  # name -> width
        self._styles: dict[str, Style] = {}
        self._lines: dict[tuple[Any, ...], Strip] = {}  # a row's line, by what it shows
        self.cursor_row = 0
        self._hover: int | None = None  # the row under the mouse (-1: the header)

    # ------------------------------------------------------------ what the panes and tests read

    @property
    def keys(self) -> list[str]:
        return list(self._order)

    @property
    def shown(self) -> list[str]:
        return list(self._shown)

    @property
    def row_count(self) -> int:
        return len(self._order)

    def plain_row(self, key: str) -> list[str]:
        """A row's text in every column, shown or not (what a narrow screen leaves out included)."""
        return [to_text(c, self._styles, end=" ").plain for c in self._cells[key]]

    def get_cell(self, key: str, column: str) -> Text:
        """A cell as shown (cut to its column, the space after it), or whole where not shown."""
        text = to_text(self._cells[key][self._columns.index(column)], self._styles)
        return self._cut(column, text) if column in self._shown else text

    def cursor_key(self) -> str | None:
        return self._order[self.cursor_row] if 0 <= self.cursor_row < len(self._order) else None

    # ------------------------------------------------------------ filling it

    def reset(self) -> None:
        """Empty, for another window's rows: drawn once they come (:meth:`sync`), so that a window
        with as many rows as the last one needs no new layout of the screen."""
        self._order.clear()
        self._index.clear()
        self._cells.clear()
        self._widths.clear()
        self.cursor_row = 0
        self.cut = False
        self.refresh()

    def sync(self, rows: Sequence[tuple[str, list[list[Seg]]]], styles: dict[str, Style]) -> None:
        """Make the table show ``rows`` (key, cells in column order). Each row is kept as its
        segments and its cells' widths; a line is drawn only for the rows on screen, again only
        where what it shows changed."""
        if styles is not self._styles:
            self._styles = styles
            self._lines.clear()
        at = self.cursor_key()
        order = [k for k, _ in rows]
        moved = order != self._order
        if moved:
            self._order = order
            self._index = {k: i for i, k in enumerate(order)}
            for gone in set(self._cells) - set(self._index):
                del self._cells[gone], self._widths[gone]
        changed = moved
        for key, cells in rows:
            frozen = tuple(tuple(c) for c in cells)
            if self._cells.get(key) != frozen:
                self._cells[key] = frozen
                self._widths[key] = [_width(c) for c in frozen]
                changed = True
        if not changed:
            return
        if moved:  # the cursor stays on its row where the row stays
            self.cursor_row = self._index.get(at, 0) if at is not None else 0
            self.cursor_row = min(self.cursor_row, max(0, len(order) - 1))
        self.refit()
        self._changed()

    def refit(self) -> None:
        """Choose the columns for the width the table has now (on a resize too)."""
        room = self.size.width - 1
        if room <= 0:  # not laid out yet; a vertical scrollbar may take one
            return
        natural = self._natural()
        shown = fit_columns(self._spec, natural, room)
        self.cut = any(natural[c] > shown.get(c, 0) for c in self._columns)
        if shown != self._shown:
            self._shown = shown
            self._lines.clear()
            self._changed()

    def _natural(self) -> dict[str, int]:
        """Each column's width at its widest cell; 0 for one with nothing to say (every cell empty
        or "-": no speculation, no SLO), which is then not shown unless it is always shown."""
        out = {}
        for i, c in enumerate(self._spec):
            widest = max((w[i] for w in self._widths.values()), default=0)
            out[c.name] = max(len(c.name) + 1, widest) if widest or c.rank == 0 else 0
        return out

    def _changed(self) -> None:
        # As tall as its rows and the header; as wide as nothing: the columns fit the width the
        # layout gives (refit), and a width of their own would lay the screen out again whenever
        # another window's cells are wider.
        size = Size(0, len(self._order) + 1)
        if self.virtual_size != size:
            self.virtual_size = size
        self.refresh()

    def on_resize(self) -> None:
        self.refit()
        self.call_after_refresh(self._cursor_into_view)

    # ------------------------------------------------------------ drawing the rows on screen

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.clear()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            return self._line(-1, width)
        row = y - 1 + int(self.scroll_y)
        if row >= len(self._order):
            return Strip.blank(width, self.rich_style)
        return self._line(row, width)

    def _line(self, row: int, width: int) -> Strip:
        """Row ``row``'s line (-1: the header), as DataTable draws a row under a row cursor."""
        key = self._order[row] if row >= 0 else None
        cursor = row >= 0 and row == self.cursor_row
        hover = self._hover == row
        base = self.rich_style
        what = (key, self._cells.get(key) if key else None, cursor, hover, width, base,
                self.get_pseudo_class_state(), row)
        found = self._lines.get(what)
        if found is not None:
            return found
        header = row < 0
        row_style = self.get_component_rich_style("datatable--header") if header else base
        component = Style()
        if hover:
            component += self.get_component_rich_style("datatable--hover")
            if header:
                component += self.get_component_rich_style("datatable--header-hover")
        if cursor:
            component += self.get_component_rich_style("datatable--cursor")
        post = Style.from_color(color=component.color)  # the cursor's colour over the cells'
        segments: list[Segment] = []
        for i, (col, w) in enumerate((c, w) for c, w in self._shown.items()):
            if header:
                text = Text(col + " ")
            else:
                assert key is not None
                text = self._cut(col, to_text(self._cells[key][self._columns.index(col)], self._styles))
            pre = row_style + component + Style.from_meta({"row": row, "column": i})
            cell = Strip(list(text.render(self.app.console))).adjust_cell_length(w)
            segments += Segment.apply_style(cell, pre, post)
        rest = max(0, width - sum(self._shown.values()))
        segments.append(Segment(" " * rest, row_style + component + Style.from_meta(
            {"row": row, "column": 0, "out_of_bounds": True})))
        strip = Strip(segments).crop(0, width).adjust_cell_length(width, base).simplify()
        if len(self._lines) > 2048:  # old contents: a screen holds a few dozen lines
            self._lines.clear()
        self._lines[what] = strip
        return strip

    def _cut(self, col: str, text: Text) -> Text:
        """A cell as shown (``text`` itself): cut to its column's width, with the space that parts
        it from the next."""
        room = self._shown.get(col, 0) - 1
        if text.cell_len > room:
            text.truncate(max(room, 1), overflow="ellipsis")
        text.append(" ")
        return text

    def _refresh_row(self, row: int | None) -> None:
        if row is None:
            return
        y = 0 if row < 0 else row + 1 - int(self.scroll_y)
        if 0 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    # ------------------------------------------------------------ the cursor

    def move_cursor(self, row: int) -> None:
        row = max(0, min(row, len(self._order) - 1))
        if row != self.cursor_row:
            before, self.cursor_row = self.cursor_row, row
            self._refresh_row(before)
            self._refresh_row(row)
        self._cursor_into_view()

    def _cursor_into_view(self) -> None:
        """The cursor's row on screen, below the header."""
        rows = self.scrollable_content_region.height - 1  # the header's line is not for rows
        if rows <= 0:
            return
        top = int(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + rows:
            self.scroll_to(y=self.cursor_row - rows + 1, animate=False, immediate=True)

    def show_key(self, key: str | None) -> None:
        """Move the cursor to ``key`` (the app following the campaign: no Picked)."""
        if key in self._index and self.cursor_key() != key:
            self.move_cursor(self._index[key])

    def _picked(self) -> None:
        key = self.cursor_key()
        if key is not None:
            self.post_message(self.Picked(self, key))

    def _keyed(self, row: int) -> None:
        """The operator's own move: the mouse's row no longer marked, the row picked."""
        self._unhover()
        before = self.cursor_row
        self.move_cursor(row)
        if self.cursor_row != before:
            self._picked()

    def action_cursor_up(self) -> None:
        self._keyed(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self._keyed(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self._keyed(self.cursor_row - max(1, self.scrollable_content_region.height - 1))

    def action_page_down(self) -> None:
        self._keyed(self.cursor_row + max(1, self.scrollable_content_region.height - 1))

    def action_scroll_top(self) -> None:
        self._keyed(0)

    def action_scroll_bottom(self) -> None:
        self._keyed(len(self._order) - 1)

    def action_select_cursor(self) -> None:
        self._unhover()
        key = self.cursor_key()
        if key is not None:
            self.post_message(self.Picked(self, key))
            self.post_message(self.Opened(self, key))

    # ------------------------------------------------------------ the mouse

    def _unhover(self) -> None:
        before, self._hover = self._hover, None
        self._refresh_row(before)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        row = event.style.meta.get("row")
        row = row if isinstance(row, int) and row < len(self._order) else None
        if row != self._hover:
            before, self._hover = self._hover, row
            self._refresh_row(before)
            self._refresh_row(row)

    def on_leave(self) -> None:
        self._unhover()

    def on_click(self, event: events.Click) -> None:
        """A click on a column's header sorts by it; on a row, picks it as the keys do; on the row
        under the cursor, opens it."""
        meta = event.style.meta
        row, column = meta.get("row"), meta.get("column")
        if not isinstance(row, int):
            return
        event.stop()
        if row < 0:
            if isinstance(column, int) and 0 <= column < len(self._shown):
                self.post_message(self.HeaderClicked(self, list(self._shown)[column]))
        elif row < len(self._order):
            key = self._order[row]
            self.post_message(self.Picked(self, key))
            if row == self.cursor_row:
                self.post_message(self.Opened(self, key))
            self.move_cursor(row)


def _width(cell: Sequence[Seg]) -> int:
    """A cell's width with the space after it; 0 for an empty one ("-": no value)."""
    plain = " ".join(terminal(t) for t, _ in cell)
    return 0 if plain.strip() in ("", "-") else cell_len(plain) + 1
