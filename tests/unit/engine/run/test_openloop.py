"""Open-loop load: seeded Poisson arrivals, requests sent at their times whatever is in flight,
and the figures of a row (latency percentiles, achieved rate, goodput under the SLOs).

The passes here run against the FAKE llama-server of tests/unit/fakes.py (tokens paced at a set
rate per request); the real server is tests/integration/test_openloop.py.
"""

from __future__ import annotations

import csv
import statistics
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.campaign.load import SpecError, load_campaign
from engine.campaign.sources.item import plain_item
from engine.method import stats
from engine.record.receipts import read_rep
from engine.run.loadgen import arrival_times, measure_pass
from engine.run.measure import recompute_row
from engine.runtime.base import LaunchPlan
from engine.servers import get_adapter
from engine.words import row_key
from tests.unit.fakes import Behaviour, FakeRuntime, FakeServer
from tests.unit.helpers import campaign, events, runner

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


def fake_server(tok_s: float, together: threading.Barrier | None = None) -> FakeServer:
    server = FakeServer(LaunchPlan("openloop", ["llama-server", "-c", "2048"], {}, {}, 0),
                        Behaviour(tok_s=tok_s, together=together))
    server.booted.set()
    return server


def test_open_loop_sends_each_request_at_its_time_whatever_is_in_flight() -> None:
    """Eight requests on the arrival schedule; the fake holds every stream after its first token
    until all eight are in flight, which a closed loop of one worker would never reach. The open
    loop sends each at its time, never before it, whatever is in flight."""
    server = fake_server(tok_s=20.0, together=threading.Barrier(8))
    try:
        arrivals = arrival_times(10.0, 8, seed=7)
        res = measure_pass(server.base_url, get_adapter("llamacpp"), [plain_item("Name three colours.")],
                           1, 8, 8, {"temperature": 0}, {}, 30.0, arrivals=arrivals)
    finally:
        server.stop()
    recs = res.records
    assert [r["index"] for r in recs] == list(range(8)) and not any(r["error"] for r in recs)
    t0 = recs[0]["scheduled"]
    for r, at in zip(recs, arrivals, strict=True):
        assert r["scheduled"] - t0 == pytest.approx(at, abs=1e-6)
        assert r["start"] >= r["scheduled"]  # sent at its time, never early
    # All eight at once: the last was sent before the first ended.
    assert max(r["start"] for r in recs) < min(r["end"] for r in recs)


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


@pytest.mark.slow
def test_rate_rows_run_like_concurrency_rows(tmp: Path, fake: FakeRuntime) -> None:
    spec = campaign("rates", {"ctx": {"axis": "context 4096", "args": {"-c": 4096}}}, {"s1": ["ctx"]},
                    concurrency=[1], rate=[4.0], requests_per_rep=6, reps=2,
                    slo={"ttft_ms": 500, "tpot_ms": 100})
    r = runner(tmp, spec, fake)
    assert r.run() == "finished"
    got = {row_key(x["session"], x["window"], x["class"], int(x["concurrency"]), float(x["rate"] or 0)): x
           for x in csv.DictReader((r.run_dir / "throughput.csv").open())}
    assert sorted(got) == ["s1-control/prose/c1", "s1-control/prose/r4", "s1-ctx/prose/c1",
                           "s1-ctx/prose/r4"]
    row = got["s1-ctx/prose/r4"]
    assert (row["concurrency"], row["rate"], row["status"]) == ("0", "4.0", "ok")
    assert row["source"] == "windows/s1-ctx/reps/prose-r4-1-1.jsonl;windows/s1-ctx/reps/prose-r4-1-2.jsonl"
    # The same arrival schedule every rep, and the row recomputed from its receipts.
    sched = [[q["scheduled"] - recs[0]["scheduled"] for q in recs]
             for recs in (read_rep(r.run_dir / p)[1] for p in row["source"].split(";"))]
    assert sched[0] == pytest.approx(sched[1], abs=1e-6)
    again = recompute_row(r.run_dir, row["source"], 0, stats.LeakPolicy(8, 0.9, 1),
                          stats.Slo(500, 100))
    for col in ("agg_tok_s", "achieved_rps", "goodput_rps", "ttft_p99", "itl_p50", "tpot_p90"):
        assert float(row[col]) == pytest.approx(again[col]), col
    assert float(row["goodput_rps"]) == pytest.approx(float(row["achieved_rps"]))  # a quick fake
    assert row["delta"] != ""  # against the control's rate row of the same shape
    # Closed-loop rows gain the latency percentiles too.
    assert got["s1-ctx/prose/c1"]["itl_p99"] != "" and got["s1-ctx/prose/c1"]["rate"] == ""
    done = events(r.run_dir, "row_done", window="ctx", rate=4.0)
    assert len(done) == 1 and done[0]["concurrency"] == 0


@pytest.mark.slow
def test_a_campaign_of_rates_only_reports_its_controls_and_goodput(tmp: Path, fake: FakeRuntime) -> None:
    """The report's control line and tables take the rates when there is no concurrency (it said
    "No throughput rows" for a campaign of rates only)."""
    spec = campaign("ratesonly", {"ctx": {"axis": "context 4096", "args": {"-c": 4096}}},
                    {"s1": ["ctx"]}, concurrency=[], rate=[2.0, 8.0], requests_per_rep=4, reps=2,
                    slo={"ttft_ms": 500})
    r = runner(tmp, spec, fake)
    assert r.run() == "finished"
    from engine.report.render import render
    from engine.report.run import load_run
    text = render(load_run(r.run_dir), [], "")
    controls = text.split("## Controls", 1)[1].split("### s1: control", 1)[0]
    assert "No throughput rows" not in controls
    assert "| prose 2 req/s tok/s (spread) | prose 8 req/s agg / per user (spread) |" in controls
    window = text.split("### s1-ctx", 1)[1]
    assert "| class | C | TTFT | ITL | TPOT | req/s | goodput req/s | status |" in window
    assert window.count("| prose | 2 req/s |") == 2 and window.count("| prose | 8 req/s |") == 2
