"""Synthetic campaigns for the verdicts' error rates: ruler's own judgement (engine.record.judgement)
on runs whose truth is known. Each session boots the control (as ``control_position`` places it)
and its windows; every boot moves by its shape's ``boot`` noise (sd of log tok/s: per class, and
per load where given; Gaussian or Student's t with 3 df scaled to the same sd; correlated across a
boot's shapes by ``rho``), every session by ``shift`` at each shape, every rep within a boot by
``rep`` noise; a window's true effect is a factor on its tok/s at every shape.
bench/verdict_sim.py prints the tables; the unit tests hold the error rates."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.method.design import control_boots, interleave
from engine.method.verdict import Call, Rule
from engine.record.judgement import judgement
from engine.record.looks import take
from engine.record.state import RowState, RunState
from engine.words import CONTROL, RowStatus, is_control


@dataclass(frozen=True)
class Noise:
    """The truth a campaign is drawn from."""

    boot: float | Mapping[str, float] = 0.03  # sd between boots: one, or per class
    rep: float = 0.03  # sd of reps within a boot
    tails: str = "normal"  # normal | t3: the boots' noise
    shift: float = 0.0  # sd of a session's shift at each shape
    rho: float = 0.0  # the share of a boot's noise common to all its shapes
    by_load: Mapping[int, float] = field(default_factory=dict)  # a load's boot noise over the class's

    def boot_sd(self, cls: str, load: int) -> float:
        base = self.boot if isinstance(self.boot, (int, float)) else self.boot[cls]
        return float(base) * self.by_load.get(load, 1.0)


@dataclass(frozen=True)
class Design:
    windows: int = 8  # window configurations, each in every session
    sessions: int = 1
    loads: tuple[int, ...] = (1, 8, 32)
    classes: tuple[str, ...] = ("prose", "code")
    reps: int = 3
    control: str = "both"  # control_position: first | both | interleaved
    boot_s: float = 60.0  # a boot's seconds beside its passes: loading, warm-up, quality checks
    rep_s: float = 4.0  # one pass of one shape (a rep, or the warm pass)

    def order(self) -> list[str]:
        names = [f"w{i}" for i in range(self.windows)]
        if self.control == "first":
            return [CONTROL, *names]
        return interleave(names, control_boots(self.windows, self.control))

    def boots(self) -> int:
        return self.sessions * len(self.order())

    def rep_count(self) -> int:
        return self.boots() * len(self.loads) * len(self.classes) * self.reps

    def boot_minutes(self) -> float:
        """One boot's GPU minutes: its own seconds and every shape's warm pass and reps."""
        return (self.boot_s + len(self.loads) * len(self.classes) * (1 + self.reps) * self.rep_s) / 60


def _draw(rng: np.random.Generator, tails: str, size: int | tuple[int, ...]) -> np.ndarray:
    if tails == "t3":
        return rng.standard_t(3, size) / math.sqrt(3)
    return rng.normal(0, 1, size)


Effects = Mapping[int, float | Mapping[int, float]]  # window index -> its effect, or per load


def truth(effects: Effects, window: int, load: int) -> float:
    found = effects.get(window, 0.0)
    return float(found.get(load, 0.0)) if isinstance(found, Mapping) else float(found)


def campaign(design: Design, noise: Noise, effects: Effects,
             rng: np.random.Generator) -> RunState:
    """One synthetic run: ``effects`` maps a window's index to its true relative effect."""
    st = RunState()
    for s in range(1, design.sessions + 1):
        add_session(st, design, noise, effects, rng, f"s{s}", design.order())
    return st


def add_session(st: RunState, design: Design, noise: Noise, effects: Effects,
                rng: np.random.Generator, session: str, order: list[str]) -> None:
    """One session's boots in ``order``, each lasting the design's boot minutes."""
    shapes = [(cls, c) for cls in design.classes for c in design.loads]
    shift = rng.normal(0, noise.shift, len(shapes)) if noise.shift else np.zeros(len(shapes))
    for name in order:
        ws = st.window(session, name)
        ws.started_ts = float(len(st.order)) * design.boot_minutes() * 60
        ws.ended_ts = ws.started_ts + design.boot_minutes() * 60
        common = _draw(rng, noise.tails, 1)[0]
        own = _draw(rng, noise.tails, len(shapes))
        boot = math.sqrt(noise.rho) * common + math.sqrt(1 - noise.rho) * own
        for i, (cls, c) in enumerate(shapes):
            effect = 0.0 if is_control(name) else math.log1p(truth(effects, int(name[1:]), c))
            level = effect + shift[i] + noise.boot_sd(cls, c) * boot[i]
            reps = [float(100 * c * math.exp(level + e)) for e in rng.normal(0, noise.rep, design.reps)]
            r = RowState(session, name, cls, c, attempt=1, status=RowStatus.OK,
                         row={"rep_tok_s": reps, "agg_tok_s": float(np.median(reps))})
            st.rows[r.key] = r


def sequential(design: Design, noise: Noise, effects: Effects, rule: Rule,
               rng: np.random.Generator) -> RunState:
    """A run whose boots are added until decided (engine.record.looks): the design's sessions,
    then a session of the undecided windows after each look, until the last."""
    st = campaign(design, noise, effects, rng)
    windows = [f"w{i}" for i in range(design.windows)]
    sessions = [f"s{s}" for s in range(1, design.sessions + 1)]
    while True:
        look = take(st, rule, design.control, windows, sessions)
        st.looks.append(look.event())
        if look.final:
            return st
        st.added[look.session] = look.order
        add_session(st, design, noise, effects, rng, look.session, look.order)


@dataclass(frozen=True)
class Rates:
    campaigns: int
    any_false: float  # share of campaigns with at least one false effect (the family-wise rate)
    false_per: float  # false effects per campaign
    power: float  # share of truly changed rows called an effect in the right direction
    none_true: float  # share of unchanged rows shown "no observable effect"
    windows_found: float  # share of truly changed windows whose one question was called an effect
    minutes: float  # GPU minutes per campaign (its boots at the design's boot minutes)
    right: float  # window rows (a window at a shape, its sessions together) decided rightly per
    # campaign: an effect called in its direction, or shown within the margin where the truth is
    wrong_none: float  # share of campaigns with a row shown within the margin whose truth is not


def rates(design: Design, rule: Rule, noise: Noise, effect: float, campaigns: int, seed: int = 1,
          changed: int = 0, effects: Effects | None = None) -> Rates:
    """The rule over ``campaigns`` synthetic runs: the first ``changed`` windows truly move by
    ``effect`` (or ``effects`` says each window's), the rest are A/A. With ``rule.until_decided``
    boots are added until decided (engine.record.looks)."""
    rng = np.random.default_rng(seed)
    truly = effects if effects is not None else dict.fromkeys(range(changed), effect)
    anyf = false = hits = nulls = shown = real = found = right = wrong_none = 0
    boots = 0
    for _ in range(campaigns):
        st = (sequential(design, noise, truly, rule, rng) if rule.until_decided
              else campaign(design, noise, truly, rng))
        boots += sum(w.started_ts is not None for w in st.windows.values())
        j = judgement(st, rule)
        wrong = bad_none = 0
        questions = {(r.window, r.cls, r.concurrency): (r, judged) for key, judged in j.rows.items()
                     if (r := st.rows[key]) is not None}
        for r, judged in questions.values():
            t = truth(truly, int(r.window[1:]), r.concurrency)
            v = judged.versus
            called = judged.call == Call.EFFECT and v is not None
            if t != 0:
                real += 1
                hits += called and v is not None and (v.log_delta > 0) == (t > 0)
            else:
                nulls += 1
                wrong += called
                shown += judged.call == Call.NONE
            within = abs(t) < rule.margin
            right += (called and t != 0 and v is not None and (v.log_delta > 0) == (t > 0)) or \
                (judged.call == Call.NONE and within)
            bad_none += judged.call == Call.NONE and not within
        found += sum(j.windows[f"w{i}"].call == Call.EFFECT for i in truly if f"w{i}" in j.windows)
        anyf += wrong > 0
        false += wrong
        wrong_none += bad_none > 0
    n = campaigns
    return Rates(n, anyf / n, false / n, hits / real if real else math.nan,
                 shown / nulls if nulls else math.nan,
                 found / (len(truly) * n) if truly else math.nan,
                 boots * design.boot_minutes() / n, right / n, wrong_none / n)
