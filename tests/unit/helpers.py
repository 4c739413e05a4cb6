"""Helpers shared by the unit tier's modules: campaigns run by the real Runner on the fake runtime
(test_runner, test_places, test_cache, test_gpu_run, test_openloop), and the recorded journals
with the state as JSON sees it (test_fold_snapshot, test_state_snapshot)."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

import yaml

from engine.campaign.load import load_campaign
from engine.context import Phase
from engine.record.journal import Event, read_events
from engine.run.measure import Measurement
from engine.run.runner import Runner
from tests.paths import FIXTURES
from tests.unit.fakes import Behaviour, FakeRuntime, Hooks

WHO = {"user": "test", "via": "unit"}
PACE = Behaviour().tok_s  # the fake's tokens per second per request
SLOW = PACE / 4  # a leaked rep: four times slower
# No row is void unless a test means it: spread is only checked from C8, and up to 90%.
CALM = {"min_concurrency": 8, "spread": 0.9, "max_reruns": 1}
# A leak check from C2 at 50% for the tests of void rows. Their requests are long enough (16
# tokens, 0.1 s) that scheduling noise on a loaded machine stays far below that spread.
LEAKY = {"min_concurrency": 2, "spread": 0.5, "max_reruns": 1}


def campaign(name: str, windows: dict[str, dict[str, Any]], sessions: dict[str, list[str]],
             **workload: Any) -> dict[str, Any]:
    """A small campaign, as its YAML would say it; ``workload`` keys override the defaults."""
    wl: dict[str, Any] = {"classes": {"prose": {"prompts": ["Write one sentence about the sea.",
                                                            "Name three colours."]}},
                          "concurrency": [2], "reps": 3, "requests_per_rep": 2, "max_tokens": 6}
    leak = workload.pop("leak", CALM)
    quality = workload.pop("quality", {"enabled": False})
    boot = workload.pop("boot", 10)
    wl.update(workload)
    return {
        "name": name, "server": "llamacpp", "runtime": "process",
        "process": {"command": ["llama-server"]},  # never run: the fake runtime starts the servers
        "control": {"args": {"-c": 2048, "-np": 2, "--metrics": True}},
        "windows": [{"name": w, "axis": spec.pop("axis", w), "change": spec}
                    for w, spec in windows.items()],
        "sessions": sessions, "workload": wl, "leak": leak, "quality": quality,
        "timeouts": {"boot": boot, "request": 10},
    }


CTX = {"ctx": {"axis": "context 4096", "args": {"-c": 4096}}}


def runner(tmp_path: Path, spec: dict[str, Any], runtime: FakeRuntime, hooks: Hooks | None = None,
           phases: list[Phase] | None = None, run_dir: Path | None = None) -> Runner:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    run_dir = run_dir or tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return Runner(load_campaign(path), run_dir, runtime, {}, hooks,
                  [Measurement()] if phases is None else phases)


def events(run_dir: Path, kind: str, **match: Any) -> list[Event]:
    return [e for e in read_events(run_dir / "journal.jsonl")
            if e["kind"] == kind and all(e.get(k) == v for k, v in match.items())]


def rows(run_dir: Path) -> dict[str, dict[str, str]]:
    return {f"{r['session']}-{r['window']}/{r['class']}/c{r['concurrency']}": r
            for r in csv.DictReader((run_dir / "throughput.csv").open())}


def slow_rep_two(hooks: Hooks, fake: FakeRuntime, window: str = "control") -> None:
    """Rep 2 of the window's first attempt streams four times slower: a leaked autotune pass."""
    def slow(_: Event) -> None:
        fake.current.behaviour.tok_s = SLOW

    def fast(_: Event) -> None:
        fake.current.behaviour.tok_s = PACE

    hooks.on(slow, kind="rep_done", window=window, attempt=1, rep=1)
    hooks.on(fast, kind="rep_done", window=window, attempt=1, rep=2)


# places (sessions on two places) was recorded after these snapshots; test_tui_follow.py folds it.
JOURNALS = {p.parent.name: p for p in sorted((FIXTURES / "journals").glob("*/journal.jsonl"))
            if p.parent.name != "places"}
JOURNALS["every-kind"] = FIXTURES / "fold" / "every-kind.jsonl"


def plain(x: Any) -> Any:
    """The state as JSON sees it: sets sorted, tuples as lists, dict keys as strings."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, set):
        return sorted(plain(v) for v in x)
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x
