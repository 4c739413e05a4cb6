"""An older journal's events in the current format's shape: the one step every line takes as it is
read (engine.record.journal parses each line through it), so that no reader keeps a shim of its
own for what older engines wrote.

run_started's ``format`` (engine.record.events.FORMAT) says which format a journal was written in;
a journal without one is format 1. Format 1 against 2: run_started did not carry the workload;
2 against 3: nor the leak and verdict rules. The run's frozen campaign.yaml says them, read once
for the run_started that lacks them. An upgraded event keeps its recorded ``format``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine import files
from engine.record.eventcheck import Fields
from engine.record.events import FORMAT, EventKind, LeakRecord, VerdictRecord

Event = dict[str, Any]
FIRST_FORMAT = 1  # a journal whose run_started names none
# What a run_started before the current format lacks, each read from the frozen campaign.
FROM_CAMPAIGN = ("workload", "leak", "verdict")
RULES = {"leak": Fields(LeakRecord), "verdict": Fields(VerdictRecord)}


def upgraded(e: Event, run_dir: Path | None) -> Event:
    """``e`` in the current format's shape (in place); ``run_dir`` holds the frozen campaign."""
    recorded = e.get("format", FIRST_FORMAT)
    if (e["kind"] != EventKind.RUN_STARTED or type(recorded) is not int or recorded >= FORMAT):
        return e  # the current format, or a format of another type (the fold says it is mistyped)
    e.setdefault("format", FIRST_FORMAT)
    lacks = [key for key in FROM_CAMPAIGN if key not in e]
    raw = frozen_campaign(run_dir / "campaign.yaml") if lacks and run_dir is not None else None
    if raw is None:
        return e
    if "workload" in lacks and (workload := frozen_workload(raw)) is not None:
        e["workload"] = workload
    for key in lacks:
        if key in RULES:
            e[key] = frozen_rule(raw.get(key), RULES[key])
    return e


def frozen_campaign(campaign_yaml: Path) -> dict[str, Any] | None:
    """A run's frozen campaign.yaml as data; None when it cannot be read or is no mapping.
    libyaml's parser where PyYAML has it."""
    import yaml

    try:
        raw = yaml.load(files.read_text(campaign_yaml), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return raw if isinstance(raw, dict) else None


def frozen_workload(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """A frozen campaign's workload as run_started carries it, as far as the file says it (reps
    left out: the spec's default; requests only when requests_per_rep gives them); None when its
    workload has no classes or cannot be read."""
    try:
        wl = raw["workload"]
        concurrency = [int(c) for c in wl.get("concurrency") or ()]
        out: dict[str, Any] = {"classes": [str(c) for c in wl["classes"]], "concurrency": concurrency}
        if "reps" in wl:
            out["reps"] = int(wl["reps"])
        if wl.get("requests_per_rep"):
            out["requests"] = [int(wl["requests_per_rep"])] * len(concurrency)
        if wl.get("max_tokens"):
            out["max_tokens"] = int(wl["max_tokens"])
        if wl.get("rate"):
            out["rate"] = [float(r) for r in wl["rate"]]
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    return out


def frozen_rule(section: object, fields: Fields) -> dict[str, Any]:
    """A frozen campaign's leak or verdict section as run_started carries it: the keys it declares
    of the record's, each of the record's type (a reader takes the spec's default for the rest)."""
    if not isinstance(section, dict):
        return {}
    return {k: v for k, v in section.items() if k in fields.nouns and fields.why_not({k: v}) is None}
