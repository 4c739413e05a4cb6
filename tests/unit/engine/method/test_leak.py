"""Leak or noise (engine.method.leak): the rule scaled to the run's noise, on synthetic rep sets
and on simulated rows of pure noise (Gaussian, t3-tailed, a row noisier than its pool) and of a
slow rep."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.method import leak, stats
from engine.method.leak import Shape

POLICY = stats.LeakPolicy(min_concurrency=8, spread=0.10, max_reruns=2)

# Eight earlier rows at the load, three reps each, about 3 % apart (sd of log tok/s 0.030).
QUIET = [[1952.5, 1922.1, 1985.2], [2025.4, 2069.3, 2006.6], [1967.1, 1953.5, 2045.4],
         [2100.5, 2016.4, 1927.4], [1943.3, 2098.3, 2012.2], [1898.7, 1995.0, 1931.4],
         [1962.6, 1970.9, 1957.7], [2033.5, 1996.2, 1964.9]]


def rows(sigma: float, n: int, count: int, seed: str) -> list[list[float]]:
    rng = random.Random(seed)
    return [[1000 * math.exp(rng.gauss(0, sigma)) for _ in range(n)] for _ in range(count)]


def t3(rng: np.random.Generator, sigma: float, shape: tuple[int, ...]) -> list[list[float]]:
    """Reps whose log tok/s is Student's t with 3 degrees of freedom, at standard deviation ``sigma``."""
    reps: list[list[float]] = (1000 * np.exp(sigma * rng.standard_t(3, shape) / math.sqrt(3))).tolist()
    return reps


def voided(rows_and_pools: list[tuple[list[float], list[list[float]]]]) -> float:
    """The share of noise-only rows (each beside its pool) the rule voids."""
    return sum(leak.read(row, 0.10, pool).shape == Shape.LEAK
               for row, pool in rows_and_pools) / len(rows_and_pools)


def test_the_pooled_noise_is_the_sd_of_log_tok_s_within_rows() -> None:
    e = math.e
    # Logs (0, 0.2) and (1, 1.1, 1.2): squares 0.02 + 0.02 over 1 + 2 degrees of freedom.
    noise, df = leak.pooled_noise([[1.0, e ** 0.2], [e, e ** 1.1, e ** 1.2], [5.0], [0.0, 3.0]])
    assert df == 3  # a one-rep row and a row with a rep at 0 add nothing
    assert noise == pytest.approx(math.sqrt(0.04 / 3))
    quiet, quiet_df = leak.pooled_noise(QUIET)
    assert quiet == pytest.approx(0.02596, abs=1e-5) and quiet_df == 16


def test_the_bar_narrows_as_pooled_rows_are_added() -> None:
    alone = [leak.critical(3, df) for df in (0, 2, 16, 24)]
    assert alone == sorted(alone, reverse=True)
    assert alone[0] > 100  # one degree of freedom: two reps alone say little of the noise


@pytest.mark.parametrize("reps, pool_df", [(3, 16), (5, 16), (3, 2), (4, 24)])
@pytest.mark.parametrize("tails, ratio", [(None, 1.0), (None, 2.0), (3, 1.0)])
def test_k_holds_in_every_world_the_rule_answers_for(reps: int, pool_df: int, tails: int | None,
                                                      ratio: float) -> None:
    """Gaussian noise in a row as noisy as its pool or twice as noisy, t3 as noisy: drawn afresh
    (not critical's draws), no more than 0.8 % of noise rows pass k in any of them. The pool's rows
    have three reps."""
    rng = np.random.default_rng([reps, pool_df, tails or 0, int(ratio)])
    sims = 60_000

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        if tails is None:
            return rng.standard_normal(shape)
        return rng.standard_t(tails, shape) / math.sqrt(tails / (tails - 2))

    x = np.sort(ratio * draw((sims, reps)), axis=1)
    pool = draw((sims, pool_df // 2, 3))
    squares = (((x[:, 1:] - x[:, 1:].mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
               + ((pool - pool.mean(axis=2, keepdims=True)) ** 2).sum(axis=(1, 2)))
    t = (x[:, 1] - x[:, 0]) / np.sqrt(squares / (reps - 2 + pool_df))
    share = float(np.mean(t > leak.critical(reps, pool_df)))
    # 0.8 % by design; 0.15 % is more than three standard errors of 60000 rows.
    assert share <= (1 - leak.CEILING_SHARE) * leak.FALSE_VOID + 0.0015


def test_a_row_alone_is_judged_against_the_noisiest_server() -> None:
    # One degree of freedom puts the pooled bar past 100 %: the bar is a 10 %-noise server's.
    ceiling = -math.expm1(-leak.critical(3, None) * leak.NOISE_MAX)
    assert ceiling == pytest.approx(0.482, abs=0.005)
    assert leak.read([1000.0, 530.0, 1100.0], 0.10).shape == Shape.NOISE  # 47 % below
    caught = leak.read([1000.0, 500.0, 1100.0], 0.10)  # 50 % below
    assert caught.shape == Shape.LEAK and caught.bar == pytest.approx(ceiling)


@pytest.mark.parametrize("reps, pool, shape", [
    ([135.0, 700.0, 700.0], [], Shape.LEAK),  # the notes' leaked C8: far below two that agree
    ([700.0, 135.0, 700.0], [], Shape.LEAK),  # wherever the low rep sits
    ([700.0, 690.0, 705.0, 120.0], [], Shape.LEAK),
    # docs/runs/h200-method: a server stalled 1.5 s inside a 4 s rep, beside two reps 9.6 % apart:
    # alone that gap is within the row's own noise; beside the run's quiet rows it is a leak.
    ([2202.1, 1192.9, 2000.3], [], Shape.NOISE),
    ([2202.1, 1192.9, 2000.3], QUIET, Shape.LEAK),
    ([1046.0, 1550.0, 2472.0], [], Shape.NOISE),  # scattered evenly
    ([1400.0, 1400.0, 2800.0], QUIET, Shape.NOISE),  # a rep far above: the lowest is not apart
    ([1350.0, 1400.0, 2000.0, 2000.0, 2000.0], QUIET, Shape.NOISE),  # two slow reps, not one alone
    ([1850.0, 1990.0, 2010.0], QUIET, Shape.CLEAN),  # within leak.spread
    ([300.0, 200.0], [], Shape.NOISE),  # two reps: too few to judge
    ([300.0, 200.0], QUIET, Shape.NOISE),
])
def test_the_shape_of_a_rep_set(reps: list[float], pool: list[list[float]], shape: Shape) -> None:
    reading = leak.read(reps, 0.10, pool)
    assert reading.shape == shape
    assert (reading.why == "") == (shape == Shape.CLEAN)
    if shape == Shape.LEAK:
        assert reading.rep == reps.index(min(reps))
        assert f"rep {reading.rep + 1} at {min(reps):.1f} tok/s" in reading.why
    else:
        assert reading.rep is None


def test_the_stall_is_read_against_the_pooled_noise() -> None:
    reading = leak.read([2202.1, 1192.9, 2000.3], 0.10, QUIET)
    noise = math.sqrt((0.02596 ** 2 * 16 + math.log(2202.1 / 2000.3) ** 2 / 2) / 17)
    assert reading.noise == pytest.approx(noise, rel=1e-3)
    assert reading.below == pytest.approx(1 - 1192.9 / 2000.3)
    # k x noise: 6.75 x 3.0 % = 20.3 % on the log scale, an 18.4 % drop.
    assert reading.bar == pytest.approx(-math.expm1(-leak.critical(3, 16) * noise), rel=1e-3)
    assert reading.bar == pytest.approx(0.184, abs=0.001)
    assert "40.4% below the next lowest (2000.3)" in reading.why
    assert "8 other rows" in reading.why


def test_two_reps_are_too_few() -> None:
    assert "2 reps are too few to tell a leak from noise" in leak.read([300.0, 200.0], 0.10).why


def test_leak_spread_is_the_smallest_drop_that_voids() -> None:
    still = [[1000.0, 1004.0, 996.0]] * 8  # a quiet server: sd 0.4 %
    dip = [1000.0, 930.0, 1003.0]  # 7 % below: 17 noise-widths, but within the declared 10 %
    assert leak.read(dip, 0.10, still).shape == Shape.CLEAN
    assert leak.read(dip, 0.05, still).shape == Shape.LEAK
    assert leak.read(dip, 0.05, still).bar == pytest.approx(0.05)


def test_the_reading_does_not_depend_on_the_unit() -> None:
    for scale in (1e-3, 1.0, 1e4):
        reps = [v * scale for v in (2202.1, 1192.9, 2000.3)]
        pool = [[v * scale for v in r] for r in QUIET]
        assert leak.read(reps, 0.10, pool).shape == Shape.LEAK


def test_the_pool_is_the_most_recent_rows() -> None:
    wild = [[500.0, 1000.0, 2000.0]] * 20  # earlier rows, very noisy
    some = leak.read([2202.1, 1192.9, 2000.3], 0.10, wild + QUIET)  # 4 of the 12 are wild
    assert some.shape == Shape.NOISE and "12 other rows" in some.why
    assert leak.read([2202.1, 1192.9, 2000.3], 0.10, wild + QUIET + QUIET[:4]).shape == Shape.LEAK


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_pure_noise_is_voided_at_most_once_in_a_hundred_rows(n: int) -> None:
    # 20 % noise, the run's eight earlier rows at the load alike: the bar follows the noise.
    drawn = [(rows(0.20, n, 1, f"row:{n}:{i}")[0], rows(0.20, 3, 8, f"pool:{n}:{i}")) for i in range(1500)]
    # The rule voids at most 1 % by design; 1.5 % is two standard errors of 1500 rows past it.
    assert voided(drawn) <= 0.015


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("sigma", [0.05, 0.10])
def test_t3_tailed_noise_is_voided_at_most_once_in_a_hundred_rows(n: int, sigma: float) -> None:
    # Heavy tails: a rep far below the rest now and then is the noise itself. A bar scaled for
    # Gaussian noise voided 1.5 to 2.9 % of these rows (bench/leak_sim.py).
    rng = np.random.default_rng([n, int(sigma * 100)])
    drawn = [(t3(rng, sigma, (1, n))[0], t3(rng, sigma, (8, 3))) for _ in range(1500)]
    assert voided(drawn) <= 0.015


@pytest.mark.parametrize("n", [3, 5])
def test_a_row_twice_as_noisy_as_its_pool_is_voided_at_most_once_in_a_hundred_rows(n: int) -> None:
    # A row at 10 % noise beside rows at 5 %: the pool's noise is not the row's. The bar of a row
    # as noisy as its pool voided 6 to 9 % of these.
    drawn = [(rows(0.10, n, 1, f"row:{n}:{i}")[0], rows(0.05, 3, 8, f"pool:{n}:{i}")) for i in range(1500)]
    assert voided(drawn) <= 0.015


@pytest.mark.parametrize("n", [3, 4, 5, 8])
@pytest.mark.parametrize("sigma, least", [(0.02, 0.99), (0.05, 0.93)])
def test_a_rep_at_half_the_others_is_caught(n: int, sigma: float, least: float) -> None:
    # bench/leak_sim.py puts it at 99 to 100 % at 5 % noise with 3 and 5 reps: 0.93 is that less
    # sampling slack for 1000 rows and 8 reps' wider bar. At 10 % noise it is about half: no rule
    # holds 1 % false voids in a row twice as noisy and catches much more there.
    caught = 0
    trials = 1000
    for i in range(trials):
        pool = rows(sigma, 3, 8, f"pool:{n}:{i}")
        row = rows(sigma, n, 1, f"row:{n}:{i}")[0]
        row[i % n] *= 0.5
        reading = leak.read(row, 0.10, pool)
        caught += reading.shape == Shape.LEAK and reading.rep == i % n
    assert caught / trials >= least


def test_only_a_leak_shaped_row_is_void_and_only_at_the_leak_concurrency() -> None:
    assert stats.classify([135.0, 700.0, 700.0], 8, POLICY) == "void"
    assert stats.classify([1046.0, 1550.0, 2472.0], 8, POLICY) == "noisy"
    assert stats.classify([135.0, 700.0, 700.0], 4, POLICY) == "noisy"
    assert stats.classify([712.0, 732.0, 756.0], 64, POLICY) == "ok"
    assert stats.classify([2202.1, 1192.9, 2000.3], 8, POLICY) == "noisy"
    assert stats.classify([2202.1, 1192.9, 2000.3], 8, POLICY, QUIET) == "void"


def test_under_a_precision_only_the_first_stage_is_judged() -> None:
    staged = stats.LeakPolicy(min_concurrency=8, spread=0.10, max_reruns=2, stage=3)
    added = [2000.0, 2010.0, 1990.0, 2005.0, 1000.0]  # the slow rep came after the first stage
    assert stats.classify(added, 8, POLICY, QUIET) == "void"
    reading = stats.leak_reading(added, staged, QUIET)
    assert reading.shape == Shape.NOISE
    assert "judges the first stage's 3 reps only" in reading.why
    assert stats.classify(added, 8, staged, QUIET) == "noisy"
    first = [2000.0, 1000.0, 1990.0, 2005.0, 2010.0]  # a slow rep in the first stage is condemned
    assert stats.classify(first, 8, staged, QUIET) == "void"
    assert stats.leak_reading(first, staged, QUIET).rep == 1
    assert stats.classify([2000.0, 2010.0, 1990.0, 2005.0], 8, staged, QUIET) == "ok"


def test_the_reason_says_why_a_wide_row_is_noise() -> None:
    why = leak.read([1046.0, 1550.0, 2472.0], 0.10).why
    assert why.startswith("noise: the lowest rep (1046.0 tok/s) is 32.5% below the next lowest (1550.0)")
    assert "0 other rows" in why and "at least leak.spread 10%" in why


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.0, 1e-300, 5.0]) | st.floats(0, 1e6), min_size=1, max_size=7),
       st.integers(0, 4), st.lists(st.lists(st.floats(0, 1e6), max_size=4), max_size=3))
def test_a_reading_says_no_non_finite_figure(values: list[float], stage: int,
                                              pool: list[list[float]]) -> None:
    """Reps that moved nothing (tok/s 0: every request failed) make the spread infinite; a
    reading's reason says so in words, never "spread inf%" (its text goes to the journal, the
    console and the report as it is)."""
    reading = stats.leak_reading(values, stats.LeakPolicy(spread=0.10, stage=stage), pool)
    assert not re.search(r"\b(inf|nan)\b", reading.why, re.IGNORECASE), reading.why
