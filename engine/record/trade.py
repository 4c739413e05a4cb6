"""The trade table of a sweep: per class and load, each value's delta against its session's control
with its interval, and the answer in words: one value wins everywhere; a trade (which class is
best at which value, by how much); or no value separates from the control.

Every call is the campaign's verdict on a window row against its control row, asked of one
function, :func:`cell_of`; nothing here decides an effect by a rule of its own. The table, its
words and ``ruler tune`` read the calls; the report, the console and tune.md print them. Pure
functions of a run's state (run_started records each sweep: engine.record.events.Sweep), so the
console computes it live without pydantic or numpy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.method import verdict
from engine.method.verdict import Rule
from engine.record.judgement import judgement, reps_of
from engine.record.state import RunState
from engine.words import CONTROL, load_text, row_key


class Outcome(StrEnum):
    BETTER = "better"  # an effect, the window faster than the control
    WORSE = "worse"  # an effect, the window slower
    EQUIVALENT = "equivalent"  # shown to be within the campaign's margin of the control
    UNDETERMINED = "undetermined"  # neither called nor shown within the margin (its reason says why)
    NO_FIGURE = "no figure"  # a row missing, void or failed on either side


SEPARATES = frozenset({Outcome.BETTER, Outcome.WORSE})


@dataclass(frozen=True)
class Cell:
    """A window row against its control row: the delta (window / control - 1), its interval, and
    the campaign's call on it, as an outcome."""

    delta: float | None
    lo: float | None
    hi: float | None
    outcome: Outcome
    why: str = ""  # why there is no figure, or the campaign's reason for its call
    def text(self) -> str:
        if self.delta is None:
            return f"n/a ({self.why})" if self.why else "n/a"
        out = f"{self.delta * 100:+.1f} %"
        if self.lo is not None and self.hi is not None:
            out += f" [{self.lo * 100:+.1f}, {self.hi * 100:+.1f}]"
        return out


def cell_of(state: RunState, rule: Rule, session: str, window: str, cls: str, concurrency: int,
            rate: float | None = None) -> Cell:
    """The campaign's verdict on one window row against its session's control boots
    (engine.record.judgement: the noise between boots counted, the error rate kept across the run's
    window rows): an effect is better or worse by its sign, "no observable effect" equivalent,
    the rest undetermined. The one place the trade table and the tuner ask it."""
    key = row_key(session, window, cls, concurrency, rate)
    mine = state.rows.get(key)
    ctl = state.rows.get(row_key(session, CONTROL, cls, concurrency, rate))
    if reps_of(mine) is None or reps_of(ctl) is None:
        side = "window" if reps_of(mine) is None else "control"
        row = mine if side == "window" else ctl
        return Cell(None, None, None, Outcome.NO_FIGURE,
                      f"the {side}'s row is {row.status if row is not None else 'missing'}")
    found = judgement(state, rule)
    j, v = found.rows.get(key), found.versus(key)
    if j is None or v is None or j.versus is None:
        return Cell(None, None, None, Outcome.NO_FIGURE, found.refused.get(key, "no positive rep"))
    lo, hi = v.interval() or (None, None)
    # The call is the window's at this shape (its sessions pooled), its direction the pooled delta's.
    outcome = (Outcome.EQUIVALENT if j.call == verdict.Call.NONE
               else Outcome.UNDETERMINED if j.call != verdict.Call.EFFECT
               else Outcome.BETTER if j.versus.delta > 0 else Outcome.WORSE)
    return Cell(v.delta, lo, hi, outcome, j.why())


Shape = tuple[str, int, float | None]  # class, concurrency, rate


def shape_text(shape: Shape) -> str:
    return f"{shape[0]} {load_text(shape[1], shape[2])}"


def value_text(value: Any) -> str:
    if value is None:
        return "left out"
    if value is True:
        return "on"
    return value if isinstance(value, str) else json.dumps(value)


class Answer(StrEnum):
    WINS = "wins everywhere"
    TRADE = "a trade"
    CONTROL = "the control's value stays"  # values only lose where they separate
    NONE = "no value separates from the control"
    NOT_YET = "not measured yet"


@dataclass(frozen=True)
class Trade:
    """One sweep in one session: its values in order, the shapes measured, each cell's call."""

    sweep: str
    session: str
    axis: str
    control: Any  # the control's value of the axis
    values: list[tuple[str, Any]]  # (window, value), in the sweep's order
    shapes: list[Shape]
    cells: dict[tuple[str, Shape], Cell]  # (window, shape) -> its call
    answer: Answer
    words: str

    def label(self, window: str) -> str:
        return value_text(dict(self.values)[window]) if window != CONTROL else \
            f"{value_text(self.control)} (control)"


def shapes_of(state: RunState, session: str, windows: list[str]) -> list[Shape]:
    """The shapes the session's control or any of the windows has a row of, in measuring order."""
    seen: dict[Shape, None] = {}
    for r in state.rows.values():
        if r.session == session and (r.window == CONTROL or r.window in windows):
            seen.setdefault((r.cls, r.concurrency, r.rate), None)
    return list(seen)


def trades(state: RunState, rule: Rule) -> list[Trade]:
    """Every sweep's trade table, per session it ran in (a session with none of its windows is
    left out)."""
    out = []
    for sweep, spec in state.sweeps.items():
        windows = list(spec.get("windows") or {})
        sessions = dict.fromkeys(ws.session for ws in state.windows.values() if ws.window in windows)
        for session in sessions:
            mine = [w for w in windows if f"{session}-{w}" in state.windows]
            out.append(trade(state, rule, sweep, session, mine))
    return out


def trade(state: RunState, rule: Rule, sweep: str, session: str, windows: list[str]) -> Trade:
    spec = state.sweeps[sweep]
    shapes = shapes_of(state, session, windows)
    cells = {(w, s): cell_of(state, rule, session, w, *s) for w in windows for s in shapes}
    values = [(w, spec["windows"][w]) for w in windows]
    answer, words = say(spec["axis"], spec.get("control"), values, shapes, cells)
    return Trade(sweep, session, spec["axis"], spec.get("control"), values, shapes, cells, answer, words)


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:+.1f} %"


def say(axis: str, control: Any, values: list[tuple[str, Any]], shapes: list[Shape],
        cells: dict[tuple[str, Shape], Cell]) -> tuple[Answer, str]:
    """The answer in words, from the calls alone: a value that is better than the control at
    every shape wins everywhere; some value better somewhere but none everywhere is a trade (per
    shape: the value best there, by how much, or the control's where none is better); values that
    only lose leave the control's value; no call at all: no value separates."""
    ctl = value_text(control)
    name = dict(values)
    measured = [s for s in shapes if any(cells[(w, s)].outcome != Outcome.NO_FIGURE for w, _ in values)]
    if not measured:
        return Answer.NOT_YET, f"{axis}: no value has a row against the control yet"
    everywhere = [w for w, _ in values if all(cells[(w, s)].outcome == Outcome.BETTER for s in measured)]
    better = {s: [w for w, _ in values if cells[(w, s)].outcome == Outcome.BETTER] for s in measured}
    worse = [(w, s) for w, _ in values for s in measured if cells[(w, s)].outcome == Outcome.WORSE]
    if everywhere:
        best = max(everywhere, key=lambda w: min(cells[(w, s)].delta or 0.0 for s in measured))
        gains = [cells[(best, s)].delta for s in measured]
        also = [w for w in everywhere if w != best]
        return Answer.WINS, (
            f"{axis} {value_text(name[best])} wins everywhere: better than the control's "
            f"{ctl} at every class and load ({_pct(min(g or 0 for g in gains))} to "
            f"{_pct(max(g or 0 for g in gains))})"
            + (f"; {', '.join(value_text(name[w]) for w in also)} also" if also else ""))
    if any(better.values()):
        parts = []
        for s in measured:
            if better[s]:
                top = max(better[s], key=lambda w: cells[(w, s)].delta or 0.0)
                j = cells[(top, s)]
                parts.append(f"{shape_text(s)} is best at {value_text(name[top])} ({j.text()})")
            else:
                losers = [w for w, _ in values if cells[(w, s)].outcome == Outcome.WORSE]
                said = ", ".join(f"{value_text(name[w])} {_pct(cells[(w, s)].delta)}" for w in losers)
                why = f"; {said}" if losers else ""
                parts.append(f"{shape_text(s)} at the control's {ctl} (no value better{why})")
        return Answer.TRADE, f"{axis} is a trade, no value wins everywhere: " + "; ".join(parts)
    if worse:
        lost = "; ".join(f"{value_text(name[w])} {_pct(cells[(w, s)].delta)} at {shape_text(s)}"
                         for w, s in worse)
        return Answer.CONTROL, (f"{axis}: no value beats the control's {ctl}; where a value "
                                f"separates it loses ({lost})")
    unmeasured = all(cells[(w, s)].lo is None for w, _ in values for s in measured)
    why = ("the noise between boots was not measured: nothing booted twice in a session "
           "(control_position both or interleaved, a second session or --baseline measures it)"
           if unmeasured else "the noise cannot tell them apart")
    return Answer.NONE, (f"{axis}: no value separates from the control's {ctl} at any class and "
                         f"load ({why})")
