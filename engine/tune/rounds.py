"""The rounds of a tune: what each asks (its candidates), which round follows which, the incumbent a
round leaves, and the campaign file a round runs (the base with the incumbent as its control).

- an *axes* round: every flag of the space alone, each candidate value a window of a sweep, each
  sweep in a session of its own with the incumbent booted again as its control.
- a *combine* round, when the axes round before it had two winners or more: the best single
  change is the control, the others' winners on top of it the one window.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.campaign import sweep
from engine.campaign.secrets import holds_secret
from engine.campaign.yamlmarks import Issue, load_marked
from engine.errors import BadInput
from engine.record.trade import Outcome, value_text
from engine.tune.spec import Tune

SWEEP_NAME = 40  # a sweep's name at most: its windows add a value's label to it, within 64


@dataclass
class Candidate:
    """One window of a round and what was decided of it."""

    round: int
    kind: str  # axes | combine
    session: str
    window: str
    change: dict[str, Any]  # flag -> value, over the round's control
    lossy: bool
    delta: float | None = None
    lo: float | None = None
    hi: float | None = None
    call: str = Outcome.NO_FIGURE
    quality: dict[str, str] = field(default_factory=dict)  # check -> verdict (and KL mean)
    quality_holds: bool = False
    kept: bool = False
    why: str = ""
    run: str = ""
    receipts: list[str] = field(default_factory=list)


@dataclass
class Round:
    number: int
    kind: str
    run: str
    control: dict[str, Any]  # the round's control args (the incumbent, or the best single change)
    candidates: list[Candidate] = field(default_factory=list)
    boots: int = 0
    seconds: float = 0.0  # from the first window's start to the last one's end
    argv: dict[str, list[str]] = field(default_factory=dict)  # window (and control) -> its argv


Windows = list[dict[str, Any]]


def sweep_names(flags: list[str]) -> dict[str, str]:
    """Each flag's sweep name: the flag as a name (``--spec-draft-n-max`` -> ``spec-draft-n-max``),
    cut to :data:`SWEEP_NAME` characters; two flags that would share one (the same first 40
    characters) take ``-2``, ``-3``... in the space's order, so every round names its windows the
    same way."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for flag in flags:
        base = sweep.label(flag).lstrip("-_")[:SWEEP_NAME].rstrip("-_") or "flag"
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base[:SWEEP_NAME - len(str(n)) - 1].rstrip('-_')}-{n}"
        taken.add(name)
        out[flag] = name
    return out


def value_labels(flag: str, name: str, values: list[Any]) -> list[str]:
    """The label of each value's window (``{name}-{label}``): the value as a name (``5``,
    ``q8_0``), unless two values share one, one gives no window name, or a value is a secret, by
    the flag's name or its own shape (a window's name is in directory names, the journal and every
    receipt, past any redaction): then ``v1``, ``v2``... by position."""
    labels = [sweep.label(v) for v in values]
    fits = all(t and sweep.WINDOW_NAME.match(f"{name}-{t}") and len(f"{name}-{t}") <= sweep.MAX_NAME
               for t in labels)
    if any(holds_secret(flag, v) for v in [None, *values]) or not fits or len(set(labels)) < len(labels):
        return [f"v{i}" for i in range(1, len(values) + 1)]
    return labels


def question(control: dict[str, Any], change: dict[str, Any]) -> str:
    """A candidate as the question it asks: this change over that control."""
    return json.dumps([control, change], sort_keys=True, default=list)


def asked(done: list[Round]) -> dict[str, int]:
    """Every question the rounds done have answered, and the round that answered it."""
    return {question(r.control, c.change): r.number for r in done for c in r.candidates}


def axes_plan(tune: Tune, incumbent: dict[str, Any], number: int,
              answered: dict[str, int] | None = None) -> tuple[Windows, list[Candidate], list[Issue]]:
    """Each flag's values alone over the incumbent, but for those a round has already judged over
    this same incumbent (a combine round that kept the best single change has judged the others'
    winners over it): asking again would spend boots on a second draw of an answered question.
    The windows, the candidates, and what the sweeps' expansion refused (nothing, for a tune
    file :func:`engine.tune.spec.load_tune` accepted)."""
    names = sweep_names(list(tune.spec.space))
    windows: Windows = []
    for flag, cand in tune.spec.space.items():
        values = [v for v in cand.values if v != incumbent.get(flag)
                  and question(incumbent, {flag: v}) not in (answered or {})]
        if not values:
            continue
        plain = [list(v) if isinstance(v, tuple) else v for v in values]
        labels = value_labels(flag, names[flag], plain)
        windows.append({"name": names[flag], "axis": flag, "lossy": cand.lossy,
                        "sweep": {"args": {flag: dict(zip(labels, plain, strict=True))}}})
    expanded = sweep.expand({"windows": windows, "sessions": {}})
    session_of = {w: s for s, ws in expanded.data.get("sessions", {}).items() for w in ws}
    plan = []
    for w in expanded.data["windows"]:
        flag, value = next(iter(w["change"]["args"].items()))
        plan.append(Candidate(number, "axes", session_of[w["name"]], w["name"], {flag: value},
                              tune.spec.space[flag].lossy))
    issues: list[Issue] = [(("space", _flag_at(windows, path)), True, message)
                           for path, _, message in expanded.issues]
    return windows, plan, issues


def _flag_at(windows: Windows, path: tuple[object, ...]) -> str:
    """The flag of the sweep entry a path of the expansion points into."""
    i = path[1] if len(path) > 1 else None
    return next(iter(windows[i]["sweep"]["args"])) if isinstance(i, int) and i < len(windows) else ""


def combine_plan(others: list[Candidate], number: int) -> tuple[Windows, list[Candidate]]:
    change = {k: v for c in others for k, v in c.change.items()}
    lossy = any(c.lossy for c in others)
    window = {"name": "combined", "axis": " + ".join(f"{k} {value_text(v)}" for k, v in change.items()),
              "lossy": lossy, "multi_axis": len(change) > 1, "change": {"args": change}}
    return [window], [Candidate(number, "combine", "s1", "combined", change, lossy)]


@dataclass
class RoundPlan:
    """A round before it runs: its control, its windows and sessions, the candidates it asks."""

    number: int
    kind: str
    control: dict[str, Any]
    windows: list[dict[str, Any]]
    sessions: dict[str, list[str]] | None
    candidates: list[Candidate]
    control_boots: int = 1  # per session: 2 with control_position both (the control again)

    @property
    def boots(self) -> int:
        sessions = self.sessions or {c.session: [] for c in self.candidates}
        return len(self.candidates) + len(sessions) * self.control_boots


def next_plan(tune: Tune, incumbent: dict[str, Any], done: list[Round]) -> RoundPlan | None:
    """The round after those done: axes from the incumbent; combine when the last axes round had
    two winners or more; None when the last axes round kept nothing."""
    n = len(done) + 1
    boots = 2 if tune.base.control_position == "both" else 1
    last = done[-1] if done else None
    if last is not None and last.kind == "axes":
        found = winners(last)
        if not found:
            return None
        if len(found) >= 2:
            best, *others = found
            windows, plan = combine_plan(others, n)
            return RoundPlan(n, "combine", {**incumbent, **best.change}, windows, {"s1": ["combined"]}, plan,
                        boots)
    windows, plan, issues = axes_plan(tune, incumbent, n, asked(done))
    if issues:  # the names are made to expand: a refusal here is ruler's to fix, said plainly
        raise BadInput(f"{tune.path}: round {n}'s sweeps cannot be made: "
                       + "; ".join(message for _, _, message in issues))
    return RoundPlan(n, "axes", dict(incumbent), windows, None, plan, boots) if plan else None


def winners(rnd: Round) -> list[Candidate]:
    """Each flag's best kept value, the best first."""
    best: dict[str, Candidate] = {}
    for c in rnd.candidates:
        flag = next(iter(c.change))
        if c.kept and (flag not in best or (c.delta or 0) > (best[flag].delta or 0)):
            best[flag] = c
    return sorted(best.values(), key=lambda c: -(c.delta or 0))


def after(rnd: Round, incumbent: dict[str, Any]) -> dict[str, Any]:
    """The incumbent a round leaves."""
    if rnd.kind == "combine":
        combined = rnd.candidates[0]
        base = dict(rnd.control)  # the best single change
        return {**base, **combined.change} if combined.kept else base
    found = winners(rnd)
    if len(found) == 1:
        return {**incumbent, **found[0].change}
    return incumbent  # none: the tune ends; two or more: the combine round decides


# --- the campaign of a round -------------------------------------------------------------------

FILE_KEYS = (("file",), ("dataset", "file"), ("trace", "file"), ("conversations", "file"))


def _absolute(data: dict[str, Any], base_dir: Path) -> None:
    """A round's campaign lives in the tune's directory: the base's relative files, made absolute."""
    def fix(holder: Any, *keys: str) -> None:
        for key in keys[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        last = keys[-1]
        if isinstance(holder, dict) and isinstance(holder.get(last), str):
            value = holder[last]
            if "${" not in value and not value.startswith("/"):
                holder[last] = str((base_dir / value).resolve())

    for spec in ((data.get("workload") or {}).get("classes") or {}).values():
        for keys in FILE_KEYS:
            fix(spec, *keys)
    quality = data.get("quality") or {}
    fix(quality, "greedy", "file")
    fix(quality, "kl", "file")
    fix(quality, "kl", "oracle", "receipt")


def round_campaign(tune: Tune, number: int, incumbent: dict[str, Any],
                   windows: list[dict[str, Any]], sessions: dict[str, list[str]] | None) -> dict[str, Any]:
    """The base campaign with the incumbent as its control and the round's windows (and sessions:
    None lets each sweep run in a session of its own)."""
    data = copy.deepcopy(load_marked(tune.base.source_text).data)
    name = re.sub(r"[^a-z0-9_-]", "-", f"{tune.name}-r{number}")[:64]
    data["name"] = name
    data["control"] = {**data["control"], "args": incumbent}
    data["windows"] = windows
    data.pop("sessions", None)
    if sessions is not None:
        data["sessions"] = sessions
    _absolute(data, tune.base.source_path.parent)
    return dict(data)
