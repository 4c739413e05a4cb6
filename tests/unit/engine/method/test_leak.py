"""Leak or noise (engine.method.leak): what a wide row is made of, on synthetic rep sets."""

from __future__ import annotations

import pytest

from engine.method import leak, stats
from engine.method.leak import Shape

POLICY = stats.LeakPolicy(min_concurrency=8, spread=0.10, max_reruns=2)


@pytest.mark.parametrize("reps, shape", [
    ([135.0, 700.0, 700.0], Shape.LEAK),  # the notes' leaked C8: one rep far below two that agree
    # docs/runs/h200-method: a server stalled 1.5 s inside a 4 s rep, beside two reps 9.6 % apart
    ([2202.1, 1192.9, 2000.3], Shape.LEAK),
    ([700.0, 135.0, 700.0], Shape.LEAK),  # wherever the low rep sits
    ([700.0, 690.0, 705.0, 120.0], Shape.LEAK),
    ([1046.0, 1550.0, 2472.0], Shape.NOISE),  # scattered evenly
    ([948.74, 805.55, 1039.282], Shape.NOISE),  # the H200 control C8: the others 9 % apart
    ([0.9, 1.0, 1.1], Shape.NOISE),  # an even spread is never leak-shaped
    ([700.0, 700.0, 1400.0], Shape.NOISE),  # one rep far above: not a slow pass
    ([135.0, 140.0, 700.0, 700.0, 700.0], Shape.NOISE),  # two slow reps: not one standing alone
    ([712.0, 732.0, 756.0], Shape.CLEAN),  # the notes' clean C8, 6 %
    ([300.0, 200.0], Shape.LEAK),  # two reps: the other agrees with itself
])
def test_the_shape_of_a_rep_set(reps: list[float], shape: Shape) -> None:
    reading = leak.read(reps, 0.10)
    assert reading.shape == shape
    assert (reading.why == "") == (shape == Shape.CLEAN)
    if shape == Shape.LEAK:
        assert reading.rep == reps.index(min(reps))
        assert f"rep {reading.rep + 1} at {min(reps):.1f} tok/s" in reading.why


def test_only_a_leak_shaped_row_is_void_and_only_at_the_leak_concurrency() -> None:
    assert stats.classify([135.0, 700.0, 700.0], 8, POLICY) == "void"
    assert stats.classify([1046.0, 1550.0, 2472.0], 8, POLICY) == "noisy"
    assert stats.classify([135.0, 700.0, 700.0], 4, POLICY) == "noisy"
    assert stats.classify([712.0, 732.0, 756.0], 64, POLICY) == "ok"


def test_the_reason_says_why_a_wide_row_is_noise() -> None:
    others, gap = leak.spread([1550.0, 2472.0]), 1 - 1046 / 2011  # the lowest against the others' median
    why = leak.read([1046.0, 1550.0, 2472.0], 0.10).why
    assert f"spread {others:.1%} > {gap / 3:.1%} among themselves" in why  # a third of the gap: 16 %
    below = 1 - 1000 / 1100  # the lowest against the median of 1000 and 1200
    assert f"only {below:.1%} below" in leak.read([1000.0, 1000.0, 1200.0], 0.10).why
