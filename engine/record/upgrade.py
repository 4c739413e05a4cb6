"""An older journal's events in the current format's shape: the one step every line takes as it is
read (engine.record.journal parses each line through it), so that no reader keeps a shim of its
own for what older engines wrote.

run_started's ``format`` (engine.record.events.FORMAT) says which format a journal was written in;
a journal without one is format 1. Format 1 against 2: run_started did not carry the workload,
which the run's frozen campaign.yaml says. An upgraded event keeps its recorded ``format``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine import files
from engine.record.events import EventKind

Event = dict[str, Any]
FIRST_FORMAT = 1  # a journal whose run_started names none


def upgraded(e: Event, run_dir: Path | None) -> Event:
    """``e`` in the current format's shape (in place); ``run_dir`` holds the frozen campaign."""
    if e["kind"] != EventKind.RUN_STARTED or "format" in e:
        return e
    e["format"] = FIRST_FORMAT
    if "workload" not in e and run_dir is not None:
        workload = frozen_workload(run_dir / "campaign.yaml")
        if workload is not None:
            e["workload"] = workload
    return e


def frozen_workload(campaign_yaml: Path) -> dict[str, Any] | None:
    """A frozen campaign's workload as run_started carries it, as far as the file says it (reps
    left out: the spec's default; requests only when requests_per_rep gives them); None when the
    file cannot be read or its workload has no classes. libyaml's parser where PyYAML has it."""
    import yaml

    try:
        raw = yaml.load(files.read_text(campaign_yaml), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
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
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError, ValueError):
        return None
    return out
