"""The load generator sends items (engine.campaign.sources.item): each its own messages, and an
item with its own output length at exactly that length, through the adapter's fields that ignore
the end of sequence. Gamma arrivals for rate rows: the mean and dispersion asked for.

The passes run against the FAKE llama-server of tests/component/fakes.py (it generates max_tokens
tokens for every load request); the real server is tests/integration/test_workloads.py.
"""

from __future__ import annotations

import statistics

import pytest

from engine.run.loadgen import arrival_times
from engine.servers import get_adapter

pytestmark = pytest.mark.timeout(60)




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


