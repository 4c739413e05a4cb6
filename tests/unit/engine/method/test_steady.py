"""The steady window of a rep (engine.method.steady), on synthetic per-request records."""

from __future__ import annotations

from typing import Any

import pytest

from engine.method import stats, steady


def req(worker: int, start: float, first: float, end: float, tokens: int,
        chunks: int | None = None) -> dict[str, Any]:
    """A finished request whose ``chunks`` text chunks arrive evenly from first token to end."""
    k = chunks or tokens
    gap = (end - first) / (k - 1) * 1000 if k > 1 else 0.0
    return {"worker": worker, "start": start, "first_token": first, "end": end,
            "completion_tokens": tokens, "gaps_ms": [gap] * (k - 1), "error": None}


def closed_rep(c: int, per_worker: int, decode_s: float, tokens: int, stagger: float) -> list[dict[str, Any]]:
    """C workers, each sending ``per_worker`` requests back to back; worker w starts ``w * stagger``
    late (its ramp) and so ends as late (the tail)."""
    out = []
    for w in range(c):
        t = w * stagger
        for _ in range(per_worker):
            out.append(req(w, t, t + 0.05, t + 0.05 + decode_s, tokens))
            t += 0.05 + decode_s
    return out


def test_the_closed_loop_window_is_while_every_worker_is_busy() -> None:
    recs = closed_rep(c=4, per_worker=3, decode_s=1.0, tokens=100, stagger=0.5)
    w = steady.window(recs, 4)
    assert w is not None
    assert w.start == pytest.approx(3 * 0.5 + 0.05)  # the last worker's first token
    assert w.end == pytest.approx(3 * 1.05)  # the first worker's last end
    f = steady.figures(recs, 4)
    assert f["ramp_s"] == pytest.approx(w.start)
    assert f["tail_s"] == pytest.approx(3 * 0.5 + 3 * 1.05 - w.end)
    # Inside the window each worker makes 100 tokens a cycle of 1.05 s (prefill, then decode).
    assert f["steady_tok_s"] == pytest.approx(4 * 100 / 1.05, rel=0.03)
    # The whole rep is diluted by its ramp and tail.
    assert stats.rep_figures(recs, 4)["agg_tok_s"] < f["steady_tok_s"]


def test_a_rep_with_fewer_workers_than_c_or_no_overlap_has_no_window() -> None:
    recs = closed_rep(c=2, per_worker=1, decode_s=1.0, tokens=50, stagger=0.0)
    assert steady.window(recs, 4) is None
    late = closed_rep(c=2, per_worker=1, decode_s=1.0, tokens=50, stagger=2.0)
    assert steady.window(late, 2) is None
    assert steady.figures(late, 2) == {"steady_tok_s": None, "steady_s": None, "ramp_s": None,
                                       "tail_s": None}


def test_a_row_is_over_its_steady_windows_only_when_every_rep_has_one() -> None:
    good = closed_rep(c=2, per_worker=3, decode_s=1.0, tokens=100, stagger=0.3)
    short = closed_rep(c=2, per_worker=1, decode_s=1.0, tokens=100, stagger=2.0)
    policy = stats.LeakPolicy()
    row = stats.row_figures([({}, good), ({}, good)], 2, policy)
    assert row["basis"] == stats.STEADY
    assert row["rep_tok_s"] == [stats.rep_figures(good, 2)["steady_tok_s"]] * 2
    assert row["rep_whole_tok_s"] == [stats.rep_figures(good, 2)["agg_tok_s"]] * 2
    mixed = stats.row_figures([({}, good), ({}, short)], 2, policy)
    assert mixed["basis"] == stats.WHOLE
    assert mixed["rep_tok_s"] == mixed["rep_whole_tok_s"]


def test_the_open_loop_window_leaves_out_the_filling_and_the_drain() -> None:
    # One arrival every 0.1 s for 5 s, each request 1 s long: the server fills for a second.
    recs = [dict(req(-1, i * 0.1, i * 0.1 + 0.02, i * 0.1 + 1.0, 50), scheduled=i * 0.1)
            for i in range(50)]
    w = steady.window(recs, 0)
    assert w is not None
    assert w.start == pytest.approx(1.0)  # one median duration after the first arrival
    assert w.end == pytest.approx(4.9)  # the last arrival
    # Ten requests in flight, each at 49 tokens over 0.98 s after its first.
    assert steady.figures(recs, 0)["steady_tok_s"] == pytest.approx(10 * 49 / 0.98, rel=0.03)


def test_a_receipt_without_chunk_gaps_spreads_its_tokens_evenly() -> None:
    r = req(0, 0.0, 0.1, 1.1, 11)
    del r["gaps_ms"]
    times, each = steady.token_times(r)
    assert each == 1.0 and len(times) == 11
    assert times[0] == pytest.approx(0.1) and times[-1] == pytest.approx(1.1)
