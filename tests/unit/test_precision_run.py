"""The measurement phase under the method's rules, on in-process fake servers: a noisy row is
reported noisy (not voided), and reps are added to a row until its precision."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fakes import FakeRuntime, Hooks
from test_runner import CTX, LEAKY, PACE, campaign, events, rows, runner

from engine.method import stats
from engine.run.measure import recompute_row

pytestmark = pytest.mark.timeout(120)


def pace_by_rep(hooks: Hooks, fake: FakeRuntime, pattern: list[float], reps: int) -> None:
    """The control's rep n streams at PACE x pattern[(n - 1) % len]: set as rep n - 1 lands."""
    def setter(share: float):  # type: ignore[no-untyped-def]
        def act(_: object) -> None:
            fake.current.behaviour.tok_s = PACE * share
        return act

    hooks.on(setter(pattern[0]), kind="warm_done", window="control")
    for n in range(1, reps):
        hooks.on(setter(pattern[n % len(pattern)]), kind="rep_done", window="control", rep=n)
    hooks.on(setter(1.0), kind="row_done", window="control")


def test_a_row_of_evenly_spread_reps_is_noisy_not_void(tmp: Path, fake: FakeRuntime) -> None:
    hooks = Hooks()
    pace_by_rep(hooks, fake, [1.0, 0.6, 0.3], 3)
    r = runner(tmp, campaign("noise", CTX, {"s1": ["ctx"]}, leak=LEAKY, max_tokens=16), fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    assert not events(r.run_dir, "row_void", window="control")
    row = rows(r.run_dir)["s1-control/prose/c2"]
    assert (row["status"], row["spread_shape"], row["attempts"]) == ("noisy", "noise", "1")
    assert row["spread_why"].startswith("noise: ")


def test_a_noisy_control_gains_reps_until_its_precision(tmp: Path, fake: FakeRuntime) -> None:
    hooks = Hooks()
    pace_by_rep(hooks, fake, [1.0, 0.9, 0.8, 1.0], 20)
    spec = campaign("precise", CTX, {"s1": ["ctx"]}, max_tokens=16, reps=4, precision=0.2,
                    max_reps=20)
    r = runner(tmp, spec, fake, hooks)
    assert r.run() == "finished"
    assert not hooks.errors  # the pattern's later reps are not reached: the row stopped
    row = rows(r.run_dir)["s1-control/prose/c2"]
    assert int(row["reps"]) > 4 and row["precision_status"] == "reached", row
    assert float(row["half_width"]) <= 0.2 / math.sqrt(2)
    done = events(r.run_dir, "rep_done", window="control")
    assert [e["precision_status"] for e in done][3:] == ["more"] * (len(done) - 4) + ["reached"]
    again = recompute_row(r.run_dir, row["source"], 2, stats.LeakPolicy(**{
        "min_concurrency": 8, "spread": 0.9, "max_reruns": 1}))
    assert row["basis"] == again["basis"] == stats.STEADY
    assert float(row["agg_tok_s"]) == again["agg_tok_s"]
    assert float(row["whole_tok_s"]) == again["whole_tok_s"]
    window = rows(r.run_dir)["s1-ctx/prose/c2"]
    assert window["precision_status"] in ("reached", "cannot", "cap") and window["delta_lo"]
