"""What every pane of the run screen draws from: a snapshot the screen takes after each change
(memray's live TUI: a thread reads, the screen folds and snapshots, each pane watches its ``view``
and draws itself). The state and the selection are the screen's own, only read here; what several
panes derive from them is derived once per snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from rich.style import Style
from textual.reactive import var

from engine.commands.eta import LoadPlan, load_plan
from engine.method.verdict import Rule
from engine.record.state import RunState
from tui.core.ending import is_over
from tui.core.follow import Link
from tui.core.listing import Listed, listed
from tui.core.rules import LeakRule
from tui.core.selection import LogWatch, Selection


@dataclass(frozen=True, eq=False)  # compared by identity: each snapshot is news
class View:
    state: RunState
    sel: Selection
    logw: LogWatch
    leak: LeakRule
    # The Δ column's calls; None before they are judged: the first frame is drawn without them
    # (a day-long run's judgement takes half a second), which fill in right after it.
    rule: Rule | None
    link: Link | None
    engine_gone: bool  # the probe found no engine and no process: it will not answer
    run_dir: Path
    now: float
    tags: dict[str, Style]  # the theme's colours per tag
    reading: int | None = None  # the events folded so far while the journal's history is read

    @property
    def over(self) -> bool:
        """Nothing the console sends can act any more: the run ended, or its engine is gone."""
        return is_over(self.state, self.engine_gone, self.reading is not None)

    @cached_property
    def plan(self) -> LoadPlan:
        return load_plan(self.state)

    @cached_property
    def windows(self) -> Listed:
        return listed(self.state, self.rule, self.sel.filter, self.sel.sorts.get("windows"))


def watched() -> var[View | None]:
    """A pane's ``view``: each snapshot assigned calls its ``watch_view`` at once, the same object
    again too (the state is folded in place)."""
    return var(None, always_update=True, init=False)
