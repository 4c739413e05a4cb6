"""Issue 49: acceptance figures are checked for what they can be wherever they come from. A
/metrics answer with more tokens accepted than drafted, or a draft position accepted in more verify
steps than there were, a later position accepted more often than an earlier one, per-position counts
summing to more than were accepted, or more accepted a step than there are positions, is bad data
said in the rep's reason, never a rate of 3.0, a length of 2401 or a curve that rises; a
per-request histogram is read in one pass, and one longer than any drafter's is refused. Counters
as llama-server prints them (6 significant digits) are not refused for their rounding."""

from __future__ import annotations

import time

import pytest

from engine.run.counters import Scrape, metrics_delta, read_counters
from engine.servers import get_adapter
from engine.servers.data import MAX_POSITIONS, BadServerData, acceptance

VLLM = get_adapter("vllm")


def metrics(drafts: int, drafted: int | str, accepted: int | str, per_pos: list[int],
            server: str = "vllm") -> str:
    """A /metrics answer with these counters, each written as given (llama-server's 1.23456e+06)."""
    lines = [f"{server}:spec_decode_num_drafts_total {drafts}",
             f"{server}:spec_decode_num_draft_tokens_total {drafted}",
             f"{server}:spec_decode_num_accepted_tokens_total {accepted}"]
    lines += [f'{server}:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {n}'
              for i, n in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def test_a_scrape_with_more_accepted_than_drafted_is_bad_data() -> None:
    scrape = read_counters(VLLM, 200, metrics(10, 10, 30, [10, 10, 10]))
    assert scrape.counters is None and scrape.rejected
    assert "30 tokens accepted of 10 drafted" in (scrape.why or "")


def test_a_position_accepted_in_more_steps_than_there_were_is_bad_data() -> None:
    scrape = read_counters(VLLM, 200, metrics(10, 300, 210, [50, 70, 90]))  # a curve of 5 7 9
    assert scrape.rejected and scrape.why == (
        "/metrics: its speculative-decoding counters: position 0 accepted in 50 verify steps of 10"), scrape
    # Each scrape may hold, and only their change over the pass not.
    before = Scrape({"drafts": 10.0, "drafted": 30.0, "accepted": 5.0, "pos.0": 5.0}, None)
    after = Scrape({"drafts": 12.0, "drafted": 42.0, "accepted": 12.0, "pos.0": 10.0}, None)
    counts, why, bad = metrics_delta(before, after)
    assert counts is None and bad and "position 0 accepted in 5 verify steps of 2" in (why or "")


def test_a_later_position_accepted_more_often_than_an_earlier_one_is_bad_data() -> None:
    # The attack: position 1 accepted in every step, position 0 in one ("0.1667 1").
    scrape = read_counters(VLLM, 200, metrics(6, 12, 7, [1, 6]))
    assert scrape.rejected and scrape.why == (
        "/metrics: its speculative-decoding counters: position 1 accepted in 6 verify steps, more "
        "than position 0 (1): a draft token is accepted only after every one before it"), scrape


def test_per_position_counts_summing_past_the_accepted_tokens_are_bad_data() -> None:
    scrape = read_counters(VLLM, 200, metrics(6, 12, 2, [6, 6]))
    assert scrape.rejected and scrape.why == (
        "/metrics: its speculative-decoding counters: the per-position counts sum to 12 accepted "
        "tokens, more than the 2 accepted"), scrape


def test_more_accepted_a_step_than_there_are_positions_is_bad_data() -> None:
    # The attack: one verify step, 2,400 tokens drafted and accepted, two positions (length 2401).
    scrape = read_counters(VLLM, 200, metrics(1, 2400, 2400, [1, 1]))
    assert scrape.rejected and scrape.why == (
        "/metrics: its speculative-decoding counters: 2400 tokens accepted in 1 verify steps, more "
        "than the 2 draft positions allow a step (a length of 2401 where at most 3 can be)"), scrape
    # Per request without a histogram: no positions, but no drafter has more than MAX_POSITIONS.
    with pytest.raises(BadServerData, match=r"^r: 5000 tokens accepted in 1 verify steps, more than "
                       rf"{MAX_POSITIONS} a step: no drafter has more draft positions$"):
        acceptance(5000, 5000, 1, "r")
    with pytest.raises(BadServerData, match=r"^r: 5000 tokens drafted in 2 verify steps, more than "
                       rf"{MAX_POSITIONS} a step: no drafter has more draft positions$"):
        acceptance(5000, 10, 2, "r")


def test_llama_server_counters_rounded_to_six_digits_are_not_refused() -> None:
    # llama-server prints its counters as a C++ stream prints a double, to 6 significant digits,
    # and its per-position counts exactly (server-task.cpp).
    def scrape(drafts: int, drafted: str, accepted: str, per_pos: list[int]) -> Scrape:
        return read_counters(get_adapter("llamacpp"), 200, metrics(drafts, drafted, accepted, per_pos,
                                                                    "llamacpp"))

    # 1,234,564 accepted prints as 1.23456e+06, below the exact sum of its positions.
    got = scrape(400_000, "2.46913e+06", "1.23456e+06", [400_000, 400_000, 300_000, 134_564])
    assert not got.rejected and got.counters is not None, got
    # Every draft of 7 accepted in 700,007 steps: 4,900,049 prints as 4.90005e+06, past 7 a step.
    before = scrape(700_007, "4.90005e+06", "4.90005e+06", [700_007] * 7)
    assert not before.rejected, before
    # 7 steps more, every draft accepted: 4,900,098 prints as 4.9001e+06, a change of 50 for 49.
    counts, why, bad = metrics_delta(before, scrape(700_014, "4.9001e+06", "4.9001e+06", [700_014] * 7))
    assert counts is not None and not bad, why
    # But not past what the rounding explains: 1,050 accepted in 7 steps, each scrape consistent.
    before = scrape(700_000, "4.9e+06", "2.8e+06", [700_000] * 4 + [0] * 3)
    after = scrape(700_007, "4.90105e+06", "2.80105e+06", [700_007] * 4 + [0] * 3)
    assert not before.rejected and not after.rejected, (before, after)
    counts, why, bad = metrics_delta(before, after)
    assert counts is None and bad and why == (
        "the metrics counters' change over the pass: 1050 tokens accepted in 7 verify steps, more than "
        "the 7 draft positions allow a step (a length of 151 where at most 8 can be)"), why


def test_consistent_counters_are_kept() -> None:
    scrape = read_counters(VLLM, 200, metrics(10, 30, 12, [6, 4, 2]))
    assert scrape.counters == {"drafts": 10.0, "drafted": 30.0, "accepted": 12.0,
                               "pos.0": 6.0, "pos.1": 4.0, "pos.2": 2.0}


def test_a_histogram_is_read_in_linear_time_and_one_past_any_drafter_is_refused() -> None:
    n = MAX_POSITIONS + 1
    h = [1] * n
    t0 = time.process_time()
    for _ in range(50):
        got = acceptance(sum(range(n)) + n, sum(i for i in range(n)), n, "r", h)
    spent = time.process_time() - t0
    assert got is not None and got["pos.0"] == n - 1 and got[f"pos.{n - 2}"] == 1
    print(f"50 histograms of {n} entries: {spent:.3f} s")  # quadratic: ~25 M additions each
    with pytest.raises(BadServerData, match="histogram of 60000 entries"):
        acceptance(0, 0, None, "r", [0] * 60_000)
