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


def in_phase(c: int, per_worker: int, prefill_s: float, decode_s: float,
             tokens: int) -> list[dict[str, Any]]:
    """C workers that start together and stay in phase: each request a prefill with no token, then
    its tokens evenly over its decode; the server's cycle is prefill_s + decode_s for every worker."""
    out = []
    for w in range(c):
        t = 0.0
        for _ in range(per_worker):
            out.append(req(w, t, t + prefill_s, t + prefill_s + decode_s, tokens))
            t += prefill_s + decode_s
    return out


def test_the_closed_loop_window_runs_from_send_to_send_while_every_worker_is_busy() -> None:
    recs = closed_rep(c=4, per_worker=4, decode_s=1.0, tokens=100, stagger=0.5)
    w = steady.window(recs, 4)
    assert w is not None
    # The first send once every worker has its first token (worker 1's second request, at 1.55),
    # the last before the first worker ends its last request (worker 2's fourth, at 1.0 + 3 x 1.05).
    assert w.start == pytest.approx(0.5 + 1.05)
    assert w.end == pytest.approx(1.0 + 3 * 1.05)
    f = steady.figures(recs, 4)
    assert f["ramp_s"] == pytest.approx(w.start)
    assert f["tail_s"] == pytest.approx(1.5 + 4 * 1.05 - w.end)
    # Sends inside it: 1.55 2.05 2.10 2.55 2.60 3.10 3.15 3.60 3.65, over 4 workers.
    assert f["steady_cycles"] == pytest.approx(9 / 4)
    # Inside the window each worker makes 100 tokens a cycle of 1.05 s (prefill, then decode).
    assert f["steady_tok_s"] == pytest.approx(4 * 100 / 1.05, rel=0.03)
    # The whole rep is diluted by its ramp and tail.
    assert stats.rep_figures(recs, 4)["agg_tok_s"] < f["steady_tok_s"]


def test_workers_in_phase_read_their_sustained_rate_not_their_decode_burst() -> None:
    # 8 workers, 4 requests each, a 1 s prefill stall and a 1 s decode of 100 tokens a cycle:
    # sustained, 8 x 100 tokens every 2 s.
    recs = in_phase(c=8, per_worker=4, prefill_s=1.0, decode_s=1.0, tokens=100)
    f = steady.figures(recs, 8)
    assert f["steady_tok_s"] == pytest.approx(400.0)
    assert f["steady_s"] == pytest.approx(4.0) and f["steady_cycles"] == 2.0
    # Cut from the last first token (1 s) to the first worker's last end (8 s), the window held
    # 4 decodes and 3 stalls: 8 x 400 tokens over 7 s, 14 % high.
    assert steady.tokens_in(recs, steady.Window(1.0, 8.0)) / 7.0 == pytest.approx(3200 / 7, rel=0.01)


def test_a_window_under_two_cycles_a_worker_is_too_short_to_carry_the_row() -> None:
    recs = in_phase(c=8, per_worker=3, prefill_s=1.0, decode_s=1.0, tokens=100)
    f = steady.figures(recs, 8)
    assert f["steady_cycles"] == 1.0
    assert steady.too_short(f["steady_s"], f["ramp_s"], f["tail_s"], f["steady_cycles"])
    assert "1 request cycles per worker" in steady.why_short(f["steady_s"], f["ramp_s"], f["tail_s"],
                                                               f["steady_cycles"])
    row = stats.row_figures([({}, recs)], 8, stats.LeakPolicy())
    assert row["basis"] == stats.WHOLE and row["rep_tok_s"] == row["rep_whole_tok_s"]
    assert stats.basis_why([stats.rep_figures(recs, 8)]).startswith("rep 1: a steady window of 1 ")
    long = in_phase(c=8, per_worker=4, prefill_s=1.0, decode_s=1.0, tokens=100)
    assert not steady.too_short(*(steady.figures(long, 8)[k] for k in
                                  ("steady_s", "ramp_s", "tail_s", "steady_cycles")))


def test_a_rep_with_fewer_workers_than_c_or_no_overlap_has_no_window() -> None:
    recs = closed_rep(c=2, per_worker=1, decode_s=1.0, tokens=50, stagger=0.0)
    assert steady.window(recs, 4) is None
    late = closed_rep(c=2, per_worker=1, decode_s=1.0, tokens=50, stagger=2.0)
    assert steady.window(late, 2) is None
    assert steady.figures(late, 2) == {"steady_tok_s": None, "steady_s": None, "ramp_s": None,
                                       "tail_s": None, "steady_cycles": None}
    # Two requests a worker in phase: the only send is every worker's second, at once.
    assert steady.window(in_phase(c=4, per_worker=2, prefill_s=1.0, decode_s=1.0, tokens=10), 4) is None


def test_a_row_is_over_its_steady_windows_only_when_every_rep_has_one() -> None:
    good = closed_rep(c=2, per_worker=4, decode_s=1.0, tokens=100, stagger=0.3)
    short = closed_rep(c=2, per_worker=1, decode_s=1.0, tokens=100, stagger=2.0)
    policy = stats.LeakPolicy()
    row = stats.row_figures([({}, good), ({}, good)], 2, policy)
    assert row["basis"] == stats.STEADY
    assert row["rep_tok_s"] == [stats.rep_figures(good, 2)["steady_tok_s"]] * 2
    assert row["rep_whole_tok_s"] == [stats.rep_figures(good, 2)["agg_tok_s"]] * 2
    mixed = stats.row_figures([({}, good), ({}, short)], 2, policy)
    assert mixed["basis"] == stats.WHOLE
    assert mixed["rep_tok_s"] == mixed["rep_whole_tok_s"]
    assert stats.basis_why([stats.rep_figures(r, 2) for r in (good, short)]) == \
        "rep 2 has no steady window"


def test_same_basis_gives_the_reason_two_rows_make_no_delta() -> None:
    steady_row, whole_row = {"basis": "steady"}, {"basis": "whole"}
    assert steady.same_basis(steady_row, {"basis": "steady"}) is None
    assert steady.same_basis(whole_row, {"basis": ""}) is None  # a row from before: whole reps
    assert steady.same_basis(whole_row, {}) is None
    why = steady.same_basis(steady_row, whole_row)
    assert why is not None and "steady against whole" in why
    assert steady.same_basis({}, steady_row) is not None


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


def test_per_user_is_the_rows_tok_s_over_its_users_on_the_rows_basis() -> None:
    """One definition of per user (the seed's "732 agg / 91.5 per user" at C8): the row's tok/s over
    its C workers, on the same basis as the tok/s; a closed-loop row's per user is agg_tok_s / C
    exactly, whether its basis is the steady window or the whole reps."""
    good = closed_rep(c=2, per_worker=4, decode_s=1.0, tokens=100, stagger=0.3)
    short = closed_rep(c=2, per_worker=1, decode_s=1.0, tokens=100, stagger=2.0)
    policy = stats.LeakPolicy()
    both: list[list[tuple[dict[str, Any], list[dict[str, Any]]]]] = [
        [({}, good), ({}, good)], [({}, good), ({}, short)]]
    for reps in both:
        row = stats.row_figures(reps, 2, policy)
        assert row["per_user_tok_s"] == pytest.approx(row["agg_tok_s"] / 2, abs=1e-3), row["basis"]
    one = stats.row_figures([({}, good)] * 3, 1, policy)
    assert one["per_user_tok_s"] == one["agg_tok_s"]
    assert stats.per_user(91.5 * 8, 8) == 91.5
