"""The run screen's keys and palette come from the verbs table (tui.core.verbs): each verb a key or
an entry names has its action on the screen, and the footer shows the keys in the table's order."""

from __future__ import annotations

from textual.binding import Binding

from tui.core.verbs import VERBS
from tui.screens.run import RunScreen, bindings


def test_every_verb_with_a_key_or_an_entry_has_its_action() -> None:
    missing = [v.name for v in VERBS if (v.key or v.title) and not callable(
        getattr(RunScreen, f"action_{v.name}", None))]
    assert missing == []


def test_the_bindings_are_the_tables_in_its_order() -> None:
    made = [b for b in bindings() if isinstance(b, Binding)]
    assert [b.key for b in made if b.show] == ["a", "n", "w", "r", "p", "slash", "colon",
                                               "question_mark", "q"]
    assert [b.action for b in made if b.key in "NSDTP"] == [f"sort('{k}')" for k in "NSDTP"]
    assert bindings() == RunScreen.BINDINGS
