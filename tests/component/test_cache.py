"""The run loop keeping the prefix cache, flushing it, and voiding a rep whose flush failed, on the
FAKE llama-server of tests/component/fakes.py; the adapters' flush and counters are
tests/unit/engine/run/test_cache.py's, the real server tests/integration/test_cache.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from engine.campaign.dryrun import describe
from engine.campaign.load import load_campaign
from engine.record.receipts import read_rep
from engine.servers.client import FlushFailed
from engine.servers.llamacpp import LlamaCppAdapter
from tests.campaigns import campaign
from tests.component.fakes import FakeRuntime
from tests.component.helpers import events, rows, runner

pytestmark = pytest.mark.timeout(60)


def cache_campaign(name: str, policy: str, **workload: Any) -> dict[str, Any]:
    return campaign(name, {"ctx": {"axis": "context 4096", "args": {"-c": 4096}}}, {"s1": ["ctx"]},
                    cache=policy, **workload)


def test_keep_measures_the_cache_the_warm_pass_filled(tmp: Path, fake: FakeRuntime) -> None:
    r = runner(tmp, cache_campaign("keep", "keep"), fake)
    assert r.run() == "finished"
    row = rows(r.run_dir)["s1-control/prose/c2"]
    # The warm pass cached both prompts; every rep then computes only each prompt's last token.
    header, records = read_rep(r.run_dir / row["source"].split(";")[0])
    assert header["cache"]["policy"] == "keep"
    prompt = sum(q["prompt_tokens"] or 0 for q in records)
    assert header["cache"]["metrics"] == {"prompt": prompt, "cached": prompt - len(records)}
    assert [q["cached_tokens"] for q in records] == [(q["prompt_tokens"] or 0) - 1 for q in records]
    assert (row["cache"], float(row["cache_hit"])) == ("keep", round((prompt - 2) / prompt, 4))


def test_flush_measures_every_prompt_computed(tmp: Path, fake: FakeRuntime) -> None:
    r = runner(tmp, cache_campaign("flush", "flush"), fake)
    assert r.run() == "finished"
    got = rows(r.run_dir)
    assert {(x["cache"], x["cache_hit"]) for x in got.values()} == {("flush", "0.0")}
    header, records = read_rep(r.run_dir / got["s1-ctx/prose/c2"]["source"].split(";")[0])
    assert header["cache"]["flush"] == ("no flush endpoint: every request of the pass is sent "
                                        "with cache_prompt: false")
    assert {q["cached_tokens"] for q in records} == {0}
    assert {e["cache_hit"] for e in events(r.run_dir, "rep_done")} == {0.0}


def test_a_failed_flush_voids_the_rep_and_it_alone_is_measured_again(
        tmp: Path, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """FAULT INJECTED: the llama.cpp adapter's flush is patched to fail once, before the control's
    second rep, as a server that refuses to empty its cache would."""
    calls: list[int] = []
    real = LlamaCppAdapter.flush_cache

    def flaky(self: LlamaCppAdapter, client: httpx.Client) -> str:
        calls.append(1)
        if len(calls) in (3, 4, 5):  # after the warm pass's and rep 1's: rep 2's three tries
            raise FlushFailed('POST /reset_prefix_cache answered HTTP 200 {"success": false}')
        return real(self, client)
    monkeypatch.setattr(LlamaCppAdapter, "flush_cache", flaky)
    monkeypatch.setattr("engine.run.passes.FLUSH_RETRY_S", 0.0)
    r = runner(tmp, cache_campaign("flaky", "flush"), fake)
    assert r.run() == "finished"
    [void] = events(r.run_dir, "row_void")
    assert (void["window"], void["attempt"], void["rerun"]) == ("control", 1, True)
    assert void["reason"] == ('rep 2: cache flush failed: POST /reset_prefix_cache answered HTTP 200 '
                              '{"success": false} (3 tries)')
    receipt = r.run_dir / "windows/s1-control/reps/prose-c2-1-2.jsonl"
    header, records = read_rep(receipt)
    assert records == [] and header["void"].startswith("cache flush failed: ")
    row = rows(r.run_dir)["s1-control/prose/c2"]
    assert (row["status"], row["attempts"], row["reps"]) == ("ok", "2", "3")
    # The void rep alone is measured again: rep 1 is kept (the new attempt's first), reps 2 and 3
    # are the second attempt's.
    assert void["condemned"] == [2]
    reps = "windows/s1-control/reps/prose-c2"
    assert row["source"] == f"{reps}-1-1.jsonl;{reps}-2-2.jsonl;{reps}-2-3.jsonl"


def test_dry_run_shows_the_flush_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cache_campaign("dry", "flush"), sort_keys=False))
    text = "\n".join(describe(load_campaign(path), {}, "process", {}))
    body = json.loads(text.split("requests: POST /v1/chat/completions  ", 1)[1].split("\n", 1)[0])
    assert body["cache_prompt"] is False
    assert "prefix cache: flush" in text
