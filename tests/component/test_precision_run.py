"""The measurement phase under the method's rules, on in-process fake servers: a noisy row is
reported noisy (not voided), and reps are added to a row until its precision."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.method import stats
from engine.record.receipts import read_rep
from engine.run.measure import recompute_row
from tests.campaigns import CTX, LEAKY, campaign
from tests.component.fakes import FakeRuntime, Hooks
from tests.component.helpers import PACE, events, rows, runner

pytestmark = pytest.mark.timeout(120)


def pace_by_rep(hooks: Hooks, fake: FakeRuntime, pattern: list[float], reps: int) -> None:
    """The control's rep n streams at PACE x pattern[(n - 1) % len]: set as rep n - 1 lands."""
    def setter(share: float) -> Callable[[object], None]:
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
    # An even spread wide enough that a loaded machine's own noise barely moves the first stage:
    # the rule asks about seven reps of it, far from both four and the cap.
    pace_by_rep(hooks, fake, [1.0, 0.7, 0.5, 1.0], 30)
    spec = campaign("precise", CTX, {"s1": ["ctx"]}, max_tokens=16, reps=4, precision=0.6,
                    max_reps=30)
    r = runner(tmp, spec, fake, hooks)
    assert r.run() == "finished"
    assert not hooks.errors  # the pattern's later reps are not reached: the row stopped
    row = rows(r.run_dir)["s1-control/prose/c2"]
    assert int(row["reps"]) > 4 and row["precision_status"] == "reached", row
    assert float(row["half_width"]) <= 0.6 / math.sqrt(2)
    done = events(r.run_dir, "rep_done", window="control")
    assert [e["precision_status"] for e in done][3:] == ["more"] * (len(done) - 4) + ["reached"]
    again = recompute_row(r.run_dir, row["source"], 2, stats.LeakPolicy(
        min_concurrency=8, spread=0.9, max_reruns=1))
    # One request a worker (the builder's 2 at C2): no send follows a first request, so no steady
    # window; the row is over the whole reps, and the receipts say the same.
    assert row["basis"] == again["basis"] == stats.WHOLE
    assert float(row["agg_tok_s"]) == again["agg_tok_s"]
    assert float(row["whole_tok_s"]) == again["whole_tok_s"]
    window = rows(r.run_dir)["s1-ctx/prose/c2"]
    assert window["precision_status"] in ("reached", "cannot", "cap") and window["delta"]
    # One session, the control booted once: the noise between boots is not measured, so the
    # window's delta has no interval however many reps either side took.
    assert not window["delta_lo"] and window["boot_noise_how"].startswith("not measured")


def test_a_rep_sized_by_time_sends_until_its_seconds(tmp: Path, fake: FakeRuntime) -> None:
    """workload.rep_seconds: the workers keep sending until then; the rep ends with the requests
    then in flight, so it lasts at least that long and at most one request longer."""
    spec = campaign("timed", CTX, {"s1": ["ctx"]}, requests_per_rep=None, rep_seconds=0.6,
                    max_tokens=16, reps=2)
    r = runner(tmp, spec, fake)
    assert r.run() == "finished"
    done = events(r.run_dir, "rep_done")
    assert done and all(e["requests"] > 2 * 2 for e in done)  # more than the sized-by-count 2 x C
    for e in done:
        # "At most one request longer", each rep by its own receipts: a request is as long as the
        # rep's longest took (a busy machine stretches both alike), and one more such length
        # covers the moment between the last request's take and its first byte out.
        records = read_rep(r.run_dir / e["file"])[1]
        longest = max(rec["end"] - rec["start"] for rec in records)
        assert 0.6 <= e["wall_s"] <= 0.6 + 2 * longest, (e["wall_s"], longest)
