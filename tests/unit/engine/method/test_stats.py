"""Spread and leak rules on the campaign notes' own figures."""

from __future__ import annotations

from typing import Any

import pytest

from engine.method import stats
from engine.method.leak import spread

POLICY = stats.LeakPolicy(min_concurrency=8, spread=0.10, max_reruns=2)


def test_the_notes_leaked_c8_is_void() -> None:
    reps = [135.0, 700.0, 700.0]
    assert spread(reps) == pytest.approx(565 / 511.6667, rel=1e-4)  # 110 %+
    assert stats.classify(reps, 8, POLICY) == "void"


def test_the_notes_clean_c1_is_ok() -> None:
    reps = [201.0, 200.5, 202.7]
    assert spread(reps) == pytest.approx(2.2 / 201.4, rel=1e-4)
    assert stats.classify(reps, 1, POLICY) == "ok"


def test_wide_spread_below_min_concurrency_is_noisy_not_void() -> None:
    assert stats.classify([135.0, 700.0, 700.0], 4, POLICY) == "noisy"


def test_the_notes_clean_c8_at_6_percent_is_ok() -> None:
    assert stats.classify([712.0, 732.0, 756.0], 8, POLICY) == "ok"


def test_a_slow_rep_is_suspected_once_the_rule_can_judge_it() -> None:
    assert stats.suspect_rep([700.0], POLICY) is None
    assert stats.suspect_rep([700.0, 135.0], POLICY) is None  # two reps: too few to tell
    assert stats.suspect_rep([700.0, 135.0, 700.0], POLICY) == 1
    assert stats.suspect_rep([700.0, 690.0, 705.0], POLICY) is None


def test_rep_figures_from_records() -> None:
    recs = [
        {"start": 0.0, "first_token": 0.1, "end": 1.0, "completion_tokens": 46, "error": None},
        {"start": 0.0, "first_token": 0.2, "end": 2.0, "completion_tokens": 91, "error": None},
    ]
    f = stats.rep_figures(recs, 2)
    assert f["agg_tok_s"] == pytest.approx(137 / 2.0)
    assert f["per_user_tok_s"] == pytest.approx(137 / 4.0)
    assert f["ttft_ms"] == pytest.approx(150.0)
    assert f["decode_tok_s"] == pytest.approx((50.0 + 50.0) / 2)


def test_a_rep_with_failed_requests_voids_the_row() -> None:
    ok = {"start": 0.0, "first_token": 0.1, "end": 1.0, "completion_tokens": 10, "error": None}
    bad = {"start": 0.0, "first_token": None, "end": 0.5, "completion_tokens": None,
           "error": "HTTP 500"}
    reps: list[tuple[dict[str, Any], list[dict[str, Any]]]] = [({}, [ok]), ({}, [ok, bad]), ({}, [ok])]
    row = stats.row_figures(reps, 1, POLICY)
    assert row["status"] == "void" and row["failed_requests"] == 1


def _rep_of(tok_s: float, error: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A rep of two requests at C1 whose whole-rep figure is ``tok_s`` (one failed with ``error``)."""
    recs: list[dict[str, Any]] = [
            {"start": 0.0, "first_token": 0.1, "end": 1.0, "completion_tokens": int(tok_s),
             "error": None},
            {"start": 1.0, "first_token": 1.1, "end": 2.0, "completion_tokens": int(tok_s),
             "error": error}]
    return {}, recs


def test_only_what_the_verdict_condemns_is_measured_again() -> None:
    # The leak rule's low rep, alone.
    leaked = [_rep_of(700), _rep_of(135), _rep_of(700)]
    assert stats.row_figures(leaked, 8, POLICY)["status"] == "void"
    assert stats.condemned(leaked, 8, POLICY) == [1]
    # The reps with failed requests, not their clean neighbours.
    failing = [_rep_of(700), _rep_of(700, "HTTP 500"), _rep_of(690)]
    assert stats.condemned(failing, 8, POLICY) == [1]
    # A rep whose cache flush failed has no figures: it goes, the others stay.
    flushed = [_rep_of(700), ({"void": "cache flush failed: 500"}, []), _rep_of(690)]
    assert stats.condemned(flushed, 8, POLICY) == [1]
    # Every rep failing, or a void row whose reps name none: all of them.
    assert stats.condemned([_rep_of(700, "x"), _rep_of(700, "y")], 8, POLICY) == [0, 1]
    assert stats.condemned([_rep_of(700), _rep_of(690), _rep_of(695)], 8, POLICY) == [0, 1, 2]


def test_a_void_reason_names_the_condemned_rep_and_the_bar() -> None:
    from engine.run.attempt import _void_reason

    row = {"failed_requests": 0, "rep_tok_s": [700.0, 135.0, 700.0]}
    assert _void_reason(row, POLICY, "C8", ()) == (
        "rep 2 80.7% below the next lowest > the leak bar 10.0% at C8")
    throttled = {**row, "throttle_cause": "rep 2: power cap"}
    assert _void_reason(throttled, POLICY, "2.5 req/s", ()) == (
        "throttled (rep 2: power cap): rep 2 80.7% below the next lowest > the leak bar 10.0% at 2.5 req/s")
    assert _void_reason({**row, "failed_requests": 2, "error": "HTTP 500"}, POLICY, "C8", ()) == (
        "2 failed requests (HTTP 500)")
