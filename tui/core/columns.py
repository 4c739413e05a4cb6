"""Fitting a table's columns to the terminal's width: which columns show, and how wide."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Col:
    """A table column: ``rank`` 0 is always shown, then 1, 2, ... while they fit; a column with
    ``cut`` may be cut down to that many cells (an ellipsis says so) rather than dropped."""

    name: str
    rank: int
    cut: int = 0


def fit_columns(cols: list[Col], widths: dict[str, int], room: int) -> dict[str, int]:
    """The columns shown in ``room`` cells and each one's width, in display order: never wider
    than the room (columns never overlap) as long as the always-shown ones fit at their cut.

    The always-shown columns come first; when they do not fit, the cuttable ones give up cells,
    the rightmost first.
    The others (those with a width: 0 is a column with nothing to show) then come in rank order,
    each when it fits (a narrower column of a lower rank may
    still fit where a wider one did not): at full width, or a cuttable one at ``cut`` cells. Cells
    left over then go back to the cut columns, in rank order: a long reason does not push out
    every column after it, nor is it cut where there is room.
    """
    core = [c for c in cols if c.rank == 0]
    out = {c.name: widths[c.name] for c in core}
    over = sum(out.values()) - room
    for c in reversed(core):  # the rightmost gives first: a long status before the window's name
        if over <= 0:
            break
        if c.cut and out[c.name] > c.cut:
            give = min(over, out[c.name] - c.cut)
            out[c.name] -= give
            over -= give
    left = room - sum(out.values())
    ranked = sorted((c for c in cols if c.rank > 0), key=lambda c: c.rank)
    for c in ranked:
        w = min(widths[c.name], c.cut) if c.cut else widths[c.name]
        if w > left or not w:  # no room, or nothing to show
            continue
        out[c.name] = w
        left -= out[c.name]
    for c in ranked:
        if c.name in out and out[c.name] < widths[c.name]:
            grow = min(left, widths[c.name] - out[c.name])
            out[c.name] += grow
            left -= grow
    return {c.name: out[c.name] for c in cols if c.name in out}
