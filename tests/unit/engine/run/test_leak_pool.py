"""The leak rule's noise pool (engine.run.attempt.noise_pool): the run's finished rows of a class at
a load."""

from __future__ import annotations

from engine.method import stats
from engine.record.state import RowState, RunState
from engine.run.attempt import noise_pool
from engine.words import RowStatus


def row(window: str, cls: str, c: int, status: str, reps: list[float],
        rate: float | None = None) -> RowState:
    return RowState("s1", window, cls, c, rate, attempt=1, status=status,
                    row={"status": status, "rep_tok_s": reps})


def state(*rows: RowState) -> RunState:
    run = RunState()
    run.rows = {r.key: r for r in rows}
    return run


def test_the_pool_is_every_finished_usable_row_of_the_class_at_the_load_but_the_row_itself() -> None:
    run = state(
        row("control", "prose", 8, RowStatus.OK, [100.0, 101.0, 99.0]),
        row("w", "prose", 8, RowStatus.NOISY, [90.0, 120.0, 100.0]),  # noise is noise
        row("control", "code", 8, RowStatus.OK, [60.0, 90.0, 75.0]),  # another class
        row("control", "prose", 16, RowStatus.OK, [200.0, 201.0, 199.0]),  # another load
        row("control", "prose", 0, RowStatus.OK, [50.0, 51.0, 49.0], rate=2.0),  # open loop
        row("ctx", "prose", 8, RowStatus.VOID, [30.0, 100.0, 101.0]),  # what the rule condemned
        row("x", "prose", 8, RowStatus.MEASURING, [100.0]),  # not finished
        row("y", "prose", 8, RowStatus.OK, [105.0, 104.0, 106.0]),
    )
    me = "s1-y/prose/c8"
    assert noise_pool(run, me, "prose", 8, None) == [[100.0, 101.0, 99.0], [90.0, 120.0, 100.0]]
    assert noise_pool(run, "s1-other/prose/c8", "prose", 8, None)[-1] == [105.0, 104.0, 106.0]
    assert noise_pool(run, me, "code", 8, None) == [[60.0, 90.0, 75.0]]
    assert noise_pool(run, me, "prose", 0, 2.0) == [[50.0, 51.0, 49.0]]
    assert noise_pool(run, me, "prose", 0, 4.0) == []


def test_a_row_beside_the_pool_is_read_against_it() -> None:
    quiet = [[2000.0 * (1 + d) for d in (0.0, 0.02, -0.02)] for _ in range(8)]
    run = state(*[row(f"w{i}", "prose", 8, RowStatus.OK, reps) for i, reps in enumerate(quiet)])
    policy = stats.LeakPolicy(min_concurrency=8, spread=0.10)
    stall = [2202.1, 1192.9, 2000.3]  # 40 % below: alone within a 10 %-noise server's bar (48 %)
    assert stats.classify(stall, 8, policy) == "noisy"
    assert stats.classify(stall, 8, policy, noise_pool(run, "s1-ctx/prose/c8", "prose", 8, None)) == "void"
