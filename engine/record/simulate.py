"""Synthetic campaigns for the verdicts' error rates: ruler's own judgement (engine.record.judged)
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
from engine.record.judged import judgement
from engine.record.state import RowState, RunState, WindowState
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

    def order(self) -> list[str]:
        names = [f"w{i}" for i in range(self.windows)]
        if self.control == "first":
            return [CONTROL, *names]
        return interleave(names, control_boots(self.windows, self.control))

    def boots(self) -> int:
        return self.sessions * len(self.order())

    def rep_count(self) -> int:
        return self.boots() * len(self.loads) * len(self.classes) * self.reps


def _draw(rng: np.random.Generator, tails: str, size: int | tuple[int, ...]) -> np.ndarray:
    if tails == "t3":
        return rng.standard_t(3, size) / math.sqrt(3)
    return rng.normal(0, 1, size)


def campaign(design: Design, noise: Noise, effects: Mapping[int, float],
             rng: np.random.Generator) -> RunState:
    """One synthetic run: ``effects`` maps a window's index to its true relative effect."""
    st = RunState()
    shapes = [(cls, c) for cls in design.classes for c in design.loads]
    for s in range(1, design.sessions + 1):
        session = f"s{s}"
        shift = rng.normal(0, noise.shift, len(shapes)) if noise.shift else np.zeros(len(shapes))
        for name in design.order():
            st.windows[f"{session}-{name}"] = WindowState(session, name)
            st.order.append(f"{session}-{name}")
            effect = 0.0 if is_control(name) else math.log1p(effects.get(int(name[1:]), 0.0))
            common = _draw(rng, noise.tails, 1)[0]
            own = _draw(rng, noise.tails, len(shapes))
            boot = math.sqrt(noise.rho) * common + math.sqrt(1 - noise.rho) * own
            for i, (cls, c) in enumerate(shapes):
                level = effect + shift[i] + noise.boot_sd(cls, c) * boot[i]
                reps = [float(100 * c * math.exp(level + e)) for e in rng.normal(0, noise.rep, design.reps)]
                r = RowState(session, name, cls, c, attempt=1, status=RowStatus.OK,
                             row={"rep_tok_s": reps, "agg_tok_s": float(np.median(reps))})
                st.rows[r.key] = r
    return st


@dataclass(frozen=True)
class Rates:
    campaigns: int
    any_false: float  # share of campaigns with at least one false effect (the family-wise rate)
    false_per: float  # false effects per campaign
    power: float  # share of truly changed rows called an effect in the right direction
    none_true: float  # share of unchanged rows shown "no observable effect"
    windows_found: float  # share of truly changed windows whose one question was called an effect


def rates(design: Design, rule: Rule, noise: Noise, effect: float, campaigns: int, seed: int = 1,
          changed: int = 0) -> Rates:
    """The rule over ``campaigns`` synthetic runs: the first ``changed`` windows truly move by
    ``effect``, the rest are A/A."""
    rng = np.random.default_rng(seed)
    effects = dict.fromkeys(range(changed), effect)
    anyf = false = hits = nulls = shown = real = found = 0
    for _ in range(campaigns):
        j = judgement(campaign(design, noise, effects, rng), rule)
        wrong = 0
        for key, judged in j.rows.items():
            index = int(key.split("-", 1)[1].split("/", 1)[0][1:])
            if index in effects:
                real += 1
                v = judged.versus
                hits += judged.call == Call.EFFECT and v is not None and (v.log_delta > 0) == (effect > 0)
            else:
                nulls += 1
                wrong += judged.call == Call.EFFECT
                shown += judged.call == Call.NONE
        found += sum(j.windows[f"w{i}"].call == Call.EFFECT for i in effects if f"w{i}" in j.windows)
        anyf += wrong > 0
        false += wrong
    return Rates(campaigns, anyf / campaigns, false / campaigns, hits / real if real else math.nan,
                 shown / nulls if nulls else math.nan,
                 found / (changed * campaigns) if changed else math.nan)
