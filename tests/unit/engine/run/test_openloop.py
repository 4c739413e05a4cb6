"""Open-loop load: seeded Poisson arrivals, requests sent at their times whatever is in flight,
and the figures of a row (latency percentiles, achieved rate, goodput under the SLOs).

The passes here run against the FAKE llama-server of tests/component/fakes.py (tokens paced at a set
rate per request); the real server is tests/integration/test_openloop.py.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from engine.campaign.load import SpecError, load_campaign
from engine.method import stats
from engine.run.loadgen import arrival_times

pytestmark = pytest.mark.timeout(60)


def test_arrivals_are_poisson_seeded_and_the_same_every_time() -> None:
    a = arrival_times(4.0, 2000, seed=1234)
    assert a == arrival_times(4.0, 2000, seed=1234)  # every rep, every window: one schedule
    assert a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:], strict=False))
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.06)  # mean 1 / rate
    # Exponential gaps: the standard deviation equals the mean (a fixed period would have none).
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.1)
    assert arrival_times(4.0, 10, seed=1235) != a[:10] and arrival_times(2.0, 10, seed=1234) != a[:10]






def rec(start: float, ttft: float, end: float, tokens: int, gaps: list[float],
        error: str | None = None) -> dict[str, Any]:
    return {"start": start, "first_token": start + ttft, "end": end, "completion_tokens": tokens,
            "chunks": tokens, "gaps_ms": gaps, "error": error}


def test_goodput_counts_the_requests_within_the_slos() -> None:
    slo = stats.Slo(ttft_ms=200, tpot_ms=50)
    fast = rec(0.0, 0.1, 0.5, 11, [40.0] * 10)  # TTFT 100 ms, 40 ms a token: within both
    slow_start = rec(0.0, 0.3, 0.7, 11, [40.0] * 10)  # TTFT 300 ms
    slow_tokens = rec(0.0, 0.1, 1.1, 11, [100.0] * 10)  # 100 ms a token
    one = rec(0.0, 0.1, 0.1, 1, [])  # no inter-token latency to miss
    failed = rec(0.0, 0.1, 0.5, 11, [40.0] * 10, error="HTTP 500")
    assert [stats.meets(r, slo) for r in (fast, slow_start, slow_tokens, one, failed)] == [
        True, False, False, True, False]
    fig = stats.rep_figures([fast, slow_start, slow_tokens, one, failed], 0, slo)
    wall = 1.1
    assert fig["rps"] == round(4 / wall, 4) and fig["goodput_rps"] == round(2 / wall, 4)
    assert stats.rep_figures([fast], 0)["goodput_rps"] is None  # no SLO set: no goodput


def test_latency_percentiles_pool_the_reps_requests() -> None:
    recs = [rec(0.0, 0.01 * i, 1.0, 5, [10.0 * i] * 4) for i in range(1, 101)]
    lat = stats.latency_figures(recs)
    assert lat["ttft_p50"] == pytest.approx(505.0) and lat["ttft_p99"] == pytest.approx(990.1)
    assert lat["itl_p90"] == pytest.approx(901.0)
    # TPOT: (end - first token) / (tokens - 1); the request whose first token came at its end
    # has none, so 99 values, the median the 50th: (1 - 0.5) s / 4 tokens.
    assert lat["tpot_p50"] == pytest.approx(125.0)
    assert stats.latency_figures([])["itl_p99"] is None


def test_a_campaign_needs_a_load(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text("""name: noload
server: llamacpp
runtime: process
process: {command: [llama-server]}
control: {args: {}}
windows:
  - {name: w, change: {args: {-c: 4096}}}
sessions: {s1: [w]}
workload:
  classes: {prose: {prompts: [hi]}}
  reps: 2
""")
    with pytest.raises(SpecError) as e:
        load_campaign(spec)
    assert [str(p) for p in e.value.problems] == [
        f"{spec}:9:1: the workload has no load: give concurrency (closed loop: C workers) or "
        "rate (open loop: requests per second), or both"]




