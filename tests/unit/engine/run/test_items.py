"""The load generator sends items (engine.campaign.sources.item): each its own messages, and an
item with its own output length at exactly that length, through the adapter's fields that ignore
the end of sequence. Gamma arrivals for rate rows: the mean and dispersion asked for.

The passes run against the FAKE llama-server of tests/unit/fakes.py (it generates max_tokens
tokens for every load request); the real server is tests/integration/test_workloads.py.
"""

from __future__ import annotations

import statistics

import pytest
from fakes import Behaviour, FakeServer

from engine.campaign.sources.item import Item, plain_item
from engine.run.load import arrival_times, measure_pass
from engine.runtime.base import LaunchPlan
from engine.servers import get_adapter

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
        res = measure_pass(server.base_url, get_adapter("llamacpp"), items, 1, 6, 8,
                           {"temperature": 0}, {}, 10.0)
    finally:
        server.stop()
    assert not any(r["error"] for r in res.records)
    assert [r["prompt_index"] for r in res.records] == [0, 1, 2, 0, 1, 2]  # item i % len
    assert [r["completion_tokens"] for r in res.records] == [3, 8, 5, 3, 8, 5]
    sent = server.chats
    assert [b["messages"] for b in sent[:3]] == [i["messages"] for i in items]
    # The data's lengths go with llama-server's ignore_eos; the workload's length without it.
    assert [(b["max_tokens"], b.get("ignore_eos")) for b in sent[:3]] == [(3, True), (8, None), (5, True)]


def test_every_adapter_names_its_fields_for_an_exact_length() -> None:
    assert get_adapter("llamacpp").exact_length_fields(7) == {"ignore_eos": True}
    assert get_adapter("vllm").exact_length_fields(7) == {"ignore_eos": True, "min_tokens": 7}
    assert get_adapter("sglang").exact_length_fields(7) == {"ignore_eos": True, "min_tokens": 7}


@pytest.mark.parametrize("shape", [0.25, 1.0, 4.0])
def test_gamma_arrivals_have_the_rate_s_mean_and_the_shape_s_dispersion(shape: float) -> None:
    rate = 5.0
    a = arrival_times(rate, 20_000, seed=11, shape=shape)
    assert a == arrival_times(rate, 20_000, seed=11, shape=shape)  # seeded: every rep the same
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / rate, rel=0.05)
    # A gamma of shape k: coefficient of variation 1/sqrt(k) (1 for Poisson, above 1 bursty).
    assert statistics.stdev(gaps) / mean == pytest.approx(shape ** -0.5, rel=0.06)


def test_shape_one_is_the_poisson_schedule_rate_rows_always_had() -> None:
    import random

    rng = random.Random("1234:4.0")
    t, old = 0.0, []
    for _ in range(50):
        old.append(t)
        t += rng.expovariate(4.0)
    assert arrival_times(4.0, 50, seed=1234) == old == arrival_times(4.0, 50, seed=1234, shape=1.0)
