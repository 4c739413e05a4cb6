"""What ``ruler tune`` reads: the tune file (a base campaign, a search space of flags with their
candidate values, an objective, a budget), checked as a campaign is.

A tune file::

    campaign: demo-smollm2.yaml        # the base: its control is where the tune starts; its
                                       # workload, quality, runtime and places are every round's
    space:                             # flags and their candidate values
      --spec-draft-n-max: [3, 5, 10]   # lossless: greedy identical and |dlogp| close must hold
      --cache-type-k: {values: [q8_0], lossy: true}   # lossy: KL mean at most kl_max
    objective: {tok_s: {class: prose, load: c1}}      # or {capacity: {class: prose}}
    kl_max: 0.05
    budget: {windows: 30, minutes: 60}  # boots (controls included); minutes from --baseline

Every problem is reported at file:line:col, as a campaign's are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from engine.campaign.load import MAX_CAMPAIGN_BYTES, SpecError, load_campaign
from engine.campaign.prompts import NotUtf8, decode_text
from engine.campaign.spec import Campaign
from engine.campaign.values import Arg
from engine.campaign.yamlmarks import (
    Issue,
    Problem,
    describe,
    load_marked,
    place,
    schema_issue,
    yaml_problem,
)
from engine.files import Unreadable, read_bounded
from engine.words import load_label

CONTROL_ROUND_LIMIT = 20  # rounds at most, whatever the budget: a tune that never settles is said


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Candidates(_Frozen):
    values: Annotated[tuple[Arg, ...], Field(min_length=1)]
    lossy: Annotated[bool, Strict()] = False

    @model_validator(mode="before")
    @classmethod
    def _listed(cls, data: Any) -> Any:
        return {"values": data} if isinstance(data, list) else data


class TokS(_Frozen):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    cls: Annotated[str, Strict()] | None = Field(default=None, alias="class")  # None: the only class
    load: Annotated[str, Strict()]  # a row's load label: c1, c8, r2.5


class CapacityGoal(_Frozen):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    cls: Annotated[str, Strict()] | None = Field(default=None, alias="class")


class Objective(_Frozen):
    tok_s: TokS | None = None
    capacity: CapacityGoal | None = None


class Budget(_Frozen):
    windows: Annotated[int, Strict(), Field(ge=2, le=10_000)] | None = None  # boots, controls included
    minutes: Annotated[float, Strict(), Field(gt=0, le=100_000)] | None = None


class TuneSpec(_Frozen):
    campaign: Annotated[str, Strict()]
    space: Annotated[dict[Annotated[str, Strict()], Candidates], Field(min_length=1)]
    objective: Objective
    kl_max: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] = 0.05
    budget: Budget = Budget()
    max_rounds: Annotated[int, Strict(), Field(ge=1, le=CONTROL_ROUND_LIMIT)] = 8


class Tune:
    """A loaded tune: its spec, its file, and the base campaign."""

    def __init__(self, spec: TuneSpec, path: Path, text: str, base: Campaign) -> None:
        self.spec, self.path, self.text, self.base = spec, path, text, base

    @property
    def name(self) -> str:
        return self.base.name

    def goal_class(self) -> str:
        goal = self.spec.objective.tok_s or self.spec.objective.capacity
        assert goal is not None
        return goal.cls or next(iter(self.base.workload.classes))

    def goal_load(self) -> tuple[int, float | None]:
        """The objective's load as the workload measures it: (C, None) or (0, rate)."""
        goal = self.spec.objective.tok_s
        assert goal is not None
        found = [(c, r) for c, r in self.base.workload.loads() if load_label(c, r) == goal.load]
        assert found, f"load {goal.load} is checked against the workload's on load"
        return found[0]

    def objective_text(self) -> str:
        if self.spec.objective.tok_s is not None:
            return f"tok/s of {self.goal_class()} at {self.spec.objective.tok_s.load}"
        cap = self.base.workload.capacity
        assert cap is not None
        return f"capacity of {self.goal_class()} ({cap.over}) at the workload's SLA"


def load_tune(path: str | Path) -> Tune:
    """The tune file and its base campaign, or SpecError with every problem at file:line:col."""
    path = Path(path)
    file = str(path)
    try:
        text = decode_text(read_bounded(path, MAX_CAMPAIGN_BYTES))
    except OSError as e:
        raise SpecError([Problem(file, 1, 1, f"cannot read tune file ({e.strerror or e})")]) from None
    except Unreadable as e:  # a FIFO, a device, a file past a campaign's size
        raise SpecError([Problem(file, 1, 1, f"tune file is {e}")]) from None
    except NotUtf8 as e:
        raise SpecError([Problem(file, e.line, e.col, "not UTF-8 text")]) from None
    try:
        doc = load_marked(text)
    except Exception as e:
        import yaml
        if isinstance(e, yaml.YAMLError):
            raise SpecError([yaml_problem(file, e)]) from None
        raise
    try:
        spec = TuneSpec.model_validate(doc.data)
    except ValidationError as e:
        errors = e.errors()
        # A list whose every item was refused is then empty too: said once, at its items.
        errors = [err for err in errors if not (err["type"] == "too_short" and any(
            len(o["loc"]) > len(err["loc"]) and o["loc"][:len(err["loc"])] == err["loc"] for o in errors))]
        raise SpecError(sorted({place(file, doc, _as_written(doc.data, schema_issue(err, TuneSpec)))
                                for err in errors})) from None
    base_path = (path.parent / spec.campaign)
    try:
        base = load_campaign(base_path)
    except SpecError as e:
        mark = doc.locate(("campaign",))
        raise SpecError([Problem(file, mark.line, mark.col, f"campaign {spec.campaign}: its "
                                 f"problems follow"), *e.problems]) from None
    tune = Tune(spec, path.resolve(), text, base)
    issues = _check(tune)
    if issues:
        raise SpecError(sorted({place(file, doc, _as_written(doc.data, issue)) for issue in issues}))
    return tune


def _as_written(data: Any, issue: Issue) -> Issue:
    """An issue of a candidate given as a bare list (``--flag: [3, 5]``) is where the list holds
    it: the model reads the list as ``{values: [...]}``, a key the file does not have."""
    path, on_key, message = issue
    if len(path) >= 3 and path[0] == "space" and path[2] == "values":
        space = data.get("space") if isinstance(data, dict) else None
        if isinstance(space, dict) and isinstance(space.get(path[1]), list):
            return (*path[:2], *path[3:]), on_key, message.replace(f"space.{path[1]}.values",
                                                                   f"space.{path[1]}", 1)
    return issue


def _check(tune: Tune) -> list[Issue]:
    spec, base = tune.spec, tune.base
    issues: list[Issue] = []
    classes = list(base.workload.classes)
    goal = spec.objective.tok_s or spec.objective.capacity
    if (spec.objective.tok_s is None) == (spec.objective.capacity is None):
        issues.append((("objective",), True, "the objective is one of tok_s: {class, load} or "
                                             "capacity: {class}"))
    if goal is not None and goal.cls is not None and goal.cls not in classes:
        issues.append((("objective",), True, f"the objective's class {goal.cls!r} is not a class "
                                             f"of the campaign ({', '.join(classes)})"))
    if goal is not None and goal.cls is None and len(classes) > 1:
        issues.append((("objective",), True, f"the campaign has {len(classes)} classes: name the "
                                             "objective's class"))
    if spec.objective.tok_s is not None:
        loads = [load_label(c, r) for c, r in base.workload.loads()]
        if spec.objective.tok_s.load not in loads:
            issues.append((("objective", "tok_s", "load"), False, f"load {spec.objective.tok_s.load!r} "
                           f"is not one the workload measures ({', '.join(loads)})"))
    if spec.objective.capacity is not None and base.workload.capacity is None:
        issues.append((("objective", "capacity"), True, "a capacity objective needs the campaign's "
                                                        "workload.capacity (what must hold)"))
    if not base.quality.enabled:
        issues.append((("campaign",), False, "the tuner keeps a value only when its quality holds: "
                                             "the campaign's quality checks must be enabled"))
    control = base.config_for("control").args
    for flag, cand in spec.space.items():
        if all(v == control.get(flag) for v in cand.values):
            issues.append((("space", flag), True, f"{flag}: every candidate is the control's value "
                                                  "already"))
        first: dict[tuple[str, ...] | None, int] = {}
        for i, v in enumerate(cand.values):
            j = first.setdefault(_argv(v), i)
            if j != i:
                issues.append((("space", flag, "values", i), False, f"{flag}: candidate {describe(v)} "
                               f"is candidate {j + 1} again (the same argv): each is measured once"))
    return issues


def _argv(value: Any) -> tuple[str, ...] | None:
    """A candidate as the server is given it (engine.campaign.variables.render_args): "3" and 3
    alike, false and null alike (the flag left out)."""
    if value is None or value is False:
        return None
    if value is True:
        return ()
    return tuple(str(v) for v in (value if isinstance(value, tuple | list) else (value,)))
