"""The console's tables: a DataTable updated cell by cell, showing the columns that fit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets.data_table import ColumnKey

from tui.core.columns import Col, fit_columns
from tui.core.fmt import Seg
from tui.widgets._textual_hacks import OwnColumnWidths
from tui.widgets.text import to_text


class FollowTable(OwnColumnWidths):
    """A DataTable updated in place by row key (only changed cells are touched, as dolphie does),
    showing the columns that fit its width (:func:`tui.core.columns.fit_columns`): dropped by rank, a long
    one cut with an ellipsis, never one over another.

    Cursor moves made by the operator post :class:`Picked`; moves the app makes to follow the
    campaign do not, so "the operator chose this row" is never confused with "the live row moved".
    """

    class Picked(Message):
        def __init__(self, table: FollowTable, key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> FollowTable:
            return self.table

    def __init__(self, columns: Sequence[Col], **kw: Any) -> None:
        # No cell padding: a trailing space per cell instead, so 80 columns hold five of them.
        super().__init__(cursor_type="row", cell_padding=0, **kw)
        self._spec = list(columns)
        self._columns = [c.name for c in columns]
        self._cells: dict[str, list[tuple[Seg, ...]]] = {}  # every column's, shown or not
        self._widths: dict[str, list[int]] = {}  # row key -> each cell's full width
        self._shown: dict[str, int] = {c: len(c) + 1 for c in self._columns}  # name -> width
        self._styles: dict[str, Style] = {}
        # Rows of _cells not in the DataTable yet (sync adds them once the columns are chosen):
        # each cell's text at its full width.
        self._fresh: dict[str, list[Text]] = {}

    def on_mount(self) -> None:
        self.reset()

    @property
    def keys(self) -> list[str]:
        return list(self._cells)

    @property
    def shown(self) -> list[str]:
        return list(self._shown)

    def plain_row(self, key: str) -> list[str]:
        """A row's text in every column, shown or not (what a narrow screen leaves out included)."""
        return [to_text(c, self._styles, end=" ").plain for c in self._cells[key]]

    def reset(self) -> None:
        # Columns too: DataTable.clear() keeps their widths, so an empty table would carry the
        # widths of whatever window was shown before.
        self._cells.clear()
        self._widths.clear()
        self._fresh.clear()
        self._rebuild()

    def _rebuild(self) -> None:
        at = self.cursor_key()  # clear() puts the cursor back on the first row
        self.clear(columns=True)
        for col in self._shown:
            self.add_column(col + " ", key=col)
        for key in self._cells:
            self._add(key)
        self._set_widths()
        self.forget_rendered()
        self.show_key(at)

    def _add(self, key: str) -> None:
        texts = self._fresh.pop(key, None) or [to_text(c, self._styles) for c in self._cells[key]]
        self.add_row(*(self._cut(col, texts[i]) for i, col in enumerate(self._columns)
                       if col in self._shown), key=key)

    def _text(self, col: str, segs: Sequence[Seg]) -> Text:
        return self._cut(col, to_text(segs, self._styles))

    def _cut(self, col: str, text: Text) -> Text:
        """A cell as shown (``text`` itself): cut to its column's width, with the space that parts
        it from the next."""
        room = self._shown.get(col, 0) - 1
        if text.cell_len > room:
            text.truncate(max(room, 1), overflow="ellipsis")
        text.append(" ")
        return text

    def _natural(self) -> dict[str, int]:
        """Each column's width at its widest cell; 0 for one with nothing to say (every cell empty
        or "-": no speculation, no SLO), which is then not shown unless it is always shown."""
        out = {}
        for i, c in enumerate(self._spec):
            widest = max((w[i] for w in self._widths.values()), default=0)
            out[c.name] = max(len(c.name) + 1, widest) if widest or c.rank == 0 else 0
        return out

    def sync(self, rows: Sequence[tuple[str, list[list[Seg]]]], styles: dict[str, Style]) -> None:
        """Make the table show ``rows`` (key, cells in column order), touching only what changed:
        ``rows`` taken with their widths and the changed cells of rows already shown updated;
        then, when something changed, the columns chosen and the new rows added. Added once the
        columns are chosen with their widths, a table filled at once (800 windows as the console
        attaches) has each cell made and cut once, not added, then added again as the columns
        its widths bring rebuild the table."""
        self._styles = styles
        want = [k for k, _ in rows]
        if want[: len(self._cells)] != list(self._cells):
            self.reset()  # rows went away or moved: rare (a rebuilt journal), so just start over
        changed = False
        for key, cells in rows:
            frozen = [tuple(c) for c in cells]
            old = self._cells.get(key)
            changed = changed or old != frozen
            self._cells[key] = frozen
            if old is None:
                self._fresh[key] = texts = [to_text(c, styles) for c in frozen]
                self._widths[key] = [_width(t) for t in texts]
            else:
                for i, (col, before, after) in enumerate(zip(self._columns, old, frozen, strict=True)):
                    if before != after:
                        text = to_text(after, styles)
                        self._widths[key][i] = _width(text)
                        if col in self._shown:
                            self.update_cell(key, col, self._cut(col, text))
        if not changed:
            return
        self.refit()
        for key in list(self._fresh):
            self._add(key)
        self.forget_rendered()

    def refit(self) -> None:
        """Choose the columns for the width the table has now (on a resize too)."""
        room = self.size.width - 1
        if room <= 0:  # not laid out yet; a vertical scrollbar may take one
            return
        shown = fit_columns(self._spec, self._natural(), room)
        if list(shown) != list(self._shown):
            self._shown = shown
            self._rebuild()
        elif shown != self._shown:
            cut = [c for c in shown if shown[c] != self._shown[c]]
            self._shown = shown
            for key, cells in self._cells.items():
                if key in self._fresh:  # not in the DataTable yet: sync adds it cut to fit
                    continue
                for col in cut:
                    self.update_cell(key, col, self._text(col, cells[self._columns.index(col)]))
            self._set_widths()
            self.forget_rendered()
        else:
            self._set_widths()

    def on_resize(self) -> None:
        self.refit()

    def _set_widths(self) -> None:
        """Each shown column exactly its chosen width. DataTable only widens columns, and on its
        next idle: widths then depended on what had been on screen before, and when the table
        found itself idle (the flaky snapshots)."""
        for col, want in self._shown.items():
            column = self.columns[ColumnKey(col)]
            if column.content_width != want:
                column.content_width = want
                self.virtual_size_stale()

    def cursor_key(self) -> str | None:
        keys = self.keys
        return keys[self.cursor_row] if 0 <= self.cursor_row < len(keys) else None

    def show_key(self, key: str | None) -> None:
        """Move the cursor to ``key`` (the app following the campaign: no Picked)."""
        if key in self._cells and self.cursor_key() != key:
            self.move_cursor(row=self.keys.index(key), animate=False)

    def _picked(self) -> None:
        key = self.cursor_key()
        if key is not None:
            self.post_message(self.Picked(self, key))

    def on_click(self, event: events.Click) -> None:
        """A click on a row picks it as the keys do (DataTable moves the cursor after this, and
        a click on the row under the cursor selects it: its detail)."""
        row = event.style.meta.get("row")
        keys = self.keys
        if isinstance(row, int) and 0 <= row < len(keys):
            self.post_message(self.Picked(self, keys[row]))

    # The operator's own moves: DataTable's cursor actions, then say so.
    def action_cursor_up(self) -> None:
        super().action_cursor_up()
        self._picked()

    def action_cursor_down(self) -> None:
        super().action_cursor_down()
        self._picked()

    def action_page_up(self) -> None:
        super().action_page_up()
        self._picked()

    def action_page_down(self) -> None:
        super().action_page_down()
        self._picked()

    def action_scroll_top(self) -> None:
        super().action_scroll_top()
        self._picked()

    def action_scroll_bottom(self) -> None:
        super().action_scroll_bottom()
        self._picked()

    def action_select_cursor(self) -> None:
        super().action_select_cursor()
        self._picked()


def _width(cell: Text) -> int:
    """A cell's width with the space after it; 0 for an empty one ("-": no value)."""
    return 0 if cell.plain.strip() in ("", "-") else cell.cell_len + 1
