"""Helpers of the component tier: campaigns run by the real Runner on the fake runtime
(tests/component/fakes.py), and what the tests read back from their run directories."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.campaign.load import load_campaign
from engine.commands import launch
from engine.context import Phase
from engine.record.journal import Event, read_events
from engine.run import runner as runner_mod
from engine.run.measure import Measurement
from engine.run.runner import Runner
from tests.campaigns import CTX, campaign, write
from tests.component.fakes import Behaviour, FakeRuntime, Hooks

WHO = {"user": "test", "via": "unit"}
PACE = Behaviour().tok_s  # the fake's tokens per second per request
# A leaked rep: twenty times slower, far past the leak rule's bar even where a busy host's jitter
# raises the noise it is scaled by. A row alone at its load is read against its two other reps:
# past 10 % noise its bar is 6.6 times theirs, and at a load of 10 on two cores they strayed
# enough (their sd past 35 %) to hold a rep ten times slower within it.
SLOW = PACE / 20


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
    """Rep 2 of the window's first attempt streams ten times slower: a leaked autotune pass."""
    def slow(_: Event) -> None:
        fake.current.behaviour.tok_s = SLOW

    def fast(_: Event) -> None:
        fake.current.behaviour.tok_s = PACE

    hooks.on(slow, kind="rep_done", window=window, attempt=1, rep=1)
    hooks.on(fast, kind="rep_done", window=window, attempt=1, rep=2)


def run_with(tmp: Path, behaviour: Behaviour, monkeypatch: pytest.MonkeyPatch, echo: bool = False,
             axis: str = "context 4096", quality: dict[str, Any] | None = None) -> tuple[Path, int]:
    """``ruler engine``'s run_engine (lock, journal, control socket, Runner, Measurement, and
    Quality when ``quality`` configures it) on the fake runtime, every server behaving as
    ``behaviour``: the run directory and the exit code."""
    spec = tmp / "failing.yaml"
    body = campaign("failing", {"ctx": {**CTX["ctx"], "axis": axis}}, {"s1": ["ctx"]}, reps=2, leak={
        "min_concurrency": 8, "spread": 0.9, "max_reruns": 0}, **({"quality": quality} if quality else {}))
    body["process"] = {"command": ["/bin/true"]}  # never run: the fake runtime starts the servers
    spec.write_text(yaml.safe_dump(body, sort_keys=False))
    run = launch.prepare(str(spec), str(tmp / "results"), "process")
    fake = FakeRuntime(lambda plan: behaviour)
    monkeypatch.setattr(runner_mod, "runtime_for", lambda *a, **k: fake)
    try:
        code = launch.run_engine(run, echo=echo)
    finally:
        fake.close()
    return run, code
