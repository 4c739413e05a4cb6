"""The windows list (#windows): a row per window of the campaign, those the filter keeps, in the
order a sort asks for (tui.core.listing); its cursor on the window shown; its title says where a
cell cut to fit is whole."""

from __future__ import annotations

from typing import Any

from tui.core.listing import Listed
from tui.core.windows import WINDOW_COLS
from tui.widgets.panels import retitle
from tui.widgets.tables import WHOLE, FollowTable
from tui.widgets.view import View, watched


class WindowsList(FollowTable):
    view = watched()

    def __init__(self, **kw: Any) -> None:
        super().__init__(WINDOW_COLS, **kw)
        self._listed: Listed | None = None  # the list last drawn: the same again is nothing new
        self._view: View | None = None  # the last snapshot: the title follows the columns' fit

    def watch_view(self, view: View | None) -> None:
        if view is None:
            return
        self._view = view
        shown, sel = view.windows, view.sel
        if shown is not self._listed or view.tags is not self._styles:
            self._listed = shown
            self.sync(shown.rows, view.tags)
        self.show_key(sel.shown)
        self._retitle()

    def watch_cut(self) -> None:
        self._retitle()

    def _retitle(self) -> None:
        if self._view is None:
            return
        shown, sel = self._view.windows, self._view.sel
        title = "windows"
        if sel.filter:
            title += f" · /{sel.filter} ({len(shown.rows)} of {shown.total}; esc clears)"
        sort = sel.sorts.get("windows")
        if sort:
            title += f" · by {sort.column} {'↓' if sort.descending else '↑'} (N: campaign order)"
        retitle(self, title + (f" · {WHOLE}" if self.cut else ""))
