"""The campaign's verdicts from its rows: per shape, the noise between boots with the session as a
block (engine.method.boots), each window's effect against the control fitted over its sessions,
and the calls (engine.method.verdict), the family being the campaign's windows, each asked once.

Every delta at a shape is on one basis (steady windows or whole reps, engine.method.steady): the
control's; a row on another is refused its delta. One function, :func:`judgement`, pure on a
run's state (the console calls it live, the throughput writer on every row, the report after
the run), cached on the rows' reps: a day-long campaign's console redraws often, a rep lands
seldom.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.method.boots import CONTROL_CONFIG, Boot, BootNoise, Fit, Source, declared, fit, unmeasured
from engine.method.design import interim_level
from engine.method.steady import same_basis
from engine.method.verdict import Call, Judged, Rule, Versus, WindowJudged, from_effect, judge, versus
from engine.record.state import RowState, RunState, WindowState
from engine.words import CONTROL, USABLE_ROWS, WHOLE, is_control

Shape = tuple[str, int, float | None]  # class, concurrency, rate


@dataclass(frozen=True)
class Judgement:
    rule: Rule
    noise: dict[Shape, BootNoise]  # per shape: class and load
    # window row key -> the call of its window at that shape (its sessions fitted together):
    # Judged.versus is that fitted delta
    rows: dict[str, Judged] = field(default_factory=dict)
    # row key -> its own delta against its session's control boots (a later control boot's too)
    per_row: dict[str, Versus] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # row key -> why it has no delta
    # row key -> its stacks' parity where they were not token-identical and the delta is given all
    # the same (verdict.allow_different)
    apart: dict[str, str] = field(default_factory=dict)
    windows: dict[str, WindowJudged] = field(default_factory=dict)  # window -> its one question
    # shape -> why its rows are compared over their whole reps (some rows had no steady window)
    whole: dict[Shape, str] = field(default_factory=dict)

    def noise_of(self, cls: str, concurrency: int, rate: float | None) -> BootNoise | None:
        return self.noise.get((cls, concurrency, rate))

    def noise_or_declared(self, cls: str, concurrency: int, rate: float | None) -> BootNoise:
        """The noise between boots a one-off comparison at a shape is judged by: this run's (or
        its baseline's), else the campaign's declared value, else none (no interval)."""
        found = self.noise_of(cls, concurrency, rate)
        if found is not None and found.usable:
            return found
        return fallback_noise(self.rule)

    def versus(self, key: str) -> Versus | None:
        """A row's own delta against its session's control boots."""
        return self.per_row.get(key)

    def questions(self) -> list[Judged]:
        """Each window at each shape once (its sessions' rows share one call)."""
        return list({id(j): j for j in self.rows.values()}.values())

    def effects(self) -> int:
        return sum(j.call == Call.EFFECT for j in self.questions())


def baseline_record(state: RunState, rule: Rule, name: str) -> dict[str, Any]:
    """An earlier run's measured noise per shape, as run_started records it (events.RunStarted)."""
    noise = [{"class": s[0], "concurrency": s[1], "rate": s[2], "boot_mean": n.boot_mean,
              "within": n.within, "df": n.df, "nu": n.nu, "reps": n.reps}
             for s, n in judgement(state, rule).noise.items() if n.source == Source.MEASURED]
    return {"run": name, "noise": noise}


def baseline_of(record: Mapping[str, Any]) -> tuple[dict[Shape, BootNoise], str]:
    """The noise per shape a run_started's baseline record holds (a malformed entry is left out)."""
    out: dict[Shape, BootNoise] = {}
    for n in record.get("noise") or []:
        try:
            rate = None if n.get("rate") is None else float(n["rate"])
            shape = (str(n["class"]), int(n["concurrency"]), rate)
            out[shape] = BootNoise(float(n["boot_mean"]), float(n["within"]), float(n["df"]), float(n["nu"]),
                                   0, 0, Source.MEASURED, float(n["reps"]))
        except (KeyError, TypeError, ValueError):
            continue
    return out, str(record.get("run") or "")


def fallback_noise(rule: Rule) -> BootNoise:
    """Where nothing was measured: the campaign's declared noise between boots, else none."""
    return declared(rule.boot_noise) if rule.boot_noise is not None else unmeasured()


def reps_of(r: RowState | None, whole: bool = False) -> tuple[float, ...] | None:
    """A usable row's reps' tok/s over its basis, or over the whole reps (``whole``)."""
    key = "rep_whole_tok_s" if whole else "rep_tok_s"
    if r is None or r.status not in USABLE_ROWS or not r.row.get(key):
        return None
    reps = tuple(float(x) for x in r.row[key])
    return reps if min(reps) > 0 else None


def _whole_basis(rows: list[RowState]) -> str | None:
    """Why a shape's rows are compared over their whole reps, or None: some were measured over a
    steady window and some over whole reps (a rep with no steady window: short reps, a slow
    window), and a steady figure against a whole one reads the ramp and the tail as the change.
    Every row keeps its whole reps' tok/s, so the shape is compared on that common basis rather
    than losing the rows (where a row has none, an older journal's, same_basis refuses it)."""
    bases = {row.row.get("basis") or WHOLE for row in rows}
    if len(bases) < 2 or any(reps_of(r, whole=True) is None for r in rows):
        return None
    return ("over the whole reps: some rows at this shape had no steady window, and a steady "
            "figure against a whole one is no delta")


_CACHE: dict[Any, Judgement] = {}
# The last state judged (held weakly), its seq and rule, and its judgement. The fold changes a
# state only as its seq moves (engine.record.fold.apply): a state asked again at the same seq
# has the judgement it had, found without its key built again over every row (the console asks
# once per shape it draws, thousands of times a screen on a day-long run). A state at seq 0 was
# not folded from a journal (made by hand, as the report makes one of throughput.csv's rows):
# its key is built every time.
_LAST: tuple[weakref.ref[RunState], tuple[Any, ...], Judgement] | None = None


def judgement(state: RunState, rule: Rule, baseline: Mapping[Shape, BootNoise] | None = None,
              baseline_name: str = "") -> Judgement:
    """``baseline``: an earlier run's noise between boots per shape, pooled with this run's (or
    standing in where this run measured none). With boots added until decided, the calls are at
    the next look's share of the error rate, and what an earlier look decided stays decided."""
    global _LAST
    asked = (state.last_seq, rule, baseline, baseline_name)
    last = _LAST
    if last is not None and state.last_seq and last[0]() is state and last[1] == asked:
        return last[2]
    if rule.until_decided and rule.level is None:
        rule = replace(rule, level=look_level(state, rule))
    if baseline is None and state.baseline:
        baseline, baseline_name = baseline_of(state.baseline)
    usable = {k: (r, reps) for k, r in state.rows.items() if (reps := reps_of(r)) is not None}
    # A window on another stack's parity decides whether its rows have a delta: part of the key,
    # since it may land after its rows (control_position last compares at the control's boot).
    stacks = tuple((k, tuple((c, str(p.get("verdict")), bool(p.get("identical")))
                             for c, p in ws.parity.items()))
                   for k, ws in state.windows.items() if ws.stack)
    key = (rule, tuple((k, reps, reps_of(r, whole=True), r.row.get("basis"), r.row.get("acceptance"),
                        r.session)
                       for k, (r, reps) in usable.items()),
           tuple(state.rows), stacks, tuple((baseline or {}).items()), baseline_name, len(state.looks))
    found = _CACHE.get(key)
    if found is None:
        found = _judge(state, {k: r for k, (r, _) in usable.items()}, rule, baseline or {}, baseline_name)
        _CACHE.clear()  # one run at a time is judged; the previous fold's judgement is stale
        _CACHE[key] = found
    _LAST = (weakref.ref(state), asked, found)
    return found


def _shape(r: RowState) -> Shape:
    return (r.cls, r.concurrency, r.rate)


def _reference(rows: list[RowState]) -> dict[str, Any]:
    """What a shape's rows are measured against: its control boots' basis (the most common, else
    its rows') and acceptance (simulated or measured: engine.method.steady.same_basis)."""
    controls = [r.row for r in rows if is_control(r.window)] or [r.row for r in rows]
    pool = [row.get("basis") or WHOLE for row in controls]
    basis = max(sorted(set(pool)), key=pool.count)
    return {"basis": basis, "acceptance": next((row.get("acceptance") for row in controls
                                                 if (row.get("basis") or WHOLE) == basis), None)}


def _stacks(state: RunState, rule: Rule) -> tuple[dict[str, str], dict[str, str]]:
    """Rows of a window on another stack whose prompts were not token-identical with the
    control's: refused (row key -> why), or given all the same (verdict.allow_different)."""
    refused: dict[str, str] = {}
    apart: dict[str, str] = {}
    for k, r in state.rows.items():
        ws = state.windows.get(f"{r.session}-{r.window}")
        if not r.row or is_control(r.window) or ws is None or not ws.stack:
            continue
        if (gap := parity_gap(ws, r.cls)) is None:
            continue
        if rule.allow_different:
            apart[k] = gap
        else:
            refused[k] = (f"delta withheld: {gap}, so the two stacks were not sent the same tokens "
                          "(verdict.allow_different gives it)")
    return refused, apart


def _judge(state: RunState, usable: Mapping[str, RowState], rule: Rule,
           baseline: Mapping[Shape, BootNoise], baseline_name: str) -> Judgement:
    refused, apart = _stacks(state, rule)
    fitted: dict[Shape, list[RowState]] = {}
    for k, r in usable.items():
        if k not in refused:
            fitted.setdefault(_shape(r), []).append(r)
    noise: dict[Shape, BootNoise] = {}
    fits: dict[Shape, Fit] = {}
    whole: dict[Shape, str] = {}
    for shape, rows in fitted.items():
        if (why_whole := _whole_basis(rows)) is not None:
            whole[shape] = why_whole
        ref = _reference(rows) if why_whole is None else {**_reference(rows), "basis": WHOLE}
        on = []
        for r in rows:
            if (why := same_basis({**r.row, "basis": WHOLE} if why_whole else r.row, ref)) is not None:
                if not is_control(r.window):
                    refused[r.key] = why
                continue
            on.append(r)
        boots = [Boot(r.session, CONTROL_CONFIG if is_control(r.window) else r.window,
                      reps_of(r, shape in whole) or ()) for r in on]
        fits[shape] = found = fit(boots, rule.boot_noise)
        noise[shape] = found.noise.with_baseline(baseline.get(shape), baseline_name)
        fitted[shape] = on
    per_row = _per_row(fitted, noise, whole)
    family: dict[str, dict[Shape, Versus | None]] = {}
    for shape, rows in fitted.items():
        controls = sum(is_control(r.window) for r in rows)
        for r in rows:
            if is_control(r.window):
                continue
            effect = fits[shape].effects.get(r.window)
            family.setdefault(r.window, {})[shape] = (
                from_effect(effect, noise[shape], controls) if effect is not None else None)
    for k, r in state.rows.items():  # a window row with no usable figure is still a question
        if r.row and not is_control(r.window) and k not in refused:
            family.setdefault(r.window, {}).setdefault(_shape(r), None)
    verdicts = judge(family, rule)
    calls = {k: verdicts.rows[(r.window, _shape(r))] for k, r in state.rows.items()
             if r.row and not is_control(r.window) and k not in refused}
    windows = dict(verdicts.windows)
    _keep_decided(state, calls, windows)
    return Judgement(rule, noise, calls, per_row, refused, apart, windows, whole)


def _keep_decided(state: RunState, calls: dict[str, Judged], windows: dict[str, WindowJudged]) -> None:
    """What an earlier look decided stays decided (boots added until decided)."""
    for look in state.looks:
        for k, said in look.get("rows", {}).items():
            if k in calls:
                calls[k] = replace(calls[k], call=Call(said["call"]), decided=(look["look"], said["why"]))
        for w, said in look.get("windows", {}).items():
            if w in windows:
                windows[w] = replace(windows[w], call=Call(said["call"]), decided=look["look"])


def budget_used(state: RunState) -> tuple[int, float]:
    """Boots so far (every server booted, the control's and reruns' included) and the minutes of
    those that ended, boot to stop."""
    booted = [w for w in state.windows.values() if w.started_ts is not None]
    minutes = sum(w.ended_ts - w.started_ts for w in booted
                  if w.ended_ts is not None and w.started_ts is not None) / 60
    return len(booted), max(0.0, minutes)


def budget_fraction(state: RunState, rule: Rule) -> float:
    """The share of the budget used (the larger of boots and minutes; at most 1)."""
    boots, minutes = budget_used(state)
    parts = [boots / rule.max_boots if rule.max_boots else 0.0,
             minutes / rule.max_minutes if rule.max_minutes else 0.0]
    return min(1.0, max(parts))


def look_level(state: RunState, rule: Rule) -> float:
    """The next look's share of the error rate (engine.method.design: a small share in
    proportion to the budget used since the look before; the last look keeps the rest), or the
    last look's once it was taken. A Bonferroni bound over the looks keeps the family-wise rate
    whatever they decide."""
    if state.looks and state.looks[-1].get("final"):
        return float(state.looks[-1]["level"])
    before = float(state.looks[-1]["fraction"]) if state.looks else 0.0
    return interim_level(rule.error_rate, budget_fraction(state, rule), before)


def _per_row(fitted: Mapping[Shape, list[RowState]], noise: Mapping[Shape, BootNoise],
             whole: Mapping[Shape, str]) -> dict[str, Versus]:
    """Each row's own delta against its session's control boots at its shape (a later control
    boot against the session's first), over the whole reps at a shape in ``whole``."""
    out: dict[str, Versus] = {}
    for shape, rows in fitted.items():
        by_session: dict[str, list[RowState]] = {}
        for r in rows:
            if is_control(r.window):
                by_session.setdefault(r.session, []).append(r)
        for r in rows:
            ctls = by_session.get(r.session, [])
            if r.window == CONTROL:
                continue
            if is_control(r.window):
                ctls = [c for c in ctls if c.window == CONTROL]
            w = shape in whole
            if ctls and (v := versus(reps_of(r, w) or (), [reps_of(c, w) or () for c in ctls],
                                     noise[shape])) is not None:
                out[r.key] = v
    return out


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
    noise = j.noise_of(r.cls, r.concurrency, r.rate)
    if noise is not None:
        out |= {"boot_noise": pct(noise.sd) if noise.usable else None, "boot_noise_how": noise.how()}
    v = j.versus(r.key)
    if v is None:
        return out | ({"verdict_why": j.refused[r.key]} if r.key in j.refused else {})
    lo, hi = v.interval() or (None, None)
    out |= {"delta": pct(v.delta), "delta_lo": pct(lo), "delta_hi": pct(hi), "p_value": pct(v.p())}
    call = j.rows.get(r.key)
    apart = (f"given across stacks not sent the same tokens (verdict.allow_different: "
             f"{j.apart[r.key]}); " if r.key in j.apart else "")
    apart += f"{j.whole[_shape(r)]}; " if _shape(r) in j.whole else ""
    if call is not None:
        out |= {"p_adjusted": pct(call.p_adjusted), "verdict": call.call.value,
                "verdict_why": apart + call.why()}
    else:
        out |= {"verdict": "", "verdict_why": "a later control boot: the noise between boots"}
    return out
