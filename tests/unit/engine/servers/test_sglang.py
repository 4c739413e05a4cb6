"""SGLang adapter: boot facts per wording, readiness, acceptance formulas, request bodies.

Lines are verbatim from public logs or rendered from SGLang 0.5.23's format strings; the
fixtures README says which is which and where each came from.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from engine.method import acceptance
from engine.servers import BootFacts, Readiness, get_adapter
from engine.servers.client import request_body
from engine.servers.prometheus import summed_samples
from engine.servers.sglang import SGLangAdapter
from engine.servers.sglang.client import sglang_counters, teacher_forced_body
from tests.paths import FIXTURES
from tests.unit.engine.servers.wordings import SGLANG

LOGS = FIXTURES / "logs"
ADAPTER = SGLangAdapter()


def facts_of(line: str, scope: str = "") -> dict[str, object]:
    found = ADAPTER.parse_line(line, scope)
    assert all(f.line == line for f in found)  # the verbatim line rides with every fact
    return {f.key: f.value for f in found}


def boot(name: str) -> BootFacts:
    facts = BootFacts()
    facts.feed_text(ADAPTER, (LOGS / name).read_text())
    return facts


@pytest.mark.parametrize("name", sorted(SGLANG))
def test_wording(name: str) -> None:
    line, expected = SGLANG[name]
    got = facts_of(line)
    assert {k: got.get(k) for k in expected} == expected


def test_server_args_keep_what_windows_change() -> None:
    line = (LOGS / "sglang_0523_glm_boot.log").read_text().splitlines()[0]
    got = facts_of(line)
    assert got["args.speculative_algorithm"] == "DFLASH"
    assert got["args.speculative_dflash_block_size"] == 7
    assert got["args.enable_linear_replayssm_spec"] is False
    assert got["args.mem_fraction_static"] == 0.85


def test_drafter_lines_are_scoped_per_rank() -> None:
    facts = boot("sglang_0523_glm_boot.log")
    assert facts.value("weights.mem_gb") == 104.22 and facts.value("draft.weights.mem_gb") == 2.68
    assert facts.value("kv.k_gb") == 5.5 and facts.value("draft.kv.k_gb") == 0.61
    # Capture lines name their role, so the target's verify graph is not called the drafter's.
    assert facts.value("graph.target_verify.mem_gb") == 2.31
    assert "draft.graph.target_verify.mem_gb" not in facts.facts
    assert facts.value("sched.max_total_num_tokens") == 577024


def test_unknown_boot_line_is_kept_verbatim() -> None:
    facts = boot("sglang_0523_glm_boot.log")
    unparsed = {k: f for k, f in facts.facts.items() if k.startswith("unparsed.")}
    assert [f.value for f in unparsed.values()] == [
        "Some future pool: graph scratch reserved 1.25 GB for 48 slots"]
    # Same message, other timestamp and rank: same key, so control and window diff as equal.
    again = facts_of("[2026-09-16 01:00:00 TP3] Some future pool: graph scratch reserved 1.25 GB "
                     "for 48 slots")
    assert set(again) == set(unparsed)
    access = '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    assert facts_of(access) == {}


def test_rejected_boot_keeps_cause_and_errors() -> None:
    facts = boot("sglang_replayssm_reject.log")
    assert str(facts.value("exit.error.ValueError", "")).startswith("--enable-linear-replayssm-spec")
    assert facts.value("exit.rank_died") == 0 and facts.value("exit.code") == 1
    assert facts.value("ready") is None
    assert any("requires a KDA" in e for e in facts.errors)
    assert not any(k.startswith("unparsed.") for k in facts.facts)  # traceback frames are not facts


def test_classification() -> None:
    assert ADAPTER.is_error("[2025-03-29 18:18:34 TP0] Scheduler hit an exception: "
                            "Traceback (most recent call last):")
    assert not ADAPTER.is_error("[2025-10-16 09:06:22 TP5] Memory pool end. avail mem=11.87 GB")
    assert ADAPTER.is_warning("[2026-09-15 21:03:35 TP0] Warning: torchcodec is not installed")
    assert not ADAPTER.is_warning("RuntimeError: deprecated path failed")  # errors are never warnings


def test_ready_line_is_after_sglang_warm_up() -> None:
    assert ADAPTER.is_ready_line("[2026-09-15 21:04:41] The server is fired up and ready to roll!")
    # uvicorn says this before SGLang's own warm-up request: not ready yet.
    assert not ADAPTER.is_ready_line("[2026-09-15 21:04:36] INFO:     Application startup complete.")


def test_readiness() -> None:
    assert ADAPTER.readiness(None, b"") is Readiness.LOADING  # connection refused
    assert ADAPTER.readiness(503, b"") is Readiness.LOADING  # until its own warm-up ends
    assert ADAPTER.readiness(200, b"") is Readiness.READY
    assert ADAPTER.readiness(404, b"") is Readiness.DEAD


def test_registry_and_command_line() -> None:
    adapter = get_adapter("sglang")
    assert isinstance(adapter, SGLangAdapter)
    assert adapter.default_container_port == 30000
    assert adapter.listen_args("0.0.0.0", 30000) == ["--host", "0.0.0.0", "--port", "30000"]
    assert adapter.log_args() == []
    assert adapter.metrics_requirement(["--enable-metrics"]) is None
    assert "--enable-metrics" in (adapter.metrics_requirement([]) or "")


def test_acceptance_formula_worked_example() -> None:
    # Delta generation tokens 3480 over 1000 verify calls at block 7: length 3.48, rate 0.41.
    before = sglang_counters(10_000, 4_000, 7)
    after = sglang_counters(13_480, 5_000, 7)
    delta = {k: after[k] - before[k] for k in after}
    acc = acceptance.figures(acceptance.Counts.of(delta))
    assert acc["accept_len"] == 3.48
    assert round(acc["accept_rate"] or 0.0, 2) == 0.41  # (3.48 - 1) / (7 - 1)


def test_spec_counters_sum_labelled_samples() -> None:
    samples = summed_samples((LOGS / "sglang_metrics.txt").read_text())
    counters = ADAPTER.spec_counters(samples)
    assert counters == {"drafts": 1000.0, "drafted": 6000.0, "accepted": 2480.0}
    # The lifetime gauge is never what the figure comes from.
    assert (acceptance.figures(acceptance.Counts.of(counters))["accept_len"] == 3.48
            != samples["sglang:spec_accept_length"])


def test_missing_metrics_names_the_flag() -> None:
    assert "--enable-metrics" in (ADAPTER.missing_metrics(404, None) or "")
    assert ADAPTER.missing_metrics(200, summed_samples((LOGS / "sglang_metrics.txt").read_text())) is None
    assert "--speculative-algorithm" in (ADAPTER.missing_metrics(200, {}) or "")
    assert ADAPTER.spec_counters({}) is None


def test_request_acceptance() -> None:
    openai = {"choices": [], "sglext": {"spec_tokens_details": {
        "spec_verify_ct": 10, "spec_num_correct_drafts": 25, "spec_num_proposed_drafts": 60}}}
    assert ADAPTER.request_acceptance(openai) == {"drafted": 60, "accepted": 25, "drafts": 10}
    native = {"text": "x", "meta_info": {"completion_tokens": 35, "spec_verify_ct": 10,
                                         "spec_num_correct_drafts": 25, "spec_num_proposed_drafts": 60}}
    assert ADAPTER.request_acceptance(native) == {"drafted": 60, "accepted": 25, "drafts": 10}
    assert ADAPTER.request_acceptance({"choices": [{"delta": {"content": "x"}}]}) is None
    assert ADAPTER.load_fields() == {"return_spec_tokens_details": True}


def test_teacher_forced_body() -> None:
    assert teacher_forced_body([1, 2, 3, 4, 5], 3, 10) == {
        "input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 0, "temperature": 0},
        "return_logprob": True, "logprob_start_len": 3, "top_logprobs_num": 10}


def _client(answer: dict[str, Any], seen: list[dict[str, object]]) -> httpx.Client:
    # Not a fake server: a recorded answer shape handed back so the parsing can be checked.
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append({"path": request.url.path, "body": json.loads(request.content)})
        return httpx.Response(200, json=answer)
    return httpx.Client(base_url="http://sglang", transport=httpx.MockTransport(handler))


def test_score_sequence_reads_input_top_logprobs() -> None:
    answer = {"text": "", "meta_info": {"input_top_logprobs": [
        [[-0.1, 4, "a"], [-2.5, 9, "b"]], [[-0.3, 5, "c"], [-1.5, 4, "a"]]]}}
    seen: list[dict[str, object]] = []
    with _client(answer, seen) as client:
        rows = ADAPTER.score_sequence(client, [1, 2, 3, 4, 5], 3, 2)
    assert seen == [{"path": "/generate", "body": teacher_forced_body([1, 2, 3, 4, 5], 3, 2)}]
    assert [r.top if r else None for r in rows] == [[(4, -0.1), (9, -2.5)], [(5, -0.3), (4, -1.5)]]


def test_next_token_reads_output_top_logprobs() -> None:
    answer = {"text": "a", "meta_info": {"output_top_logprobs": [[[-0.1, 4, "a"], [-2.5, 9, "b"]]]}}
    seen: list[dict[str, object]] = []
    with _client(answer, seen) as client:
        nt = ADAPTER.next_token(client, [1, 2, 3], 2, fresh=True)
    assert nt.top == [(4, -0.1), (9, -2.5)] and nt.pieces[9] == "b"
    body = seen[0]["body"]
    assert isinstance(body, dict) and body["sampling_params"] == {"max_new_tokens": 1, "temperature": 0}
    assert body["top_logprobs_num"] == 2 and body["return_logprob"] is True


def test_reasoning_fields_of_a_chat_answer() -> None:
    answer = {"choices": [{"message": {"content": "4", "reasoning_content": "2+2 is 4"},
                           "finish_reason": "stop"}],
              "usage": {"completion_tokens": 9, "reasoning_tokens": 7}, "sglext": {"output_ids": [[19, 2]]}}
    seen: list[dict[str, object]] = []
    with _client(answer, seen) as client:
        reply, ids = ADAPTER.chat_tokens(client, {"messages": [], "reasoning_effort": "low"})
    assert reply.reasoning == "2+2 is 4" and reply.reasoning_tokens == 7 and ids == [19, 2]
    body = seen[0]["body"]
    assert isinstance(body, dict) and body["return_output_ids_in_sglext"] is True
    assert body["reasoning_effort"] == "low" and ADAPTER.reasoning_counts()


def test_every_public_line_is_recognised() -> None:
    # Each verbatim public line gives a fact or is an error the boot record keeps.
    for line in (LOGS / "sglang_issue_lines.log").read_text().splitlines():
        found = facts_of(line)
        assert found or ADAPTER.is_error(line), line
        assert not any(k.startswith("unparsed.") for k in found), line


def test_load_requests_carry_the_adapter_fields() -> None:
    body = request_body("p", 8, {"temperature": 0}, {}, ADAPTER.load_fields())
    assert body["return_spec_tokens_details"] is True and body["stream"] is True
    # A campaign knob of the same name wins over the adapter's default.
    knob = request_body("p", 8, {}, {"return_spec_tokens_details": False}, ADAPTER.load_fields())
    assert knob["return_spec_tokens_details"] is False
