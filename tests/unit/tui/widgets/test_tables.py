"""The console's table (tui.widgets.tables.FollowTable) on a day-long run's 800 windows: only the
rows on screen are made into text, the cursor moves over all of them, and the screen is not laid
out again when the cursor moves or another window's as many rows come."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from textual.app import App, ComposeResult

from tui.core.fmt import Seg
from tui.core.windows import WINDOW_COLS
from tui.widgets.tables import FollowTable
from tui.widgets.text import tag_styles, to_text


def rows(n: int, note: str = "") -> list[tuple[str, list[list[Seg]]]]:
    return [(f"s{i}-w", [[(f"s{i} w", "bold")], [("done", "success")], [("+1.0%", "")],
                         [("[+0,+2]", "muted")], [("no observable effect", "")],
                         [(note or "greedy 8/8", "")], [("a flag", "muted")]])
            for i in range(n)]


class OneTable(App[None]):
    CSS = "FollowTable { height: 12; }"

    def compose(self) -> ComposeResult:
        yield FollowTable(WINDOW_COLS, id="t")


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many cells were made into text, counted as the table asks for them."""
    count = [0]

    def counted(segs: Iterable[Seg], *a: Any, **kw: Any) -> Any:
        count[0] += 1
        return to_text(segs, *a, **kw)

    monkeypatch.setattr("tui.widgets.tables.to_text", counted)
    return count


async def test_only_the_rows_on_screen_are_made_into_text(made: list[int]) -> None:
    app = OneTable()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(FollowTable)
        table.sync(rows(800), tag_styles({}))
        await pilot.pause()
        on_screen = table.size.height - 1  # the header's line
        assert table.row_count == 800 and on_screen == 11
        cells = len(table.shown)
        assert 0 < made[0] <= on_screen * cells, made[0]
        table.focus()
        await pilot.press("pagedown")
        await pilot.pause()
        assert table.cursor_key() == f"s{on_screen}-w"  # a page down, as DataTable moves
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_key() == "s799-w" and int(table.scroll_y) == 800 - on_screen
        assert made[0] <= 3 * on_screen * cells, made[0]  # three screens' rows, of 800
        assert table.plain_row("s400-w")[0] == "s400 w "  # a row off screen, read whole


async def test_a_cursor_move_or_as_many_rows_again_lays_nothing_out() -> None:
    """A layout of the screen cost a day-long run's key tens of ms: the table asks for one only
    when its height may change (another count of rows)."""
    app = OneTable()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(FollowTable)
        table.sync(rows(800), tag_styles({}))
        await pilot.pause()
        laid: list[str] = []
        real = table.refresh

        def refresh(*a: Any, layout: bool = False, **kw: Any) -> Any:
            if layout:
                laid.append("layout")
            return real(*a, layout=layout, **kw)

        table.refresh = refresh  # type: ignore[method-assign]  # counted
        table.focus()
        await pilot.press("up", "down", "pagedown")
        table.reset()
        table.sync(rows(800, "another window's"), tag_styles({}))
        await pilot.pause()
        assert laid == []
        table.sync(rows(3), tag_styles({}))
        await pilot.pause()
        assert laid  # fewer rows: the table is shorter
