"""What the operator looks at (tui.core.selection), on the recorded runs, without a screen."""

from __future__ import annotations

from engine.record.fold import fold
from engine.record.journal import read_events
from tests.paths import FIXTURES
from tui.core.selection import LogWatch, Selection

JOURNALS = FIXTURES / "journals"


def test_a_picked_window_stays_and_esc_follows_the_live_one_again() -> None:
    st = fold(read_events(JOURNALS / "measuring/journal.jsonl"))
    sel = Selection()
    sel.follow(st)
    assert (sel.shown, sel.pinned) == ("s2-control", False)
    sel.pick_window(st, "s1-ctx")  # a window of a session that is over: picked, it stays
    assert sel.pinned
    sel.follow(st)
    assert sel.shown == "s1-ctx"
    sel.pick_window(st, "s2-control")  # the live one: following again
    assert not sel.pinned
    sel.pick_window(st, "s1-ctx")
    sel.live()
    sel.follow(st)
    assert (sel.shown, sel.pinned) == ("s2-control", False)


def test_a_picked_window_that_is_gone_gives_way_to_the_live_one() -> None:
    st = fold(read_events(JOURNALS / "measuring/journal.jsonl"))
    sel = Selection(shown="s9-nothing", pinned=True)
    sel.follow(st)
    assert (sel.shown, sel.pinned) == ("s2-control", False)


def test_the_reps_start_over_once_per_window_and_a_picked_row_is_kept_until_then() -> None:
    st = fold(read_events(JOURNALS / "measuring/journal.jsonl"))
    sel = Selection()
    sel.follow(st)
    assert sel.new_reps() and not sel.new_reps()
    live = "s2-control/code/c1"  # the row in flight
    sel.pick_row(st, live)
    assert not sel.row_pinned
    sel.pick_row(st, "s2-control/prose/c2")
    assert sel.row_pinned and not sel.new_reps()
    sel.pick_window(st, "s1-ctx")
    assert sel.new_reps() and not sel.row_pinned


def test_the_log_is_watched_again_only_when_the_window_or_the_view_changes() -> None:
    st = fold(read_events(JOURNALS / "measuring/journal.jsonl"))
    w = LogWatch()
    assert w.wants(st, "s2-control", True) == ("windows/s2-control/boot.log", True)
    assert w.wants(st, "s2-control", True) is None
    w.raw = True
    assert w.wants(st, "s2-control", True) == ("windows/s2-control/boot.log", False)
    assert w.wants(st, "s1-ctx", True) == (st.windows["s1-ctx"].log, False)
    assert w.wants(st, "s9-nothing", True) == (None, False)
