"""Helpers of the component tier: campaigns run by the real Runner on the fake runtime
(tests/component/fakes.py), and what the tests read back from their run directories."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from engine.campaign.load import load_campaign
from engine.context import Phase
from engine.record.journal import Event, read_events
from engine.run.measure import Measurement
from engine.run.runner import Runner
from tests.campaigns import write
from tests.component.fakes import Behaviour, FakeRuntime, Hooks

WHO = {"user": "test", "via": "unit"}
PACE = Behaviour().tok_s  # the fake's tokens per second per request
SLOW = PACE / 4  # a leaked rep: four times slower


def runner(tmp_path: Path, spec: dict[str, Any], runtime: FakeRuntime, hooks: Hooks | None = None,
           phases: list[Phase] | None = None, run_dir: Path | None = None) -> Runner:
    path = write(tmp_path, spec)
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
