"""The operator's verbs, written once (tui.core.verbs): the ``:`` line parses and completes from the
table, and the help lists every key verb in its own order."""

from __future__ import annotations

import pytest

from tui.core.verbs import HELP, LINE, MOVES, VERB, VERBS, CommandError, completions, help_rows, parse


def test_the_command_line_knows_the_verbs_with_a_command() -> None:
    assert set(LINE) == {v.name for v in VERBS if v.line is not None}
    assert parse(":advance s2").args == ["s2"] and parse("q").name == "quit"
    for line, why in (("bogus", "unknown command 'bogus'; known: rerun, abort,"),
                      ("open", "usage: open ROW|WINDOW"), ("help me", "help takes no argument"),
                      ("report --pdf", "usage: report [--html]")):
        with pytest.raises(CommandError, match=why):
            parse(line)


def test_completion_offers_the_commands_then_the_runs_keys() -> None:
    assert completions("r", ["s1-a"])[:4] == ["rerun", "rewarm", "resume", "report"]
    assert completions("open s", ["s1-a", "s1-a/prose/c1"]) == ["open s1-a", "open s1-a/prose/c1"]


def test_the_help_has_every_key_verb_once_with_its_key() -> None:
    keyed = {v.name for v in VERBS if v.key and v.help}
    assert set(HELP) - set(MOVES) == keyed and len(HELP) == len(set(HELP))
    rows = help_rows()
    assert ("?" not in {k for k, _ in rows})  # the help does not list its own key
    assert [k for k, _ in rows if k][:6] == ["↑ ↓", "enter", "tab", "/", ":", "S D T P"]
    assert rows[rows.index(("q", VERB["quit"].help.split("\n")[0])) + 1][0] == ""  # continued
