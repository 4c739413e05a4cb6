"""A leaked pass caught live, voided, rewarmed and rerun, on the real testbed.

The slow rep is made by a slowing TCP proxy in front of the real llama-server (fault injection: a
real server cannot be told to leak an autotune pass on cue). The proxy forwards every byte; a chat
request that opens while the engine's own journal says rep 2 of the control's first attempt is under
way (rep 1 done, rep 2 not) has its whole response held back, twelve times as long as the server
took to give it, as a server stuck in an autotune pass would. Keying on the journal, not on a request
count, keeps the slow rep the same whatever else the engine sends (probes, warm passes, quality).
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.record.journal import read_events
from engine.runtime.base import LaunchPlan, free_port
from engine.sanitize import markdown
from tests.integration.live import SlowingProxy, during_rep_two, serve

# Slow: a campaign on the real server behind the proxy, over ten seconds.
pytestmark = pytest.mark.slow

CAMPAIGN = """\
name: leak
server: llamacpp
runtime: attach
attach:
  url: http://127.0.0.1:{port}/v1
control:
  args: {{}}
windows:
  - name: same
    axis: the same server (the proxy decides which rep leaks)
    change:
      env: {{UNUSED: "1"}}
sessions:
  s1: [same]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours."]}}
  concurrency: [2]
  reps: 3
  requests_per_rep: 8
  max_tokens: 16
# The control's row is alone at its load: its bar is a 10 %-noise server's (48 %), or 6.6 times
# the other two reps' sd past that, so the held rep (a thirteenth of the others, 92 % below) is
# caught while they agree within about 70 %; four requests a worker keep a rep's figure steadier
# on a loaded machine.
leak: {{min_concurrency: 2, spread: 0.5, max_reruns: 1}}
quality: {{enabled: false}}
"""

def test_leaked_rep_is_voided_rewarmed_and_rerun(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    port = free_port()
    # One thread: two on two busy cores spin at every barrier (campaigns/demo-smollm2.yaml), and
    # the leak rule needs the reps other than the slow one to agree.
    server = serve(LaunchPlan("leak-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "2048", "-np", "2",
        "-t", "1", "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    results = tmp_path / "results"
    proxy = SlowingProxy(port, slow=during_rep_two(results))
    proxy.start()
    assert proxy.ready.wait(10)
    spec = tmp_path / "leak.yaml"
    spec.write_text(CAMPAIGN.format(port=proxy.port))
    try:
        out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                              "--results-dir", str(results)], capture_output=True, text=True,
                             timeout=600)
        print(out.stdout[-3000:])
        assert out.returncode == 0, out.stderr
    finally:
        proxy.stop()
        server.stop()
    assert proxy.slowed == 8  # requests_per_rep: every request of rep 2, and nothing else
    run = next(results.iterdir())
    events = read_events(run / "journal.jsonl")
    control = [e for e in events if e.get("window") == "control"]
    leaks = [e for e in control if e["kind"] == "leak_suspected"]
    assert leaks and (leaks[0]["attempt"], leaks[0]["rep"]) == (1, 2), leaks
    assert [(e["attempt"], e["rep"]) for e in leaks].count((1, 2)) == 1  # said once, when it landed
    voids = [e for e in control if e["kind"] == "row_void"]
    assert voids and voids[0]["attempt"] == 1 and voids[0]["rerun"] is True
    attempt1 = [e["agg_tok_s"] for e in control if e["kind"] == "rep_done" and e["attempt"] == 1]
    assert attempt1[1] < 0.5 * max(attempt1[0], attempt1[2]), attempt1
    # The rerun: a fresh warm pass, then only the condemned rep again; reps 1 and 3 are kept,
    # and the void attempt's receipts stay on disk.
    assert voids[0]["condemned"] == [2]
    warms = [e["attempt"] for e in control if e["kind"] == "warm_done"]
    assert warms[:2] == [1, 2]
    assert [e["rep"] for e in control if e["kind"] == "rep_done" and e["attempt"] == 2] == [3]
    for rep in (1, 2, 3):
        assert (run / "windows" / "s1-control" / "reps" / f"prose-c2-1-{rep}.jsonl").exists()
    row = next(r for r in csv.DictReader((run / "throughput.csv").open())
               if r["window"] == "control")
    assert row["attempts"] == "2" and row["status"] != "void"
    reps = "windows/s1-control/reps/prose-c2"
    assert row["source"] == f"{reps}-1-1.jsonl;{reps}-1-3.jsonl;{reps}-2-3.jsonl"
    # The report has the void attempt on record, its reason and its reps, beside the rerun.
    report = subprocess.run([sys.executable, "-m", "engine", "report", str(run)],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    text = (run / "report.md").read_text()
    first = voids[0]
    assert (f"- prose C2: attempt 1 **void** ({markdown(first['reason'])}; reps "
            f"{', '.join(f'{v:.2f}' for v in first['rep_tok_s'])} tok/s): rewarmed, rep 2 "
            "measured again and the rest kept") in text, text
