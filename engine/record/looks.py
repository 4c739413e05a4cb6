"""Boots added until decided (``verdict.until_decided``): after the campaign's sessions, a look at
the evidence; the windows not yet decided (a row neither an effect nor shown within the margin)
are booted again in a session of their own, with the control's boots, and looked at again, until
every window is decided or the budget (``verdict.max_boots``, ``verdict.max_minutes``) would be
passed by another session. A row or window decided at a look stays decided.

The error rate is spent over the looks in proportion to the budget used since the one before
(engine.record.judgement.look_level), the last look spending what is left: the looks' levels add up
to the campaign's error rate, so by Bonferroni over them the family-wise rate holds however the
looks fall and whichever windows they stop (Chromium's Pinpoint answers the same way: attempts
added until the sides separate or a budget ends, then "no difference found" with the budget said).

Pure on a run's state: the runner journals each look and each session it adds (their events),
the simulation (engine.record.simulate) takes the same looks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine.method.design import control_boots, final_level, interleave
from engine.method.verdict import Call, Rule
from engine.record.judgement import budget_fraction, budget_used, judgement
from engine.record.state import RunState
from engine.words import CONTROL, is_control

DECIDED = (Call.EFFECT, Call.NONE)


@dataclass(frozen=True)
class Look:
    look: int
    level: float
    fraction: float
    final: bool
    boots: int
    minutes: float
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    windows: dict[str, dict[str, str]] = field(default_factory=dict)
    undecided: list[str] = field(default_factory=list)
    why: str = ""
    session: str = ""  # the session added next ("" at the last look)
    order: list[str] = field(default_factory=list)  # its boot order

    def event(self) -> dict[str, Any]:
        """The verdict_look event's fields (engine.record.events.VerdictLook)."""
        return {"look": self.look, "level": self.level, "fraction": self.fraction, "final": self.final,
                "boots": self.boots, "minutes": round(self.minutes, 2), "rows": self.rows,
                "windows": self.windows, "undecided": self.undecided, "why": self.why}


def session_order(windows: Sequence[str], position: str) -> list[str]:
    """An added session's boot order: its windows with the control's boots as the campaign
    places them (last: the control after them)."""
    names = list(windows)
    if position == "first":
        return [CONTROL, *names]
    if position == "last":
        return [*names, CONTROL]
    return interleave(names, control_boots(len(names), position))


def next_name(state: RunState, taken: Sequence[str]) -> str:
    n = 1
    while f"more{n}" in taken or f"more{n}" in state.added:
        n += 1
    return f"more{n}"


def take(state: RunState, rule: Rule, position: str, windows: Sequence[str],
         sessions: Sequence[str]) -> Look:
    """The next look: what it decides, and the session it adds (``windows``: the campaign's, in
    order; ``sessions``: the campaign's session names)."""
    number = len(state.looks) + 1
    spent = float(state.looks[-1]["fraction"]) if state.looks else 0.0
    boots, minutes = budget_used(state)
    j = judgement(state, rule)
    undecided = [w for w in windows if _open(j, state, w)]
    per_boot = minutes / boots if boots else 0.0
    left = _boots_left(rule, boots, minutes, per_boot)
    # A window none of whose open rows the budget left could settle is not booted again (its
    # noise at those shapes wants more sessions than there are): the budget goes to the others.
    last = final_level(rule.error_rate, budget_fraction(state, rule)) / max(j.rule.alpha, 1e-12)
    hopeless = {w: need for w in undecided if (need := _sessions_wanted(j, state, w, last)) is not None
                and need > left // max(1, len(session_order(undecided, position)))}
    hopeful = [w for w in undecided if w not in hopeless]
    order = session_order(hopeful, position)
    final = not hopeful or len(order) > left
    if final:  # the last look spends what is left of the error rate
        j = judgement(state, replace(rule, level=final_level(rule.error_rate, spent)))
        undecided = [w for w in windows if _open(j, state, w)]
    level = j.rule.alpha
    fraction = 1.0 if final else budget_fraction(state, rule)
    earlier_rows = {k for look in state.looks for k in look.get("rows", {})}
    earlier_windows = {w for look in state.looks for w in look.get("windows", {})}
    rows = {k: {"call": c.call.value, "why": c.why()} for k, c in j.rows.items()
            if c.call in DECIDED and k not in earlier_rows and c.decided is None}
    called = {w: {"call": c.call.value, "why": c.text()} for w, c in j.windows.items()
              if c.call in DECIDED and w not in earlier_windows and c.decided is None}
    beyond = "".join(f"; {w} would want about {n} more sessions" for w, n in hopeless.items())
    if not undecided:
        why = f"every window decided at look {number}"
    elif not hopeful:
        why = (f"no undecided window can be settled within the budget "
               f"({_budget(rule, boots, minutes)}){beyond}")
    elif final:
        why = (f"the budget ends: another session of {len(hopeful)} undecided "
               f"window{'s' if len(hopeful) != 1 else ''} takes {len(order)} boots "
               f"({_budget(rule, boots, minutes)}); undecided: {', '.join(undecided)}{beyond}")
    else:
        why = f"{len(hopeful)} undecided, booted again: {', '.join(hopeful)}{beyond}"
    name = "" if final else next_name(state, sessions)
    return Look(number, level, fraction, final, boots, minutes, rows, called,
                [] if final else hopeful, why, name, [] if final else order)


def _boots_left(rule: Rule, boots: int, minutes: float, per_boot: float) -> int:
    """The boots the budget has left (by minutes: at the boots so far' mean length)."""
    left = [rule.max_boots - boots] if rule.max_boots is not None else []
    if rule.max_minutes is not None:
        left.append(int((rule.max_minutes - minutes) / per_boot) if per_boot > 0 else 10**9)
    return max(0, min(left)) if left else 10**9


def _sessions_wanted(j: Any, state: RunState, window: str, scale: float) -> int | None:
    """More sessions of a window the likeliest of its open rows wants to be settled at the last
    look (its level: this look's times ``scale``); None: one row has no estimate, so the window
    is given its chance."""
    wants = []
    for k, r in state.rows.items():
        c = j.rows.get(k)
        if r.window != window or c is None or c.call in DECIDED or c.versus is None:
            continue
        a = min(0.5, j.rule.alpha * scale)
        need = c.versus.sessions_needed(min(0.5, (c.level or j.rule.alpha) * scale), j.rule.margin, a)
        if need is None:
            return None
        wants.append(need - c.versus.sessions)
    return min(wants) if wants else None


def _open(j: Any, state: RunState, window: str) -> bool:
    """A window with a figure at some shape and a row not yet decided."""
    keys = [k for k, r in state.rows.items() if r.window == window and not is_control(r.window)]
    judged = [j.rows[k] for k in keys if k in j.rows and j.rows[k].versus is not None]
    return bool(judged) and any(c.call not in DECIDED for c in judged)


def _budget(rule: Rule, boots: int, minutes: float) -> str:
    parts = []
    if rule.max_boots is not None:
        parts.append(f"{boots} of {rule.max_boots} boots used")
    if rule.max_minutes is not None:
        parts.append(f"{minutes:.0f} of {rule.max_minutes:g} minutes used")
    return ", ".join(parts)
