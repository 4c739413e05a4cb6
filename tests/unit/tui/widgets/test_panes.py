"""Each pane of the run screen draws itself from the snapshot it is handed (tui.widgets.view.View),
with no screen around it and nothing but the snapshot to go by: a pane is built and tested alone."""

from __future__ import annotations

from pathlib import Path

from textual.app import App, ComposeResult

from engine.record.fold import fold
from engine.record.journal import read_events
from tests.paths import FIXTURES
from tests.unit.tui.recorded import last_ts, recorded
from tui.core.follow import Link
from tui.core.rules import DECLARED, DEFAULT_RULE
from tui.core.selection import LogWatch, Selection
from tui.widgets.banner import Banner
from tui.widgets.facts import Facts
from tui.widgets.head import Head
from tui.widgets.reps import RepsPane
from tui.widgets.text import tag_styles
from tui.widgets.view import View
from tui.widgets.windows import WindowsList


class Panes(App[None]):
    def compose(self) -> ComposeResult:
        yield Head()
        yield WindowsList()
        yield RepsPane()
        yield Facts()
        yield Banner()


async def test_each_pane_draws_the_snapshot_it_is_handed(tmp_path: Path) -> None:
    run = recorded("finished", tmp_path)
    state = fold(read_events(run / "journal.jsonl"))
    sel = Selection()
    sel.follow(state)
    assert sel.shown == "s2-control"
    view = View(state, sel, LogWatch(), DECLARED, DEFAULT_RULE, Link(False, "recorded"), False, run,
                last_ts(run) + 5, tag_styles({}))
    app = Panes()
    async with app.run_test(size=(120, 40)) as pilot:
        head, windows, reps = app.query_one(Head), app.query_one(WindowsList), app.query_one(RepsPane)
        facts, banner = app.query_one(Facts), app.query_one(Banner)
        assert windows.keys == [] and not head.text.plain  # nothing drawn before a snapshot
        for pane in (head, windows, reps, facts, banner):
            pane.view = view
        await pilot.pause()
        assert head.text.plain.startswith(state.campaign) and "engine exited" in head.text.plain
        assert windows.keys == state.order and windows.cursor_key() == "s2-control"
        assert reps.border_title == "reps · s2-control" and reps.table.keys
        assert facts.border_title == "boot facts · s2-control"
        assert banner.display and f"report {run}" in banner.text.plain
        sel.filter = "ctx"  # a new snapshot: the list is the filter's, the rest unchanged
        windows.view = View(state, sel, LogWatch(), DECLARED, DEFAULT_RULE, None, False, run, 0.0,
                            tag_styles({}))
        assert windows.keys == ["s1-ctx"] and "/ctx (1 of 4; esc clears)" in str(windows.border_title)


async def test_the_banner_says_the_last_look_of_boots_added_until_decided(tmp_path: Path) -> None:
    state = fold(read_events(FIXTURES / "fold" / "every-kind.jsonl"))  # ends aborted, after a look
    sel = Selection()
    sel.follow(state)
    view = View(state, sel, LogWatch(), DECLARED, DEFAULT_RULE, None, False, tmp_path,
                state.finished_ts or 0.0, tag_styles({}))
    app = Panes()
    async with app.run_test(size=(120, 40)) as pilot:
        banner = app.query_one(Banner)
        banner.view = view
        await pilot.pause()
        first = banner.text.plain.splitlines()[0]
        assert first.startswith("■ campaign stopped by the operator")
        assert first.endswith("look 1: 1 undecided, booted again: w")
