"""Items sent as they are: each with its own messages and length to the FAKE server, and a campaign
of dataset and generated classes run by the Runner on the fake runtime like a plain one."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from engine.campaign.sources.item import Item, plain_item
from engine.method import stats
from engine.quality import Quality
from engine.record.receipts import read_rep
from engine.run.loadgen import PassPlan, arrival_times
from engine.run.measure import recompute_row
from engine.run.runner import frozen_items
from engine.run.shards import measure_pass
from engine.runtime.base import LaunchPlan
from engine.servers import get_adapter
from tests.campaigns import campaign
from tests.component.fakes import Behaviour, FakeRuntime, FakeServer
from tests.component.helpers import runner

pytestmark = pytest.mark.timeout(60)


def test_each_item_is_sent_with_its_own_messages_and_length() -> None:
    server = FakeServer(LaunchPlan("items", ["llama-server"], {}, {}, 0), Behaviour(tok_s=2000.0))
    server.booted.set()
    items: list[Item] = [
        {"messages": [{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "Name a sea."}], "max_tokens": 3},
        plain_item("Say hello."),
        {"messages": [{"role": "user", "content": "Count waves."}], "max_tokens": 5},
    ]
    try:
        res = measure_pass(PassPlan(server.base_url, get_adapter("llamacpp"), items, 1, 6, 8,
                                    {"temperature": 0}, {}, 10.0))
    finally:
        server.stop()
    assert not any(r["error"] for r in res.records)
    assert [r["prompt_index"] for r in res.records] == [0, 1, 2, 0, 1, 2]  # item i % len
    assert [r["completion_tokens"] for r in res.records] == [3, 8, 5, 3, 8, 5]
    sent = server.chats
    assert [b["messages"] for b in sent[:3]] == [i["messages"] for i in items]
    # The data's lengths go with llama-server's ignore_eos; the workload's length without it.
    assert [(b["max_tokens"], b.get("ignore_eos")) for b in sent[:3]] == [(3, True), (8, None), (5, True)]


@pytest.mark.slow
def test_a_campaign_of_dataset_and_generated_classes_runs_like_a_plain_one(tmp: Path,
                                                                          fake: FakeRuntime) -> None:
    """Warm passes, reps, deltas against the control and rows recomputed from their receipts, for
    a JSONL class with its own lengths and a shared-prefix class, closed loop and at a bursty rate;
    a resume sends the requests the run froze."""
    (tmp / "d.jsonl").write_text("".join(json.dumps({"prompt": f"Say {w}.", "output_tokens": n}) + "\n"
                                         for w, n in (("yes", 3), ("no", 5), ("maybe", 4))))
    spec = campaign("items", {"ctx": {"axis": "context 4096", "args": {"-c": 4096}}}, {"s1": ["ctx"]},
                    classes={"data": {"dataset": {"file": "d.jsonl"}},
                             "prefix": {"shared_prefix": {"groups": 2, "prompts_per_group": 2,
                                                          "system_tokens": 12, "question_tokens": 3}}},
                    concurrency=[2], rate=[8.0], burstiness=0.5, requests_per_rep=6, reps=2)
    r = runner(tmp, spec, fake)
    assert r.run() == "finished"
    frozen = json.loads((r.run_dir / "items.json").read_text())
    assert sorted(frozen) == ["data", "prefix"] and json.loads((r.run_dir / "prompts.json").read_text()) == {}
    got = list(csv.DictReader((r.run_dir / "throughput.csv").open()))
    assert len(got) == 8 and all(row["status"] == "ok" for row in got)
    for row in got:
        conc = int(row["concurrency"])
        again = recompute_row(r.run_dir, row["source"], conc, stats.LeakPolicy(8, 0.9, 1))
        for col in ("agg_tok_s", "ttft_ms", "spread", "cache_hit"):
            assert float(row[col] or 0) == pytest.approx(again[col] or 0), (row["class"], col)
        if row["window"] == "ctx":
            assert row["delta"] != ""
        for path in row["source"].split(";"):
            header, records = read_rep(r.run_dir / path)
            want = [frozen[row["class"]][q["prompt_index"]]["max_tokens"] or 6 for q in records]
            assert [q["completion_tokens"] for q in records] == want
            if row["rate"]:
                t0 = records[0]["scheduled"]
                assert [q["scheduled"] - t0 for q in records] == pytest.approx(
                    arrival_times(8.0, 6, 1234, 0.5), abs=1e-6)
    (tmp / "d.jsonl").write_text('{"prompt": "changed"}\n')
    assert frozen_items(r.campaign, r.run_dir, {}) == frozen


def test_the_quality_phase_reads_a_variable_greedy_file_as_validate_and_the_run_did(
        tmp: Path, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ${...} in a quality file's path: the run resolves it before it starts (launch.prepare),
    and the quality phase mid-run reads that same file, not a path named "${GREEDY}"."""
    (tmp / "data").mkdir()
    (tmp / "data" / "greedy.txt").write_text("Name a sea.\nName a river.\n")
    monkeypatch.setenv("GREEDY", str(tmp / "data"))
    spec = campaign("greedyvar", {}, {"s1": []}, requests_per_rep=2, reps=1,
                    quality={"greedy": {"file": "${GREEDY}/greedy.txt", "max_tokens": 4},
                             "teacher_forced": {"positions": 2}})
    r = runner(tmp, spec, fake, phases=[Quality()])
    assert r.run() == "finished"
    greedy = json.loads((r.run_dir / "windows" / "s1-control" / "greedy.json").read_text())
    assert [o["prompt"] for o in greedy["outputs"]] == ["Name a sea.", "Name a river."]
