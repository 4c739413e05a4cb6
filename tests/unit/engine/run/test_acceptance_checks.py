"""Issue 49: acceptance figures are checked for what they can be wherever they come from. A
/metrics answer with more tokens accepted than drafted, or a draft position accepted in more verify
steps than there were, is bad data said in the rep's reason, never a rate of 3.0 or a curve above
1; a per-request histogram is read in one pass, and one longer than any drafter's is refused."""

from __future__ import annotations

import time

import pytest

from engine.run.counters import Scrape, metrics_delta, read_counters
from engine.servers import get_adapter
from engine.servers.data import MAX_POSITIONS, BadServerData, acceptance

VLLM = get_adapter("vllm")


def metrics(drafts: int, drafted: int, accepted: int, per_pos: list[int]) -> str:
    lines = [f"vllm:spec_decode_num_drafts_total {drafts}",
             f"vllm:spec_decode_num_draft_tokens_total {drafted}",
             f"vllm:spec_decode_num_accepted_tokens_total {accepted}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {n}'
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
