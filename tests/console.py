"""The console (tui.app.RulerConsole) under Textual's pilot, for both tiers: the text on screen,
waits on what is on screen rather than on time, and the rows its tables show."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input

from tui.app import RulerConsole


def screen_text(app: App[Any]) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


# Generous: a deadline here only turns a hang into a failure; under a loaded CPU a console needs
# seconds to start, and a tight one made slowness look like a wrong picture.
async def until(pilot: Pilot[Any], cond: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting; screen:\n{screen_text(pilot.app)}")
        await pilot.pause(0.02)


async def settled(pilot: Pilot[Any], timeout: float = 60.0) -> None:
    """Until the picture is final, by what is on screen rather than by time: the journal and the
    log read to their end, the calls judged, the engine link known, then idle frames until two in
    a row are the same (a refresh queued behind the last batch lands in between; a fixed pause did
    not always cover it on a loaded CPU)."""
    app = pilot.app
    assert isinstance(app, RulerConsole)
    await until(pilot, lambda: app.main.caught_up and app.main.judged
                and (app.probe is None or app.main.link is not None), timeout)
    deadline = time.monotonic() + timeout
    before = None
    while True:
        await pilot.wait_for_scheduled_animations()
        frame = app.export_screenshot(simplify=True)
        if frame == before:
            return
        assert time.monotonic() < deadline, "the screen never stopped changing"
        before = frame


async def type_in(pilot: Pilot[Any], opener: str, text: str, *after: str) -> None:
    """``opener`` (the key that opens a box: / or : or the palette's), then ``text`` put in the
    focused box as a paste would (one Changed, not a key and two idle waits a character: 0.1 s
    each), then ``after``. Keys typed one by one into the box: test_the_command_line_...'s first."""
    await pilot.press(opener)
    box = pilot.app.focused
    assert isinstance(box, Input), box
    box.insert_text_at_cursor(text)
    await pilot.press(*after)


def table_text(app: RulerConsole, which: str) -> list[list[str]]:
    t = app.main.ui.reps if which == "#reps" else app.main.ui.windows
    return [t.plain_row(k) for k in t.keys]


def live_marked(app: RulerConsole) -> list[str]:
    """The windows the list marks live (▶), as it shows them."""
    return [row[0].strip("▶ ").strip() for row in table_text(app, "#windows") if row[0].startswith("▶")]
