"""engine.method.acceptance: the one definition of acceptance length, rate and per-position
acceptance, on counters shaped as each server's own (the source each shape was checked in is named
beside it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.method import acceptance, stats
from engine.servers import get_adapter
from engine.servers.data import BadServerData
from engine.servers.prometheus import summed_samples

LOGS = Path(__file__).parents[3] / "fixtures" / "logs"

# vLLM /metrics as exposed with a speculative config (v1/metrics/loggers.py registers the counters
# labelled engine and model_name; v1/spec_decode/metrics.py SpecDecodingStats.observe_draft adds 1
# at every position below a draft's accepted count; per_pos is labelled position="i"). Two
# engines, as a data-parallel server answers: the counters are summed over them.
VLLM_METRICS = """\
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 60.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 40.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 180.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 120.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 90.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 60.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 45.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 27.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 18.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 18.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 12.0
"""


def counters(server: str, text: str) -> dict[str, float]:
    adapter = get_adapter(server)
    got = adapter.spec_counters(adapter.metric_samples(text))
    assert got is not None
    return got


def test_vllm_metrics_give_length_rate_and_the_curve() -> None:
    got = acceptance.figures(acceptance.Counts.of(counters("vllm", VLLM_METRICS)))
    assert got == {"accept_len": 2.5, "accept_rate": 0.5, "accept_per_pos": [0.75, 0.45, 0.3]}
    # The curve is what vLLM's own log prints as "Per-position acceptance rate", and it sums to
    # the accepted drafts per step: length - 1.
    assert sum(got["accept_per_pos"]) == pytest.approx(got["accept_len"] - 1)


def test_llamacpp_metrics_recorded_live() -> None:
    # tests/fixtures/logs/llamacpp_draft_metrics.txt: the testbed's llama-server with --metrics
    # after one 64-token request (server-context.cpp's spec counters; per_pos labelled position).
    got = acceptance.figures(acceptance.Counts.of(
        counters("llamacpp", (LOGS / "llamacpp_draft_metrics.txt").read_text())))
    assert got["accept_len"] == 4.7692  # 1 + 49 / 13: the log's own "mean len = 4.77"
    assert got["accept_rate"] == 0.5385  # 49 / 91: the log's "draft acceptance = 0.53846"
    assert got["accept_per_pos"] == [0.7692, 0.7692, 0.6923, 0.5385, 0.4615, 0.3846, 0.1538]


def test_llamacpp_timings_have_a_rate_but_no_length_or_curve() -> None:
    # tests/fixtures/logs/llamacpp_draft_chat_response.json: timings.draft_n / draft_n_accepted of
    # the same request (server-common.cpp); no verify steps, no positions per request.
    body = json.loads((LOGS / "llamacpp_draft_chat_response.json").read_text())
    record = {"acceptance": get_adapter("llamacpp").request_acceptance(body)}
    counts, source = acceptance.rep_counts({}, [record])
    assert source == "per-request"
    assert acceptance.figures(counts) == {"accept_len": None, "accept_rate": 0.5385, "accept_per_pos": []}


# SGLang's meta_info of a native /generate (tokenizer_manager.py: spec_verify_ct,
# spec_num_correct_drafts, spec_num_proposed_drafts, and spec_accept_histogram from
# Req.update_spec_acceptance_histogram in schedule_batch.py: entry n = steps that accepted n drafts).
SGLANG_META = {"completion_tokens": 30, "spec_verify_ct": 12, "spec_num_correct_drafts": 18,
               "spec_num_proposed_drafts": 36, "spec_accept_histogram": [4, 2, 2, 4]}


def test_sglang_request_histogram_gives_the_curve() -> None:
    acc = get_adapter("sglang").request_acceptance({"text": "x", "meta_info": SGLANG_META})
    assert acc == {"drafted": 36, "accepted": 18, "drafts": 12, "pos.0": 8, "pos.1": 6, "pos.2": 4}
    got = acceptance.figures(acceptance.Counts.of(acc))
    assert got == {"accept_len": 2.5, "accept_rate": 0.5, "accept_per_pos": [0.6667, 0.5, 0.3333]}


def test_sglang_older_histogram_name_and_an_openai_answer() -> None:
    older = {k: v for k, v in SGLANG_META.items() if k != "spec_accept_histogram"}
    older["spec_correct_drafts_histogram"] = [4, 2, 2, 4]
    openai = {"choices": [], "sglext": {"spec_tokens_details": older}}
    assert get_adapter("sglang").request_acceptance(openai)["pos.2"] == 4  # type: ignore[index]


def test_a_histogram_that_disagrees_with_the_counts_is_bad_data() -> None:
    bad = {**SGLANG_META, "spec_accept_histogram": [4, 2, 2, 5]}
    with pytest.raises(BadServerData, match="histogram"):
        get_adapter("sglang").request_acceptance({"meta_info": bad})


Rep = tuple[dict[str, Any], list[dict[str, Any]]]


def rep(delta: dict[str, float] | None, accs: list[dict[str, Any]]) -> Rep:
    return {"metrics_delta": delta}, [{"acceptance": a} for a in accs]


def test_a_row_pools_its_reps_and_gives_each_with_an_interval() -> None:
    reps = [rep({"drafts": 10, "drafted": 30, "accepted": 15, "pos.0": 8, "pos.1": 5, "pos.2": 2}, []),
            rep({"drafts": 10, "drafted": 30, "accepted": 12, "pos.0": 7, "pos.1": 4, "pos.2": 1}, []),
            rep({"drafts": 20, "drafted": 60, "accepted": 36, "pos.0": 18, "pos.1": 12, "pos.2": 6}, [])]
    row = acceptance.row_figures(reps)
    assert row["accept_source"] == "metrics"
    assert row["accept_len"] == round(1 + 63 / 40, 4)  # the sum of the reps' counts, not a mean
    assert row["accept_rate"] == round(63 / 120, 4)
    assert row["accept_per_pos"] == "0.825 0.525 0.225"
    assert row["rep_accept_len"] == [2.5, 2.2, 2.8]
    assert row["rep_accept_per_pos"][1] == [0.7, 0.4, 0.1]
    lo, hi = row["accept_len_lo"], row["accept_len_hi"]
    assert lo is not None and hi is not None and lo < 2.5 < hi
    # t(0.975, 2) = 4.303; sd of (2.5, 2.2, 2.8) = 0.3
    assert (hi - lo) / 2 == pytest.approx(4.3027 * 0.3 / 3 ** 0.5, abs=1e-3)
    one = acceptance.row_figures(reps[:1])
    assert (one["accept_len_lo"], one["accept_len_hi"]) == (None, None)


def test_a_row_never_mixes_metrics_and_request_counts() -> None:
    """One rep without a metrics delta (the scrape failed): every rep is read from its requests,
    whose counts (vLLM with --per-request-spec-decode-metrics) carry steps and positions."""
    a = {"drafts": 4, "drafted": 12, "accepted": 6, "pos.0": 3, "pos.1": 2, "pos.2": 1}
    reps = [rep({"drafts": 99, "drafted": 300, "accepted": 1}, [a, a]), rep(None, [a])]
    row = acceptance.row_figures(reps)
    assert row["accept_source"] == "per-request"
    assert (row["accept_len"], row["accept_rate"], row["accept_per_pos"]) == (2.5, 0.5, "0.75 0.5 0.25")


def test_per_request_steps_count_only_when_every_request_has_them() -> None:
    with_steps = {"drafts": 4, "drafted": 12, "accepted": 6}
    without = {"drafted": 8, "accepted": 4}  # llama.cpp's timings: no steps
    counts, _ = acceptance.rep_counts({}, [{"acceptance": with_steps}, {"acceptance": without}])
    assert acceptance.figures(counts) == {"accept_len": None, "accept_rate": 0.5, "accept_per_pos": []}


def test_sglang_metrics_without_the_block_size_give_a_length_and_no_rate() -> None:
    """Δgeneration_tokens / Δverify_calls without sglang:spec_num_draft_tokens (older SGLang):
    the steps and accepted tokens are known, the drafted ones are not (engine.servers.sglang)."""
    row = acceptance.row_figures([rep({"drafts": 10.0, "drafted": 0.0, "accepted": 15.0}, [])])
    assert (row["accept_len"], row["accept_rate"], row["accept_source"]) == (2.5, None, "metrics")


def test_nothing_drafted_is_no_figure_not_zero() -> None:
    row = acceptance.row_figures([rep({"drafts": 0, "drafted": 0, "accepted": 0}, [{}])])
    assert (row["accept_len"], row["accept_rate"], row["accept_per_pos"], row["accept_source"]) == (
        None, None, "", "")


def test_stats_row_figures_carry_the_definition() -> None:
    reps = [rep({"drafts": 10, "drafted": 30, "accepted": 15, "pos.0": 8, "pos.1": 5, "pos.2": 2}, [])]
    records = [{"start": 0.0, "first_token": 0.1, "end": 1.0, "completion_tokens": 10}]
    row = stats.row_figures([(reps[0][0], records)], 1, stats.LeakPolicy(64, 0.5, 0))
    assert {k: row[k] for k in ("accept_len", "accept_rate", "accept_per_pos", "accept_source")} == {
        "accept_len": 2.5, "accept_rate": 0.5, "accept_per_pos": "0.8 0.5 0.2", "accept_source": "metrics"}


def test_summed_samples_keep_each_position() -> None:
    samples = summed_samples(VLLM_METRICS)
    assert samples['vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"}'] == 45.0
    assert samples["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == 150.0  # every position


def test_curve_text_round_trips() -> None:
    assert acceptance.parse_curve(acceptance.curve_text([0.9125, 0.745, 0.5])) == [0.9125, 0.745, 0.5]
    assert acceptance.curve_text([]) == "" and acceptance.parse_curve("") == []


def test_a_row_read_from_requests_has_a_length_where_they_count_their_steps() -> None:
    """The defect: a row read from its requests' own counts (no /metrics delta) had no length even
    where every request counted its verify steps (vLLM's num_spec_steps, SGLang's spec_verify_ct)."""
    a = {"drafts": 4, "drafted": 12, "accepted": 6}
    records = [{"start": 0.0, "first_token": 0.1, "end": 1.0, "completion_tokens": 10, "acceptance": a}]
    row = stats.row_figures([({"metrics_delta": None}, records)], 1, stats.LeakPolicy(64, 0.5, 0))
    assert (row["accept_len"], row["accept_rate"], row["accept_source"]) == (2.5, 0.5, "per-request")
