"""A multi-turn pass (engine.run.loadgen, ``conversations``): a worker owns a conversation and sends
its turns in order after their think time, the cache policy's flush field on first turns only;
and a trace's items sent at their own times.

The passes run against the FAKE llama-server of tests/component/fakes.py; the real server is
tests/integration/test_replay.py.
"""

from __future__ import annotations

import itertools
from typing import cast

import pytest

from engine.campaign.sources import conversations as cv
from engine.campaign.sources.item import Item
from engine.run.loadgen import PassPlan
from engine.run.shards import measure_pass
from engine.runtime.base import LaunchPlan
from engine.servers import get_adapter
from tests.component.fakes import Behaviour, FakeServer

pytestmark = pytest.mark.timeout(60)
THINK = 0.15


def fake() -> FakeServer:
    server = FakeServer(LaunchPlan("turns", ["llama-server"], {}, {}, 0), Behaviour(tok_s=500.0))
    server.booted.set()
    return server


def test_each_worker_sends_its_conversations_turns_in_order_after_thinking() -> None:
    convs = cv.generate(cv.Generated(conversations=3, turns=3, user_tokens=6, reply_tokens=4), seed=2)
    items = cast(list[Item], cv.items(convs, think=THINK, seed=2))
    groups = cv.order(items)
    server = fake()
    try:
        res = measure_pass(PassPlan(server.base_url, get_adapter("llamacpp"), items, 2, len(groups), 16,
                                    {"temperature": 0}, {}, 10.0, conversations=groups,
                                    first_turn={"cache_prompt": False}))
    finally:
        server.stop()
    recs = res.records
    assert not any(r["error"] for r in recs)
    assert sorted(r["index"] for r in recs) == list(range(len(items)))  # every turn once
    assert [r["completion_tokens"] for r in recs] == [4] * len(items)  # the generated reply length
    assert {r["worker"] for r in recs} == {0, 1}
    for conv in range(3):
        mine = sorted((r for r in recs if r["conversation"] == conv), key=lambda r: r["start"])
        assert [r["turn"] for r in mine] == [0, 1, 2]
        assert len({r["worker"] for r in mine}) == 1  # one worker owns it
        assert all(b["start"] - a["end"] >= THINK - 0.005 for a, b in itertools.pairwise(mine))
    # Each turn carries its history; only a first turn carries the flush field.
    by_text = {str(b["messages"]): b for b in server.chats}
    for it in items:
        body = by_text[str(it["messages"])]
        assert body.get("cache_prompt") == (False if it.get("turn") == 0 else None)


def test_a_timed_multi_turn_pass_stops_sending_at_its_seconds() -> None:
    convs = cv.generate(cv.Generated(conversations=20, turns=4, user_tokens=4, reply_tokens=4), seed=1)
    items = cast(list[Item], cv.items(convs, think=0.2, seed=1))
    server = fake()
    try:
        res = measure_pass(PassPlan(server.base_url, get_adapter("llamacpp"), items, 1, 20, 16,
                                    {"temperature": 0}, {}, 10.0, conversations=cv.order(items), seconds=0.5))
    finally:
        server.stop()
    assert 0 < len(res.records) < len(items)
    assert max(r["start"] for r in res.records) - min(r["start"] for r in res.records) < 0.5
