"""Every use of Textual's private API, in one place (as memray's live TUI keeps its own).

Each hack says what it works around and why the public API does not serve. All were checked against
textual 8.2 (the range pinned in pyproject.toml). Every private member they rely on is listed in
:data:`RELIES_ON`, and :func:`missing` detects each on the installed Textual
(tests/unit/tui/test_textual_hacks.py fails naming the one gone); after an upgrade the snapshot tests
(tests/unit/tui/test_app.py) say whether the hacks still draw the same.
"""

from __future__ import annotations

import inspect
from typing import Any

from textual.widgets import Log


class NoLineMeasure(Log):
    """Log measures every new line's width in a thread worker (one per write) to size its
    horizontal scroll; a log that never scrolls sideways (long lines are cut, search finds them)
    skips it: at 10,000 lines/s that is a thread hop and 1,000 measurements a tick.

    Private: ``_update_size`` (overridden to do nothing).
    """

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]  # @work in Log
        return


class WheelBackHook(Log):
    """Scrolling back with the mouse wheel calls ``scrolled_back`` first (the keys have public
    actions to override; the wheel only has the private handler).

    Private: ``_on_mouse_scroll_up``.
    """

    def scrolled_back(self) -> None:
        """Called before the log scrolls up under the wheel."""

    def _on_mouse_scroll_up(self, event: Any) -> None:
        self.scrolled_back()
        super()._on_mouse_scroll_up(event)


# (class, private member, the parameters it is called or overridden with; None: an attribute).
# A dotted member is one of an attribute's. Attributes set in __init__ are looked up on an instance.
RELIES_ON: tuple[tuple[type[Any], str, tuple[str, ...] | None], ...] = (
    (Log, "_update_size", ("updates", "lines")),
    (Log, "_on_mouse_scroll_up", ("event",)),
)


def missing() -> list[str]:
    """Each member of :data:`RELIES_ON` the installed Textual lacks, or has with other parameters,
    as ``Class.member`` and what differs; empty when every hack still has what it relies on."""
    out = []
    instances: dict[type[Any], Any] = {}
    for cls, member, params in RELIES_ON:
        obj = instances.setdefault(cls, cls())
        name = f"{cls.__name__}.{member}"
        for part in member.split("."):
            if not hasattr(obj, part):
                out.append(f"{name}: no {part}")
                break
            obj = getattr(obj, part)
        else:
            if params is None:
                continue
            if not callable(obj):
                out.append(f"{name}: not callable")
                continue
            have = tuple(inspect.signature(obj).parameters)
            if have != params:
                out.append(f"{name}: parameters {have}, not {params}")
    return out
