"""Synthetic campaigns for the verdicts' error rates: ruler's own judgement (engine.record.judged)
on runs whose truth is known. Each session boots the control (and, with ``control_position:
both``, the control again) and its windows; every boot moves by ``boot_noise`` (sd of log tok/s),
every rep within a boot by ``rep_noise``; a window's true effect is a factor on its tok/s.
bench/verdict_sim.py prints the tables; the unit tests hold the error rates."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engine.method.verdict import Call, Rule
from engine.record.judged import judgement
from engine.record.state import RowState, RunState, WindowState
from engine.words import CONTROL, CONTROL_AGAIN, RowStatus


@dataclass(frozen=True)
class Design:
    windows: int = 8  # window configurations, each in every session
    sessions: int = 1
    loads: tuple[int, ...] = (1, 8, 64)
    classes: tuple[str, ...] = ("prose", "code")
    reps: int = 3
    again: bool = True  # the control booted again at each session's end

    def boots(self) -> int:
        return self.sessions * (self.windows + 1 + self.again)

    def rep_count(self) -> int:
        return self.boots() * len(self.loads) * len(self.classes) * self.reps


def campaign(design: Design, rep_noise: float, boot_noise: float, effects: Mapping[int, float],
             rng: np.random.Generator) -> RunState:
    """One synthetic run: ``effects`` maps a window's index to its true relative effect."""
    st = RunState()
    for s in range(1, design.sessions + 1):
        session = f"s{s}"
        names = [CONTROL, *(f"w{i}" for i in range(design.windows))]
        names += [CONTROL_AGAIN] if design.again else []
        for name in names:
            st.windows[f"{session}-{name}"] = WindowState(session, name)
            st.order.append(f"{session}-{name}")
            shift = 0.0 if not name.startswith("w") else math.log1p(effects.get(int(name[1:]), 0.0))
            boot = rng.normal(0, boot_noise, (len(design.classes), len(design.loads)))
            for i, cls in enumerate(design.classes):
                for j, c in enumerate(design.loads):
                    reps = [float(100 * c * math.exp(shift + boot[i, j] + e))
                            for e in rng.normal(0, rep_noise, design.reps)]
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


def rates(design: Design, rule: Rule, rep_noise: float, boot_noise: float, effect: float,
          campaigns: int, seed: int = 1, changed: int = 0) -> Rates:
    """The rule over ``campaigns`` synthetic runs: the first ``changed`` windows truly move by
    ``effect``, the rest are A/A."""
    rng = np.random.default_rng(seed)
    effects = dict.fromkeys(range(changed), effect)
    anyf = false = hits = nulls = shown = real = 0
    for _ in range(campaigns):
        j = judgement(campaign(design, rep_noise, boot_noise, effects, rng), rule)
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
        anyf += wrong > 0
        false += wrong
    return Rates(campaigns, anyf / campaigns, false / campaigns, hits / real if real else math.nan,
                 shown / nulls if nulls else math.nan)
