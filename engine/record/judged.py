"""The campaign's verdicts from its rows: the noise between boots per load, and each window row's
call against its session's control boots, the family being every window row of the run.

Both rows of a delta are on one basis (steady windows or whole reps, engine.method.steady), or
there is no delta. One function, :func:`judgement`, pure on a run's state (the console calls it
live, the throughput writer on every row, the report after the run), cached on the rows' reps: a
day-long campaign's console redraws often, a rep lands seldom.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.method.boots import Boot, BootNoise, measure
from engine.method.steady import same_basis
from engine.method.verdict import Call, Judged, Rule, Versus, judge, pool, versus
from engine.record.state import RowState, RunState, WindowState
from engine.words import CONTROL, CONTROL_AGAIN, CONTROL_BOOTS, USABLE_ROWS, is_control, row_key

Load = tuple[int, float | None]  # concurrency, rate


@dataclass(frozen=True)
class Judgement:
    rule: Rule
    noise: dict[Load, BootNoise]  # per load, pooled over classes, sessions and places
    # window row key -> its call: the window's at that shape, its sessions pooled (Judged.versus)
    rows: dict[str, Judged] = field(default_factory=dict)
    # row key -> its own delta against its session's control boots (the control again's too)
    per_row: dict[str, Versus] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # row key -> why it has no delta
    # row key -> its stacks' parity where they were not token-identical and the delta is given all
    # the same (verdict.allow_different)
    apart: dict[str, str] = field(default_factory=dict)

    def noise_at(self, concurrency: int, rate: float | None) -> BootNoise | None:
        return self.noise.get((concurrency, rate))

    def versus(self, key: str) -> Versus | None:
        """A row's own delta against its session's control boots."""
        return self.per_row.get(key)

    def questions(self) -> list[Judged]:
        """Each window at each class and load once (its sessions' rows share one call)."""
        return list({id(j): j for j in self.rows.values()}.values())

    def effects(self) -> int:
        return sum(j.call == Call.EFFECT for j in self.questions())


def reps_of(r: RowState | None) -> tuple[float, ...] | None:
    if r is None or r.status not in USABLE_ROWS or not r.row.get("rep_tok_s"):
        return None
    reps = tuple(float(x) for x in r.row["rep_tok_s"])
    return reps if min(reps) > 0 else None


def _stage(rows: list[RowState]) -> int | None:
    """Stein's first stage shared by a window row and its control boots (engine.method.precision):
    the smallest ``stage_reps`` when all took reps to a precision, else None (every rep)."""
    stages = [r.row.get("stage_reps") for r in rows]
    return min(s for s in stages if isinstance(s, int)) if all(isinstance(s, int) for s in stages) \
        else None


_CACHE: dict[Any, Judgement] = {}
# The last state judged (held weakly), its seq and rule, and its judgement. The fold changes a
# state only as its seq moves (engine.record.state.apply): a state asked again at the same seq
# has the judgement it had, found without its key built again over every row (the console asks
# once per shape it draws, thousands of times a screen on a day-long run). A state at seq 0 was
# not folded from a journal (made by hand, as the report makes one of throughput.csv's rows):
# its key is built every time.
_LAST: tuple[weakref.ref[RunState], int, Rule, Judgement] | None = None


def judgement(state: RunState, rule: Rule) -> Judgement:
    global _LAST
    last = _LAST
    if last is not None and state.last_seq and last[0]() is state and last[1] == state.last_seq \
            and last[2] == rule:
        return last[3]
    usable = {k: (r, reps) for k, r in state.rows.items() if (reps := reps_of(r)) is not None}
    # A window on another stack's parity decides whether its rows have a delta: part of the key,
    # since it may land after its rows (control_position last compares at the control's boot).
    stacks = tuple((k, tuple((c, str(p.get("verdict")), bool(p.get("identical")))
                             for c, p in ws.parity.items()))
                   for k, ws in state.windows.items() if ws.stack)
    key = (rule, tuple((k, reps, r.row.get("stage_reps"), state.session_places.get(r.session, ""))
                       for k, (r, reps) in usable.items()), tuple(state.rows), stacks)
    found = _CACHE.get(key)
    if found is None:
        found = _judge(state, {k: r for k, (r, _) in usable.items()}, rule)
        _CACHE.clear()  # one run at a time is judged; the previous fold's judgement is stale
        _CACHE[key] = found
    _LAST = (weakref.ref(state), state.last_seq, rule, found)
    return found


def _judge(state: RunState, usable: Mapping[str, RowState], rule: Rule) -> Judgement:
    boots: dict[Load, list[Boot]] = {}
    for r in usable.values():
        group = (state.session_places.get(r.session, ""), CONTROL if is_control(r.window) else r.window,
                 r.cls)
        boots.setdefault((r.concurrency, r.rate), []).append(Boot(group, reps_of(r) or ()))
    noise = {load: measure(bs, rule.boot_noise) for load, bs in boots.items()}
    per_row: dict[str, Versus] = {}
    units: dict[tuple[str, str, int, float | None], list[str]] = {}  # a window's shape: its rows
    refused: dict[str, str] = {}
    apart: dict[str, str] = {}
    for k, r in state.rows.items():
        if r.window == CONTROL or not r.row:
            continue
        if r.window != CONTROL_AGAIN:
            units.setdefault((r.window, r.cls, r.concurrency, r.rate), []).append(k)
        ws = state.windows.get(f"{r.session}-{r.window}")
        gap = parity_gap(ws, r.cls) if ws is not None and ws.stack else None
        if gap is not None:
            if not rule.allow_different:
                refused[k] = (f"delta withheld: {gap}, so the two stacks were not sent the same "
                              "tokens (verdict.allow_different gives it)")
                continue
            apart[k] = gap
        mine = usable.get(k)
        ctl_windows = (CONTROL,) if r.window == CONTROL_AGAIN else CONTROL_BOOTS
        ctls = [c for w in ctl_windows
                if (c := usable.get(row_key(r.session, w, r.cls, r.concurrency, r.rate))) is not None]
        load_noise = noise.get((r.concurrency, r.rate))
        if mine is not None and ctls:
            unlike = [why for c in ctls if (why := same_basis(mine.row, c.row))]
            ctls = [c for c in ctls if not same_basis(mine.row, c.row)]
            if not ctls:
                refused[k] = unlike[0]
        if mine is not None and ctls and load_noise is not None:
            v = versus(reps_of(mine) or (), [reps_of(c) or () for c in ctls], load_noise,
                       _stage([mine, *ctls]))
            if v is not None:
                per_row[k] = v
    # The family: a window's shape, its sessions' deltas pooled (a window in several sessions is
    # one question asked several times); the control again is the noise, not a question.
    keys = list(units.values())
    family = [pool(vs) if (vs := [per_row[k] for k in ks if k in per_row]) else None for ks in keys]
    calls = judge(family, rule)
    rows = {k: call for ks, call in zip(keys, calls, strict=True) for k in ks}
    return Judgement(rule, noise, rows, per_row, refused, apart)


def parity_gap(ws: WindowState, cls: str) -> str | None:
    """Why a window on another stack is not the same measurement as its control at a class, in
    words: its prompts not shown token-identical (the parity event's verdict), or not compared at
    all; None when they were token-identical."""
    found = ws.parity.get(cls)
    if found is None:
        return f"no parity shown between {ws.stack} and the control's stack on class {cls}"
    if found.get("identical"):
        return None
    return f"{ws.stack} against the control's stack on class {cls}: {found.get('verdict')}"



def pct(x: float | None, digits: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


def row_columns(j: Judgement, r: RowState) -> dict[str, Any]:
    """throughput.csv's columns of a row's delta, its noise between boots and its call."""
    out: dict[str, Any] = {}
    noise = j.noise_at(r.concurrency, r.rate)
    if noise is not None:
        out |= {"boot_noise": pct(noise.sd), "boot_noise_how": noise.how()}
    v = j.versus(r.key)
    if v is None:
        return out | ({"verdict_why": j.refused[r.key]} if r.key in j.refused else {})
    lo, hi = v.interval() or (None, None)
    out |= {"delta": pct(v.delta), "delta_lo": pct(lo), "delta_hi": pct(hi), "p_value": pct(v.p())}
    call = j.rows.get(r.key)
    apart = (f"given across stacks not sent the same tokens (verdict.allow_different: "
             f"{j.apart[r.key]}); " if r.key in j.apart else "")
    if call is not None:
        out |= {"p_adjusted": pct(call.p_adjusted), "verdict": call.call.value,
                "verdict_why": apart + call.why()}
    else:
        out |= {"verdict": "", "verdict_why": "the control booted again: the noise between boots"}
    return out
