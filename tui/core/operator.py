"""What the operator asks, checked and worded before anything is sent or redrawn: the sort keys and
words (k9s's), a rerun's target, and the words for the engine's and
the report's answers. Each returns what the status line says; the run screen sends and redraws."""

from __future__ import annotations

from typing import Any

from engine.record.state import RunState
from engine.words import RERUNNABLE_ROWS
from tui.core.fmt import Seg
from tui.core.reps import MEDIAN, REP_COLUMNS, SPREAD
from tui.core.selection import Selection
from tui.core.sorting import Sort
from tui.core.windows import WINDOW_COLUMNS, window_rows

# The sort keys per table (N: back to the campaign's order).
SORT_KEYS = {"windows": {"S": "status", "D": "Δ ctl"},
             "reps": {"S": "status", "T": MEDIAN, "P": SPREAD}}
SORT_WORDS = {"delta": "Δ ctl", "ci": "95% CI", "tok/s": MEDIAN, "name": "window"}

Said = tuple[list[Seg], bool]  # what to say, and whether the tables are to be drawn again


def sort_key(sel: Selection, table: str, key: str) -> Said:
    """A sort key on ``table`` (the one with the keys, else the windows list)."""
    column = SORT_KEYS[table].get(key)
    if key == "N":
        sel.sorts.pop(table, None)
        return [("sort:", "bold"), (f"the {table} in campaign order", "")], True
    if column is None:
        return [("sort:", "bold"), (f"{key} sorts " + ("the reps table (tab to it)" if table ==
                                    "windows" else "the windows list"), "warning")], False
    return sort_by(sel, table, column)


def sort_by(sel: Selection, table: str, column: str) -> Said:
    """Order a table by a column; again, the other way."""
    before = sel.sorts.get(table)
    sort = before.toggled(column) if before else Sort(column)
    sel.sorts[table] = sort
    return [("sort:", "bold"), (f"{table} by {column}" + (", descending" if sort.descending
                                                        else ""), "")], True


def sort_word(sel: Selection, table: str, word: str) -> Said:
    """``:sort WORD``: the first column of ``table`` whose name starts with the word (or what it
    stands for: delta, ci, tok/s, name)."""
    columns = WINDOW_COLUMNS if table == "windows" else REP_COLUMNS
    want = SORT_WORDS.get(word, word)
    match = [col for col in columns if col.lower().startswith(want.lower())]
    if not match:
        return [(":sort", "bold"), (f"no column {word!r} in the {table}; "
                                    f"columns: {', '.join(columns)}", "warning")], False
    return sort_by(sel, table, match[0])


def rerun_refused(state: RunState, key: str) -> list[Seg] | None:
    """Why a rerun of a row or window is not worth asking the engine for: a row that is neither
    void nor failed, a window with no such row. None: ask."""
    row = state.rows.get(key)
    if row is not None and row.status not in RERUNNABLE_ROWS:
        return [("rerun:", "bold"), (f"{key} is {row.status}; only void or failed rows rerun", "warning")]
    if row is None and not any(r.status in RERUNNABLE_ROWS for r in window_rows(state, key)):
        word = state.windows[key].status if key in state.windows else "not a row or window"
        return [("rerun:", "bold"), (f"{key} ({word}) has no void or failed row", "warning")]
    return None


def replied(what: str, reply: dict[str, Any]) -> list[Seg]:
    if reply.get("ok"):
        return [(f"{what}:", "bold"), (str(reply.get("reply", "")), "success")]
    return [(f"{what} refused:", "error"), (str(reply.get("error", "")), "")]


def reported(code: int, out: str, err: str) -> list[Seg]:
    """What ``ruler report`` on the run came to: the files it wrote, or why it failed."""
    if code == 0:
        made = [line.split(":", 1)[1].strip() for line in out.splitlines()
                if line.startswith(("report:", "html:"))]
        return [(":report", "bold"), ("written: " + ", ".join(made), "success")]
    why = (err.strip().splitlines() or [f"exit code {code}"])[-1]
    return [(":report", "bold"), (f"failed: {why}", "error")]


def attached(state: RunState, over: bool) -> list[Seg]:
    said: list[Seg] = [("attached:", "bold"), (f"{state.last_seq} journal events", "muted")]
    if not over:  # once over, the banner says how it ended
        said += [("·", "muted"), ("following", "")]
    return said
