"""``ruler plan CAMPAIGN.yaml [--from RUN_DIR ...]``: what the campaign will decide, and at what GPU
time, from the noise an earlier run measured (a pilot) or the one it declares.

Per class and load: the noise between boots (a boot's mean at the campaign's reps), the sessions
at which a window moving by ``verdict.detect`` is called at ``verdict.power``, and those at which
a window that does not move is shown within ``verdict.margin``; each session's GPU minutes from
the pilot's boots. The level is the campaign's error rate over its windows (the closed test's
first step for a window moving at every shape; one that moves at a single shape pays for its
other shapes too). The reps a boot the costs favour (engine.method.design.best_reps).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.campaign.load import load_campaign
from engine.campaign.spec import Campaign
from engine.errors import BadInput
from engine.method.boots import BootNoise, declared
from engine.method.design import best_reps, control_boots, sessions_needed
from engine.record.judgement import Shape, judgement
from engine.record.results import JOURNAL
from engine.record.snapshot import fold_journal
from engine.record.state import RunState
from engine.words import load_text

MOST = 50  # sessions past which a shape is said to want more


@dataclass(frozen=True)
class Pilot:
    """What earlier runs measured: the noise per shape (their degrees of freedom pooled), and a
    boot's own seconds and a pass's."""

    names: list[str]
    noise: dict[Shape, BootNoise]
    boot_s: float | None  # a boot's seconds to ready, with its quality checks
    pass_s: float | None  # one pass (a rep or a warm pass) of one shape


def _times(state: RunState) -> tuple[list[float], list[float]]:
    boots, passes = [], []
    shapes_of: dict[str, int] = {}
    for r in state.rows.values():
        shapes_of[f"{r.session}-{r.window}"] = shapes_of.get(f"{r.session}-{r.window}", 0) + 1 + len(
            r.reps.get(r.attempt, {}))
    for key, ws in state.windows.items():
        if ws.started_ts is None or ws.ended_ts is None or not ws.boot_s or not shapes_of.get(key):
            continue
        boots.append(ws.boot_s)
        passes.append(max(0.0, ws.ended_ts - ws.started_ts - ws.boot_s) / shapes_of[key])
    return boots, passes


def pilot(campaign: Campaign, runs: Sequence[Path]) -> Pilot:
    noise: dict[Shape, BootNoise] = {}
    boots: list[float] = []
    passes: list[float] = []
    for run in runs:
        if not (run / JOURNAL).is_file():
            raise BadInput(f"{run} is not a ruler run directory (no {JOURNAL})")
        state = fold_journal(run / JOURNAL)
        found = judgement(state, campaign.verdict.rule()).noise
        for shape, n in found.items():
            if n.source != "measured":
                continue
            noise[shape] = n.with_baseline(noise[shape], "") if shape in noise else n
        b, p = _times(state)
        boots += b
        passes += p
    return Pilot([r.name for r in runs], noise,
                 statistics.median(boots) if boots else None, statistics.median(passes) if passes else None)


def plan(campaign: Campaign, runs: Sequence[Path]) -> dict[str, Any]:
    p = pilot(campaign, runs)
    v = campaign.verdict
    wl = campaign.workload
    windows = max(1, max((len(ws) for ws in campaign.sessions.values()), default=1))
    position = campaign.control_position
    controls = control_boots(windows, position) if position in ("both", "interleaved") else 1
    level = v.error_rate / windows
    loads = [(c, None) for c in wl.concurrency] + [(0, r) for r in wl.rate]
    shapes = len(wl.classes) * len(loads)
    boot_min = pass_min = None
    if p.boot_s is not None and p.pass_s is not None:
        boot_min, pass_min = p.boot_s / 60, p.pass_s / 60
    per_boot = boot_min + shapes * (1 + wl.reps) * pass_min if boot_min is not None and pass_min is not None \
        else None
    rows = []
    for cls in wl.classes:
        for c, rate in loads:
            n = p.noise.get((cls, c, rate))
            source = "measured"
            if n is None and v.boot_noise is not None:
                n, source = declared(v.boot_noise), "declared"
            row: dict[str, Any] = {"class": cls, "load": load_text(c, rate),
                                   "source": source if n else "none"}
            if n is not None:
                u = n.between + (n.within / wl.reps if n.within else n.boot_mean - n.between)
                row |= {"boot_sd": round(math.expm1(math.sqrt(max(u, 0.0))), 4),
                        "between_sd": round(math.expm1(math.sqrt(n.between)), 4),
                        "within_sd": round(math.expm1(math.sqrt(n.within)), 4), "df": n.df,
                        "effect_sessions": sessions_needed(u, windows, controls, level, v.detect, v.power,
                                                           most=MOST),
                        "none_sessions": sessions_needed(u, windows, controls, v.error_rate, v.margin,
                                                         v.power, equivalence=True, most=MOST),
                        "best_reps": best_reps(n.between, n.within,
                                               (p.boot_s or 0) + shapes * (p.pass_s or 0),
                                               shapes * (p.pass_s or 0)) if p.pass_s else None}
            rows.append(row)
    session_min = per_boot * (windows + controls) if per_boot is not None else None
    return {"campaign": campaign.name, "from": p.names, "windows": windows, "controls_a_session": controls,
            "control_position": position, "reps": wl.reps, "level": level, "detect": v.detect,
            "margin": v.margin, "power": v.power, "boot_minutes": per_boot, "session_minutes": session_min,
            "shapes": rows}


def _sessions(n: int | None) -> str:
    return f"more than {MOST}" if n is None else str(n)


def text(out: dict[str, Any]) -> list[str]:
    head = (f"ruler plan: {out['campaign']}: {out['windows']} windows a session, the control booted "
            f"{out['controls_a_session']} times a session ({out['control_position']}), {out['reps']} reps; "
            f"a window called at {out['level']:.3g} (the error rate over {out['windows']} windows), "
            f"{out['power']:.0%} power")
    src = (f"noise between boots measured in {', '.join(out['from'])}" if out["from"] else
           "no pilot (--from RUN_DIR): the campaign's declared verdict.boot_noise where it has one")
    lines = [head, src, ""]
    cols = ["class", "load", "a boot (sd)", "between", "within", "df",
            f"call ±{out['detect']:.0%}", f"show within ±{out['margin']:.0%}", "reps a boot"]
    lines.append("  ".join(f"{c:>12}" for c in cols))
    for r in out["shapes"]:
        if "boot_sd" not in r:
            lines.append(f"{r['class']:>12}  {r['load']:>12}  no noise measured at this shape: a pilot "
                         "that boots the control twice in a session measures it")
            continue
        cells = [r["class"], r["load"], f"{r['boot_sd']:.1%}", f"{r['between_sd']:.1%}",
                 f"{r['within_sd']:.1%}",
                 f"{r['df']:g}", _sessions(r["effect_sessions"]), _sessions(r["none_sessions"]),
                 str(r["best_reps"] or "-")]
        lines.append("  ".join(f"{c:>12}" for c in cells))
    lines.append("")
    known = [r for r in out["shapes"] if "boot_sd" in r]
    if out["session_minutes"] is not None:
        lines.append(f"A session: about {out['session_minutes']:.0f} GPU minutes "
                     f"({out['boot_minutes']:.1f} a boot, from the pilot's boots and passes).")
    for what, key in (("call every shape's ±" + f"{out['detect']:.0%}", "effect_sessions"),
                      ("show every shape within ±" + f"{out['margin']:.0%}", "none_sessions")):
        need = [r[key] for r in known]
        if need and all(n is not None for n in need):
            most = max(need)
            minutes = out["session_minutes"]
            mins = f", about {most * minutes:.0f} GPU minutes" if minutes else ""
            lines.append(f"To {what}: {most} sessions{mins}.")
        elif need:
            hard = [f"{r['class']} {r['load']}" for r in known if r[key] is None]
            lines.append(f"To {what}: more than {MOST} sessions at {', '.join(hard)} (its noise between "
                         "boots is too wide for the margin: state a wider margin, or leave that shape out)")
    lines.append("Or let the run decide: verdict: {until_decided: true, max_boots: N} adds sessions of the "
                 "windows not yet decided until each is or the budget ends.")
    return lines


def cmd_plan(file: str, runs: Sequence[str], as_json: bool) -> int:
    campaign = load_campaign(file)
    out = plan(campaign, [Path(r) for r in runs])
    print(json.dumps(out, indent=2) if as_json else "\n".join(text(out)))
    return 0
