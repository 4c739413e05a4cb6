"""The canary of tui/widgets/_textual_hacks.py: every private Textual member a hack relies on is still
there, with the parameters the hack calls or overrides it with. A Textual upgrade that renames or
reshapes one fails here, naming it, before a console draws wrong or raises mid-run."""

from __future__ import annotations

import re

import pytest
from textual.widgets import DataTable

from tui.widgets import _textual_hacks


def test_every_private_member_the_hacks_rely_on_is_still_there() -> None:
    assert _textual_hacks.missing() == []


def test_a_member_gone_or_reshaped_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The detection itself: a member removed, and one whose parameters changed, each named."""
    relies = (*_textual_hacks.RELIES_ON, (DataTable, "_no_such_member", None),
              (DataTable, "_clear_caches", ("force",)), (DataTable, "_data.no_such", None))
    monkeypatch.setattr(_textual_hacks, "RELIES_ON", relies)
    assert _textual_hacks.missing() == ["DataTable._no_such_member: no _no_such_member",
                                        "DataTable._clear_caches: parameters (), not ('force',)",
                                        "DataTable._data.no_such: no no_such"]


def test_every_member_a_hack_names_private_is_checked() -> None:
    """Each hack's docstring says which private members it uses ("Private: ..."): each is in
    RELIES_ON, so a hack added with its docstring is checked too."""
    checked = {member.split(".")[0] for _, member, _ in _textual_hacks.RELIES_ON}
    named = set()
    for obj in vars(_textual_hacks).values():
        if isinstance(obj, type) and obj.__module__ == _textual_hacks.__name__:
            private = (obj.__doc__ or "").partition("Private:")[2]
            named |= set(re.findall(r"``(_\w+)``", private))
    assert named and named <= checked, named - checked
