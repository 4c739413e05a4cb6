"""engine.method.capacity and sla: the bracketing search, rep by rep verdicts, the band against
the control's."""

from collections.abc import Callable

import pytest

from engine.method.capacity import Answer, Found, ProbeResult, Search, step, versus
from engine.method.sla import Criteria, judge, rep_figures
from engine.method.stats import Slo

HOLDS, FAILS = ProbeResult.HOLDS, ProbeResult.FAILS


def run(search: Search, truth: Callable[[float], ProbeResult]) -> tuple[list[float], Answer]:
    """The search driven to its end against a server whose verdict at each load is ``truth``."""
    probes: dict[float, ProbeResult] = {}
    order: list[float] = []
    while True:
        answer = step(search, probes)
        if answer.next is None:
            return order, answer
        assert answer.next not in probes, "a load is never probed twice"
        order.append(answer.next)
        probes[answer.next] = truth(answer.next)


def band(answer: Answer) -> tuple[float, float]:
    assert answer.lo is not None and answer.hi is not None, answer
    return answer.lo, answer.hi


def edge(at: float) -> Callable[[float], ProbeResult]:
    return lambda x: ProbeResult.HOLDS if x <= at else ProbeResult.FAILS


def test_the_band_closes_on_the_edge_within_the_resolution() -> None:
    order, answer = run(Search("rate", 1, 64, resolution=0.1, max_probes=12), edge(10.3))
    assert order[:2] == [1, 64] and order[2] == 8  # the low end, the high end, then halves (geometric)
    assert answer.found == Found.BRACKETED
    lo, hi = band(answer)
    assert lo <= 10.3 < hi and hi / lo <= 1.1


def test_a_concurrency_search_ends_on_neighbouring_whole_numbers() -> None:
    order, answer = run(Search("concurrency", 1, 32, max_probes=20), edge(11))
    assert all(x == int(x) for x in order)
    assert (answer.lo, answer.hi, answer.found) == (11, 12, Found.BRACKETED)


def test_below_and_above_the_range() -> None:
    _, below = run(Search("rate", 4, 16), edge(2))
    assert (below.found, below.lo, below.hi) == (Found.BELOW, None, 4)
    _, above = run(Search("rate", 4, 16), edge(100))
    assert (above.found, above.lo, above.hi) == (Found.ABOVE, 16, None)


def test_the_budget_ends_the_search_with_the_band_it_has() -> None:
    order, answer = run(Search("rate", 1, 1000, resolution=0.01, max_probes=4), edge(37))
    assert len(order) == 4 and answer.found == Found.BUDGET
    lo, hi = band(answer)
    assert lo <= 37 < hi


def test_mixed_probes_stay_inside_the_band_and_split_it() -> None:
    # Between 8 and 12 the reps disagree: neither side of that zone is claimed.
    def noisy(x: float) -> ProbeResult:
        return ProbeResult.HOLDS if x < 8 else ProbeResult.MIXED if x <= 12 else ProbeResult.FAILS
    _, answer = run(Search("rate", 1, 64, resolution=0.1, max_probes=14), noisy)
    lo, hi = band(answer)
    assert lo < 8 and hi > 12
    assert answer.mixed and all(8 <= m <= 12 for m in answer.mixed)


def test_a_hold_above_a_failure_is_noise_the_band_keeps() -> None:
    answer = step(Search("rate", 1, 64), {1: HOLDS, 8: FAILS, 16: HOLDS, 64: FAILS})
    assert (answer.lo, answer.hi) == (1, 8)
    assert answer.next == pytest.approx(2.83)


def test_a_void_probe_is_not_probed_again() -> None:
    order, answer = run(Search("rate", 1, 64, max_probes=10),
                        lambda x: ProbeResult.VOID if 5 < x < 9 else edge(20)(x))
    assert len(order) == len(set(order))
    assert answer.lo is not None and answer.lo <= 20


@pytest.mark.parametrize("over", ["rate", "concurrency"])
def test_a_server_that_fails_every_request_has_no_capacity_found(over: str) -> None:
    """Issue 49: every probe void (no usable rep) says nothing of the edge: the search ends with
    no answer, not "bracketed" below the range, and probes no more than both ends."""
    order, answer = run(Search(over, 1, 32, max_probes=8), lambda _: ProbeResult.VOID)
    assert answer.found == Found.NONE and (answer.lo, answer.hi, answer.mixed) == (None, None, ())
    assert order == [1, 32]


def request(ttft: float, tpot: float, n: int = 17, error: str | None = None) -> dict[str, object]:
    start = 100.0
    first = start + ttft / 1000
    return {"start": start, "first_token": first, "end": first + tpot * (n - 1) / 1000,
            "completion_tokens": n, "gaps_ms": [tpot] * (n - 1), **({"error": error} if error else {})}


def test_a_rep_holds_when_every_percentile_does_and_no_request_failed() -> None:
    limits = Criteria({"ttft_p99_ms": 500, "tpot_p50_ms": 50})
    fast = [request(100, 20) for _ in range(20)]
    assert rep_figures(fast, limits)["holds"]
    one_slow = fast[:19] + [request(900, 20)]  # p99 of 20 requests is near their max
    got = rep_figures(one_slow, limits)
    assert not got["holds"] and got["ttft_p99_ms"] > 500
    failed = fast[:19] + [request(100, 20, error="HTTP 503")]
    assert not rep_figures(failed, limits)["holds"]


def test_a_goodput_share_is_of_every_request_sent() -> None:
    share = Criteria(goodput=0.9, slo=Slo(ttft_ms=200, tpot_ms=None))
    reps = [request(100, 20)] * 9 + [request(300, 20)]
    assert rep_figures(reps, share)["goodput_share"] == 0.9 and rep_figures(reps, share)["holds"]
    assert not rep_figures(reps[1:] + [request(300, 20)], share)["holds"]
    assert share.text() == "goodput >= 90% of requests (within TTFT <= 200 ms)"


def test_a_probe_holds_or_fails_only_when_its_reps_agree() -> None:
    assert judge([{"holds": True}] * 3) == ProbeResult.HOLDS
    assert judge([{"holds": False}] * 3) == ProbeResult.FAILS
    assert judge([{"holds": True}, {"holds": False}, {"holds": True}]) == ProbeResult.MIXED
    assert judge([]) == ProbeResult.VOID


def test_a_window_against_its_control_by_their_bands() -> None:
    ctl = step(Search("rate", 1, 16), {1: HOLDS, 16: FAILS, 4: HOLDS, 8: FAILS})
    better = step(Search("rate", 1, 16), {1: HOLDS, 16: FAILS, 8: HOLDS, 11: FAILS})
    same = step(Search("rate", 1, 16), {1: HOLDS, 16: FAILS, 5: HOLDS, 7: FAILS})
    v = versus(better, ctl)
    assert v.delta == pytest.approx(1.0) and v.call.startswith("higher")
    assert v.lo == pytest.approx(0.0) and v.hi == pytest.approx(11 / 4 - 1)
    assert versus(same, ctl).call.startswith("no decision")
    assert versus(ctl, better).call.startswith("lower")
