"""``ruler validate FILE [--explain]``: the campaign loads (exit 0, with warnings on stderr) or every
problem as file:line:col on stderr (exit 2). ``--explain`` also prints the campaign as ruler reads
it and what a run would start; ``ruler schema`` prints the format as a JSON Schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from engine.campaign.checks.warnings import campaign_warnings, secret_notes
from engine.campaign.dryrun import classes_text, plan_text
from engine.campaign.load import NotACampaign, SpecError, load_campaign
from engine.campaign.prompts import DataFileError
from engine.campaign.spec import Campaign, campaign_schema
from engine.commands.invocation import ruler_command
from engine.errors import BadInput, EngineError
from engine.sanitize import terminal_lines
from engine.tune.spec import load_tune
from engine.words import plural


def cmd_validate(path: str, explain: bool = False, baseline: str | None = None) -> int:
    """`ruler validate FILE`: a one-line summary and 0, or every problem on stderr and 2. With
    ``baseline`` (an earlier run's directory) it also warns of reps too short for a steady window,
    and ``explain`` estimates the reps and wall time the campaign's precision asks for."""
    try:
        campaign = load_campaign(path)
    except NotACampaign as exc:
        if exc.tune_file:
            return validate_tune(path)
        for problem in exc.problems:
            print(terminal_lines(problem), file=sys.stderr)
        return 2
    except SpecError as exc:
        for problem in exc.problems:  # each may quote the file or the name it was given
            print(terminal_lines(problem), file=sys.stderr)
        return 2
    workload = campaign.workload
    print(
        f"OK: {campaign.name}: {plural(len(campaign.windows), 'window')} in "
        f"{plural(len(campaign.sessions), 'session')}, {plural(len(workload.classes), 'class', 'classes')} x "
        + " and ".join(([f"concurrency {list(workload.concurrency)}"] if workload.concurrency else [])
                       + ([f"rate {list(workload.rate)} req/s"] if workload.rate else [])) + ", "
        f"{workload.reps} reps"
    )
    for warning in campaign_warnings(campaign) + secret_notes(campaign):
        print(terminal_lines(str(warning)), file=sys.stderr)
    if baseline is None:
        return explain_campaign(path, campaign) if explain else 0
    from engine.commands import baseline as base  # the fold and the receipts: only for a baseline

    run_dir = Path(baseline)
    try:
        seen, damage = base.read_baseline(run_dir)
    except BadInput as e:
        print(terminal_lines(f"ruler validate: {e}"), file=sys.stderr)
        return 2
    if damage:
        print(terminal_lines(f"ruler validate: warning: {damage}"), file=sys.stderr)
    for short in base.short_rep_warnings(campaign, run_dir, seen):
        print(terminal_lines(f"{path}: {short}"), file=sys.stderr)
    if not explain:
        return 0
    rc = explain_campaign(path, campaign)
    if rc == 0:
        print("\n" + base.plan_text(campaign, run_dir, seen), end="")
    return rc


def validate_tune(path: str) -> int:
    """``ruler validate`` of a tune file: checked as ``ruler tune`` would (its base campaign
    included), a summary and 0, or every problem at file:line:col and 2."""
    try:
        tune = load_tune(path)
    except SpecError as exc:
        for problem in exc.problems:
            print(terminal_lines(problem), file=sys.stderr)
        return 2
    space = tune.spec.space
    print(terminal_lines(
        f"OK: tune file: {plural(len(space), 'flag')} ({', '.join(space)}) of "
        f"{plural(sum(len(c.values) for c in space.values()), 'candidate value')} over the control "
        f"of {tune.base.source_path.name} ({tune.base.name}); objective: {tune.objective_text()}; "
        f"`{ruler_command()} tune {path}` runs it"))
    for warning in campaign_warnings(tune.base) + secret_notes(tune.base):
        print(terminal_lines(str(warning)), file=sys.stderr)
    return 0


class _Dumper(yaml.SafeDumper):
    """Block style, but a list of scalars on one line (``concurrency: [1, 4]``), as campaigns spell it."""

    def represent_list(self, data: list[Any]) -> yaml.SequenceNode:  # type: ignore[override]  # lists only
        flat = all(not isinstance(v, dict | list) for v in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _Dumper.represent_list)


def resolved_yaml(campaign: Campaign) -> str:
    """The campaign with every default filled in, as YAML in the file's own key order; ``${...}``
    stay as written (they resolve at run time, and a secret must never be printed). A window's
    change keeps only what it sets: its unset keys are not defaults but "nothing changed"."""
    data = campaign.model_dump(mode="json")
    for raw, window in zip(data["windows"], campaign.windows, strict=True):
        raw["change"] = window.change.model_dump(mode="json", exclude_defaults=True)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def explain_campaign(path: str, campaign: Campaign) -> int:
    """The resolved campaign, then the dry run's plan of each window (argv, request body, knobs):
    the same code ``ruler run --dry-run`` and the runner plan with."""
    print(f"\n# {path} as ruler reads it, every default filled in "
          "(docs/campaign.md says what each key means)")
    print(resolved_yaml(campaign), end="")
    try:
        plan = plan_text(campaign, None)
        classes = classes_text(campaign)
    except DataFileError as e:  # a ${...} prompt file the host resolves to nothing usable
        print(f"{path}: {e.what} {e}", file=sys.stderr)
        return 2
    except EngineError as e:  # runtime auto with neither a Docker daemon nor a process command
        print(f"ruler validate --explain: {e}", file=sys.stderr)
        return 1
    print("\n# what `ruler run` would start (as `ruler run --dry-run` prints it)")
    print(plan, end="")
    print("\n# what each class sends (lengths in words: engine.campaign.sources.explain)")
    print(classes, end="")
    return 0


def cmd_schema() -> int:
    """`ruler schema`: the campaign format as a JSON Schema, for editors."""
    print(json.dumps(campaign_schema(), indent=2))
    return 0
