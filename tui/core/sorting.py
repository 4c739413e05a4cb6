"""The windows list filtered and either table sorted, as k9s does: ``/`` keeps the windows whose text
holds every word typed (name, status, delta, notes, axis); a sort key or a click on a column's
header orders a table by that column, again reverses it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tui.core.fmt import Seg

Row = tuple[str, list[list[Seg]]]  # a table row: its key, its cells (segments) in column order
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Sort:
    column: str
    descending: bool = False

    def toggled(self, column: str) -> Sort:
        """Sorting by ``column`` again reverses it; another column starts ascending."""
        return Sort(column, not self.descending if column == self.column else False)


def cell_text(cell: list[Seg]) -> str:
    return " ".join(t for t, _ in cell if t)


def sort_value(text: str) -> float | None:
    """A cell's figure: its first number (``~5.5``, ``+7.4%``, ``140.7%``), None for words."""
    m = _NUMBER.search(text)
    return float(m.group()) if m else None


def sort_rows(rows: Sequence[Row], columns: Sequence[str], sort: Sort | None) -> list[Row]:
    """``rows`` ordered by ``sort``'s column: figures by value, then words alphabetically, then
    empty cells; descending reverses the figures and the words, the empty stay last."""
    if sort is None or sort.column not in columns:
        return list(rows)
    i = list(columns).index(sort.column)
    figures, words, empty = [], [], []
    for row in rows:
        text = cell_text(row[1][i]).strip()
        value = sort_value(text)
        if value is not None:
            figures.append((value, row))
        elif text and text != "-":
            words.append((text.lower(), row))
        else:
            empty.append(row)
    figures.sort(key=lambda x: x[0], reverse=sort.descending)
    words.sort(key=lambda x: x[0], reverse=sort.descending)
    return [r for _, r in figures] + [r for _, r in words] + empty


def filter_rows(rows: Sequence[Row], query: str) -> list[Row]:
    """The rows whose text (every cell) holds every word of ``query``, case aside; a word that
    starts with ``!`` keeps the rows without it."""
    words = query.lower().split()
    if not words:
        return list(rows)
    out = []
    for row in rows:
        text = " ".join([row[0], *(cell_text(c) for c in row[1])]).lower()
        if all((w[1:] not in text) if w.startswith("!") and len(w) > 1 else (w in text) for w in words):
            out.append(row)
    return out
