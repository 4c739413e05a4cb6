"""Open loop on the FAKE server: each request sent at its time whatever is in flight, and rate rows
run by the Runner like concurrency rows, with their latency percentiles, rate and goodput."""

from __future__ import annotations

import csv
import threading
from pathlib import Path

import pytest

from engine.campaign.sources.item import plain_item
from engine.method import stats
from engine.record.receipts import read_rep
from engine.run.loadgen import PassPlan, arrival_times
from engine.run.measure import recompute_row
from engine.run.shards import measure_pass
from engine.runtime.base import LaunchPlan
from engine.servers import get_adapter
from engine.words import row_key
from tests.campaigns import campaign
from tests.component.fakes import Behaviour, FakeRuntime, FakeServer
from tests.component.helpers import events, runner

pytestmark = pytest.mark.timeout(60)


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
        res = measure_pass(PassPlan(server.base_url, get_adapter("llamacpp"),
                                    [plain_item("Name three colours.")], 1, 8, 8, {"temperature": 0}, {},
                                    30.0, arrivals=arrivals))
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
    window = text.split("### s1-ctx", 1)[1].split("\n## ", 1)[0]  # to the next section
    assert "| class | C | TTFT | ITL | TPOT | E2EL | req/s | goodput req/s | status |" in window
    assert window.count("| prose | 2 req/s |") == 2 and window.count("| prose | 8 req/s |") == 2
