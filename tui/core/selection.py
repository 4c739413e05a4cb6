"""What the operator looks at, apart from the widgets that show it: the window on screen, whether
the operator picked it or it follows the engine, the row under the reps cursor, and which log the
follower reads for it (raw or the serving view)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.record.state import RunState
from tui.core.follow import LogView
from tui.core.sorting import Sort
from tui.core.windows import focus_window, live_row


@dataclass
class Selection:
    """The window on screen and the row under the reps cursor. Picked by the operator, each stays
    put; otherwise each follows the campaign (the live window of its place, the live row)."""

    shown: str | None = None  # the window on screen
    pinned: bool = False  # the operator picked `shown`: stop following the engine
    row_pinned: bool = False  # same for the row under the reps cursor
    reps_for: str | None = None  # the window whose rows the reps table holds
    filter: str = ""  # the windows list keeps the windows whose text holds these words
    sorts: dict[str, Sort] = field(default_factory=dict)  # table ("windows", "reps") -> its order

    def follow(self, state: RunState) -> None:
        """The window to show now: the picked one while it exists, else the one worth following."""
        if not self.pinned or self.shown not in state.windows:
            self.shown = focus_window(state, self.shown)
            self.pinned = False

    def pick_window(self, state: RunState, key: str) -> None:
        """The operator moved to ``key``: a live window keeps following its place, any other stays."""
        self.shown = key
        self.pinned = key != focus_window(state, key)

    def pick_row(self, state: RunState, key: str) -> None:
        live = live_row(state, self.shown)
        self.row_pinned = live is None or key != live.key

    def live(self) -> None:
        """Back to following the engine (esc)."""
        self.pinned = self.row_pinned = False

    def new_reps(self) -> bool:
        """True once per window shown: the reps table then starts over, following its live row."""
        if self.reps_for == self.shown:
            return False
        self.reps_for, self.row_pinned = self.shown, False
        return True


@dataclass
class LogWatch:
    """The log the follower reads for the window on screen: its path, raw or the serving view, the
    generation of the follower's watch (batches of an older one are dropped) and the serving
    view's counts so far (None: raw, or none yet)."""

    raw: bool = False  # v: every line of the log, not the serving view
    rel: str | None = None
    key: tuple[str | None, bool, bool] | None = None  # what the follower watches
    gen: int = 0
    view: LogView | None = None

    def wants(self, state: RunState, shown: str | None, has_adapter: bool) -> tuple[str | None, bool] | None:
        """(the log's path, serving view or not) when the follower must watch another log now;
        None when it watches the right one already."""
        ws = state.windows.get(shown or "")
        rel = ws.log if ws and ws.log else None
        serving = not self.raw and has_adapter
        key = (rel, self.raw, serving)
        if key == self.key:
            return None
        self.key, self.rel, self.view = key, rel, None
        return rel, serving
