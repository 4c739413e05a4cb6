"""The ``:`` command line (#command): a box that completes the commands (tui.core.verbs), and the
run's rows and windows after them; the screen runs what is entered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.suggester import Suggester
from textual.widgets import Input

from tui.core.verbs import completions


class CommandSuggester(Suggester):
    """The ``:`` line's completion: ``keys`` gives the run's rows and windows as they are now."""

    def __init__(self, keys: Callable[[], list[str]]) -> None:
        super().__init__(use_cache=False)
        self.keys = keys

    async def get_suggestion(self, value: str) -> str | None:
        found = completions(value, self.keys())
        return found[0] if found else None


class CommandBox(Input):
    def __init__(self, keys: Callable[[], list[str]], **kw: Any) -> None:
        super().__init__(placeholder=":rerun ROW · :report · :open ROW · :filter WORDS · :sort COLUMN · "
                                     ":help (tab completes, esc closes)",
                         suggester=CommandSuggester(keys), **kw)
