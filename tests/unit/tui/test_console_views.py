"""The console's views past the main screen, as a k9s user reaches them: the detail view (enter),
the filtered and sorted windows list (/, the sort keys, a header's click), the : command line, the
mouse, the palette, and the end of a run. Each key and mouse action under Textual's pilot, on the
recorded runs with a real control socket (tests/unit/tui/recorded.py); snapshots at 80x24, 120x40
and 200x50."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import Input

from engine.record.journal import read_events
from tests.console import screen_text, settled, table_text, type_in, until
from tests.unit.tui.recorded import StandIn, append, last_ts, recorded, stable
from tui.app import RulerConsole
from tui.core.detail import pager_argv, server_command
from tui.core.follow import Link
from tui.screens.detail import DetailScreen

SIZES = [(80, 24), (120, 40), (200, 50)]
IDS = [f"{w}x{h}" for w, h in SIZES]


@pytest.fixture
def measuring(tmp_path: Path):
    run = recorded("measuring", tmp_path)
    engine = StandIn(run)
    yield run, engine
    engine.close()


def frozen(run: Path, connected: bool = True, **kw: Any) -> RulerConsole:
    """The console with its clock 5 s after the last event and its engine link fixed."""
    link, now = Link(connected, "recorded"), last_ts(run) + 5
    return RulerConsole(run, clock=lambda: now, probe=lambda *_: link, **kw)


def detail_text(app: RulerConsole) -> str:
    assert isinstance(app.screen, DetailScreen) and app.screen.detail is not None
    return "\n".join(" ".join(t for t, _ in line if t) for line in app.screen.detail.lines)


# ------------------------------------------------------------------ the detail view


async def test_enter_on_a_window_opens_everything_about_it(tmp_path: Path) -> None:
    """What the windows list cuts short, whole: the reason, the delta per shape with its interval
    and how it was formed, the verdicts, the boot-fact diff, the server command, the receipts."""
    run = recorded("finished", tmp_path)
    paged: list[list[str]] = []
    # The pager: the headless driver cannot hand the terminal over, so the command is recorded.
    app = frozen(run, connected=False, pager=paged.append)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("up")  # from s2 control: s1 ctx
        await until(pilot, lambda: app.main.sel.shown == "s1-ctx")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        text = detail_text(app)
        ws = app.main.state.windows["s1-ctx"]
        for part in ("window s1-ctx · 1 void", "axis: context 4096", "Delta against the control s1-control",
                     "headline: +7.4 % undetermined",
                     "log tok/s, the window's boot against 1 control boot",
                     "noise between boots: not measured: nothing booted twice in one session",
                     "≠ ctx.n_ctx 4096 (control 2048)", "knobs: acts · 2/2 knobs act",
                     "code c2 VOID 7.2 tok/s attempt 2", "windows/s1-ctx/boot.log"):
            assert part in text, part
        command = server_command(ws)
        assert command and command.split()[:3] == [ws.plan["argv"][0], "-m", ws.plan["argv"][2]]
        assert command in text and "-c 4096" in command
        await pilot.press("c")
        await until(pilot, lambda: app.clipboard == command)
        await pilot.press("l")  # the boot log: s1-ctx has none in the recording
        await until(pilot, lambda: "windows/s1-ctx/boot.log is not there" in app.main.ui.status.said[1][0])
        assert paged == []
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, DetailScreen))
        await pilot.press("down")  # s2 control: its boot log is in the recording
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        await pilot.press("l")
        await until(pilot, lambda: bool(paged))
        assert paged == [pager_argv(run / "windows/s2-control/boot.log", os.environ)]


def test_the_pager_is_pagers_words_or_less() -> None:
    assert pager_argv(Path("/r/boot.log"), {"PAGER": "less -R +G"}) == ["less", "-R", "+G", "/r/boot.log"]
    assert pager_argv(Path("/r/boot.log"), {}) == ["less", "/r/boot.log"]


async def test_enter_on_a_row_opens_its_reps_attempts_and_interval(measuring) -> None:
    run, engine = measuring
    app = RulerConsole(run, probe_interval=0.3)
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await pilot.press("tab", "up")  # the reps: one above the live row, prose c2 (void)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        text = detail_text(app)
        for part in ("row s2-control/prose/c2 · VOID · attempt 2", "why: spread 140.7% > 10% at C2",
                     "attempt 1 3 reps void, rerun:", "attempt 2 3 reps void: the row's figures",
                     "a2 rep 3", "Against the control", "no delta: this row is void",
                     "a1 rep 1: windows/s2-control/reps/prose-c2-1-1.jsonl"):
            assert part in text, part
        # While it is open, the detail follows the journal: the control's next rep shows.
        await pilot.press("escape")
        await pilot.press("down")  # the live row, code c1
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen) and "a1 rep 2" in detail_text(app))
        assert "a1 rep 3" not in detail_text(app)
        append(run, [{"kind": "rep_done", "session": "s2", "window": "control", "class": "code",
                      "concurrency": 1, "attempt": 1, "rep": 3, "agg_tok_s": 17.156,
                      "per_user_tok_s": 17.156, "file": "windows/s2-control/reps/code-c1-1-3.jsonl"}])
        await until(pilot, lambda: "a1 rep 3 17.2" in detail_text(app))
        # r in the detail of a void row reruns it; the window keys are not the detail's.
        await pilot.press("escape", "up", "enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                    and app.screen.key == "s2-control/prose/c2")
        assert app.main.check_action("advance", ()) is False
        await pilot.press("r")
        await until(pilot, lambda: engine.got[-1:] == [("rerun", ["s2-control/prose/c2"])])


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_of_a_windows_detail(size: tuple[int, int], tmp_path: Path, snap_compare,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = stable("finished", tmp_path, monkeypatch)

    async def open_it(pilot: Pilot[Any]) -> None:
        await settled(pilot)
        app = pilot.app
        assert isinstance(app, RulerConsole)
        app.main.open_detail("s1-ctx")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        await settled(pilot)

    assert snap_compare(frozen(run, connected=False), terminal_size=size, run_before=open_it)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_of_a_rows_detail(size: tuple[int, int], tmp_path: Path, snap_compare,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    run = stable("measuring", tmp_path, monkeypatch)

    async def open_it(pilot: Pilot[Any]) -> None:
        await settled(pilot)
        await pilot.press("tab", "up", "enter")
        await until(pilot, lambda: isinstance(pilot.app.screen, DetailScreen))
        await settled(pilot)

    assert snap_compare(frozen(run), terminal_size=size, run_before=open_it)


# ------------------------------------------------------------------ filter, sort, the command line


async def test_slash_filters_the_windows_and_esc_shows_them_all(tmp_path: Path) -> None:
    app = frozen(recorded("finished", tmp_path), connected=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await type_in(pilot, "slash", "void", "enter")
        await until(pilot, lambda: [r[0].strip() for r in table_text(app, "#windows")] == [
            "s1 control", "s1 ctx", "s2 control"])
        assert app.focused is app.main.ui.windows and "/void (3 of 4; esc clears)" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: len(table_text(app, "#windows")) == 4)
        await type_in(pilot, "slash", "!void")  # without: the rejected window only, as typed
        await until(pilot, lambda: [r[0].strip() for r in table_text(app, "#windows")] == ["s2 qv8"])
        assert app.main.sel.shown == "s2-qv8"  # the window shown was filtered out: the first left
        await pilot.press("escape")
        await until(pilot, lambda: len(table_text(app, "#windows")) == 4)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_of_the_filtered_list(size: tuple[int, int], tmp_path: Path, snap_compare,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    async def filtered(pilot: Pilot[Any]) -> None:
        await settled(pilot)
        await type_in(pilot, "slash", "ctl", "enter")
        await settled(pilot)

    assert snap_compare(frozen(stable("finished", tmp_path, monkeypatch), connected=False),
                        terminal_size=size, run_before=filtered)


async def test_the_sort_keys_and_a_header_click_order_the_tables(tmp_path: Path) -> None:
    app = frozen(recorded("finished", tmp_path), connected=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)

        def windows() -> list[str]:
            return [r[0].strip() for r in table_text(app, "#windows")]

        def reps() -> list[str]:
            return [r[0].strip() for r in table_text(app, "#reps")]

        await pilot.press("S")  # status: figures first ("1 void" < "2 void"), then words
        await until(pilot, lambda: windows() == ["s1 ctx", "s1 control", "s2 control", "s2 qv8"])
        await pilot.press("S")  # again: the other way (equal ones keep their order)
        await until(pilot, lambda: windows() == ["s1 control", "s2 control", "s1 ctx", "s2 qv8"])
        await pilot.press("N")
        await until(pilot, lambda: windows() == ["s1 control", "s1 ctx", "s2 control", "s2 qv8"])
        await pilot.press("D")  # the delta: the one window with a figure first
        await until(pilot, lambda: app.main.sel.sorts.get("windows") is not None
                    and app.main.sel.sorts["windows"].column == "Δ ctl" and windows()[0] == "s1 ctx")
        await pilot.press("N")
        await until(pilot, lambda: windows() == ["s1 control", "s1 ctx", "s2 control", "s2 qv8"])
        await pilot.press("tab", "T")  # the reps by median tok/s
        await until(pilot, lambda: reps() == ["prose c1", "prose c2", "code c1", "code c2"])
        await pilot.press("T")
        await until(pilot, lambda: reps() == ["code c2", "code c1", "prose c2", "prose c1"])
        await pilot.press("P")  # spread
        await until(pilot, lambda: reps() == ["prose c1", "code c2", "code c1", "prose c2"])
        assert "by spread ↑" in screen_text(app)
        # A click on a header sorts by its column: the windows' delta.
        header = app.main.ui.windows.content_region
        x = screen_text(app).splitlines()[header.y].index("Δ ctl")
        await pilot.click(offset=(x + 1, header.y))
        await until(pilot, lambda: app.main.sel.sorts.get("windows") is not None
                    and app.main.sel.sorts["windows"].column == "Δ ctl")
        assert windows()[0] == "s1 ctx"  # the one window with a delta, then "ctl", then blank


async def test_the_command_line_does_what_the_keys_do_and_more(measuring) -> None:
    run, engine = measuring
    app = RulerConsole(run, probe_interval=0.3)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        # The one command typed key by key (each key waits for the screen: the rest go in at once).
        await pilot.press("colon", *"advance", "enter")
        await until(pilot, lambda: engine.got[-1:] == [("advance", [])])
        await type_in(pilot, "colon", "rerun s2-control/prose/c2", "enter")
        await until(pilot, lambda: engine.got[-1] == ("rerun", ["s2-control/prose/c2"]))
        await until(pilot, lambda: "queued s2-control/prose/c2" in screen_text(app))
        await type_in(pilot, "colon", "open s1-ctx/code/c2", "enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                    and app.screen.key == "s1-ctx/code/c2")
        await pilot.press("escape")
        await type_in(pilot, "colon", "filter ctx", "enter")
        await until(pilot, lambda: [r[0].strip() for r in table_text(app, "#windows")] == ["s1 ctx"])
        await pilot.press("escape")
        await type_in(pilot, "colon", "sort status", "enter")
        await until(pilot, lambda: app.main.sel.sorts["windows"].column == "status")
        await type_in(pilot, "colon", "bogus", "enter")
        await until(pilot, lambda: "unknown command 'bogus'; known: rerun" in screen_text(app))
        # Completion: the commands, then the run's rows and windows.
        await type_in(pilot, "colon", "rerun s2-control/pr")
        box = app.query_one("#command", Input)
        await until(pilot, lambda: box._suggestion == "rerun s2-control/prose/c1")
        await pilot.press("escape")
        await type_in(pilot, "colon", "report", "enter")
        await until(pilot, lambda: f"written: {run}/report.md" in screen_text(app), timeout=60)
        assert (run / "report.md").is_file()


async def test_r_on_a_failed_row_asks_the_engine_to_rerun_it(measuring) -> None:
    """A server killed from outside fails the row in flight: the first row an operator wants to
    rerun ("is failed, not void: nothing to rerun" was the answer)."""
    run, engine = measuring
    app = RulerConsole(run, probe_interval=0.3)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        append(run, [{"kind": "row_done", "session": "s2", "window": "control", "class": "code",
                      "concurrency": 1, "axis": "control", "attempts": 1, "status": "failed",
                      "reason": "the server failed after 2 reps: server died (exit code -9)",
                      "source": "windows/s2-control/reps/code-c1-1-1.jsonl;"
                                "windows/s2-control/reps/code-c1-1-2.jsonl"}])
        await until(pilot, lambda: app.main.state.rows["s2-control/code/c1"].status == "failed")
        await pilot.press("tab")  # the reps: the cursor on the last row, code c1
        await until(pilot, lambda: app.main.ui.reps.cursor_key() == "s2-control/code/c1")
        await pilot.press("r")
        await until(pilot, lambda: engine.got[-1:] == [("rerun", ["s2-control/code/c1"])])
        await until(pilot, lambda: "queued s2-control/code/c1" in screen_text(app))


# ------------------------------------------------------------------ the mouse and the palette


async def test_a_click_picks_a_window_and_a_row_and_a_second_click_opens_it(tmp_path: Path) -> None:
    """A click highlighted a window and left the reps, log and facts on the old one."""
    app = frozen(recorded("finished", tmp_path), connected=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.main.sel.shown == "s2-control"
        region = app.main.ui.windows.content_region
        await pilot.click(offset=(region.x + 3, region.y + 2))  # the header, then s1 control, s1 ctx
        await until(pilot, lambda: app.main.sel.shown == "s1-ctx")
        await until(pilot, lambda: "reps · s1-ctx" in screen_text(app) and
                    "boot facts · s1-ctx" in screen_text(app))
        reps = app.main.ui.reps.content_region
        await pilot.click(offset=(reps.x + 3, reps.y + 4))  # the fourth row: code c2
        await until(pilot, lambda: app.main.ui.reps.cursor_key() == "s1-ctx/code/c2"
                    and app.main.sel.row_pinned)
        await pilot.click(offset=(reps.x + 3, reps.y + 4))  # the row under the cursor: its detail
        await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                    and app.screen.key == "s1-ctx/code/c2")


async def test_the_palette_keeps_rulers_entries_without_duplicates(measuring) -> None:
    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert len(titles) == len(set(titles))
        # Ruler's quit and help are there (tests/unit/tui/test_app.py: every key is).
        assert not {"Quit", "Keys", "Screenshot"} & set(titles)
        await type_in(pilot, "ctrl+p", "screenshot")

        def listed() -> list[str]:
            return [str(o.prompt) for o in app.screen.query_one(CommandList).options]

        await until(pilot, lambda: len(listed()) == 1)
        await pilot.press("enter")
        await until(pilot, lambda: any(run.glob("*.svg")))
        assert "screenshot:" in screen_text(app)


# ------------------------------------------------------------------ the end of a run


async def test_a_run_that_ends_while_watched_says_so_and_greys_the_engines_keys(measuring) -> None:
    run, engine = measuring
    app = RulerConsole(run, probe_interval=0.3)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert not app.main.ui.banner.display and app.main.check_action("abort", ()) is True
        append(run, [{"kind": "window_finished", "session": "s2", "window": "control",
                      "status": "aborted"},
                     {"kind": "run_finished", "status": "aborted"}])
        await until(pilot, lambda: app.main.ui.banner.display)
        # The banner shown is a widget's state; the screen is painted after it: wait for the paint.
        await until(pilot, lambda: "campaign stopped by the operator" in screen_text(app)
                    and "run over" in screen_text(app))
        banner = app.main.ui.banner.text.plain
        assert banner.startswith("■ campaign stopped by the operator after")
        assert f"run --resume {run}" in banner and f"report {run}" in banner
        # Issue 48: the end was said twice, on the banner and on the status line.
        assert screen_text(app).count("campaign stopped by the operator") == 1
        assert "run over: the engine's keys are greyed" in screen_text(app).splitlines()[-2]
        for action in ("abort", "advance", "rewarm", "rerun", "pause"):
            assert app.main.check_action(action, ()) is None, action  # greyed in the footer
        sent = len(engine.got)
        await pilot.press("a", "n", "r")
        await settled(pilot)
        assert len(engine.got) == sent and "Abort the campaign?" not in screen_text(app)
        head = screen_text(app).splitlines()[0]
        assert "ABORTED" in head and "control" not in head  # final: not the window under the cursor
        await pilot.press("colon", *"advance", "enter")
        await until(pilot, lambda: "the run is over: no engine to act" in screen_text(app))
    kinds = [e["kind"] for e in read_events(run / "journal.jsonl")]
    assert kinds[-1] == "run_finished"
