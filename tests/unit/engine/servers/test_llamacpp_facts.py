"""llama.cpp boot facts, readiness and the adapter registry, on recorded logs.

Fixtures are real llama-server output (see tests/fixtures/logs/README.md for how each was made);
the older wordings are verbatim excerpts of public logs from older builds.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.servers import (
    BootFacts,
    Readiness,
    get_adapter,
    known_adapters,
    parse_number,
)
from engine.servers.llamacpp import LlamaCppAdapter
from engine.servers.logs import MAX_ERRORS
from tests.paths import FIXTURES

LOGS = FIXTURES / "logs"
ADAPTER = LlamaCppAdapter()


def read(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def boot(name: str) -> BootFacts:
    facts = BootFacts()
    facts.feed_text(ADAPTER, read(name))
    return facts


def line_with(name: str, needle: str) -> str:
    """The first line of a fixture that contains ``needle`` (verbatim)."""
    for line in read(name).splitlines():
        if needle in line:
            return line
    raise AssertionError(f"{needle!r} not in {name}")


def facts_of(line: str, scope: str = "") -> dict[str, object]:
    found = ADAPTER.parse_line(line, scope)
    assert all(f.line == line for f in found)  # every fact keeps its verbatim line
    return {f.key: f.value for f in found}


# --- registry and command line ---------------------------------------------------------


def test_registry_returns_llamacpp_adapter() -> None:
    adapter = get_adapter("llamacpp")
    assert isinstance(adapter, LlamaCppAdapter)
    assert adapter.name == "llamacpp"
    assert adapter.default_container_port == 8080
    assert adapter.health_path == "/health"
    assert known_adapters() == ["llamacpp", "sglang", "vllm"]


def test_registry_unknown_name_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="llamacpp") as err:
        get_adapter("tgi")
    assert "'tgi'" in str(err.value)


def test_listen_and_log_args() -> None:
    assert ADAPTER.listen_args("127.0.0.1", 18080) == ["--host", "127.0.0.1", "--port", "18080"]
    assert ADAPTER.log_args() == ["-lv", "4"]


def test_default_verbosity_hides_the_boot_facts() -> None:
    # Why log_args exists: without -lv 4 this build prints no KV/buffer/model lines at all.
    facts = boot("llamacpp_default_verbosity.log")
    assert "kv.cells" not in facts.facts
    assert not any(k.startswith(("weights.", "model.")) for k in facts.facts)
    assert facts.value("slots.n") == 2
    assert facts.value("ready") is True


# --- KV cache --------------------------------------------------------------------------


def test_kv_cache_current_wording() -> None:
    line = line_with("llamacpp_c2048_np2.log", "llama_kv_cache: size =")
    assert facts_of(line) == {
        "kv.size_mib": 45.0,
        "kv.cells": 1024,
        "kv.layers": 30,
        "kv.seqs": 2,
        "kv.streams": 2,
        "kv.tokens": 2048,  # -np 2 without a unified cache: 2 streams of 1024 cells
        "kv.k_type": "f16",
        "kv.k_mib": 22.5,
        "kv.v_type": "f16",
        "kv.v_mib": 22.5,
    }


def test_kv_cache_unified_prefix_with_seq_count_only() -> None:
    line = line_with("llamacpp_b5600_excerpt.log", "llama_kv_cache_unified: size =")
    got = facts_of(line)
    assert got["kv.cells"] == 4096
    assert got["kv.seqs"] == 1
    assert "kv.streams" not in got
    assert got["kv.tokens"] == 4096
    assert got["kv.size_mib"] == 1536.0
    assert (got["kv.k_type"], got["kv.k_mib"]) == ("f16", 768.0)


@pytest.mark.parametrize(("needle", "cells"), [("1/ 1 seqs", 131072), ("1/1 seqs", 4096)])
def test_kv_cache_unified_prefix_with_stream_count(needle: str, cells: int) -> None:
    line = line_with("llamacpp_older_lines.log", needle)
    got = facts_of(line)
    assert got["kv.cells"] == cells
    assert (got["kv.seqs"], got["kv.streams"]) == (1, 1)


def test_kv_self_size_2024_wording() -> None:
    line = line_with("llamacpp_older_lines.log", "KV self size")
    assert facts_of(line) == {
        "kv.size_mib": 9.0,
        "kv.k_type": "f16",
        "kv.k_mib": 4.5,
        "kv.v_type": "f16",
        "kv.v_mib": 4.5,
    }
    line = line_with("llamacpp_older_lines.log", "llama_kv_cache_init:")
    assert facts_of(line) == {"kv.CPU_mib": 9.0}


def test_kv_buffer_line() -> None:
    line = line_with("llamacpp_c2048_np2.log", "KV buffer size")
    assert facts_of(line) == {"kv.CPU_mib": 45.0}


def test_sliding_window_kv_caches_stay_apart() -> None:
    facts = boot("llamacpp_b6699_excerpt.log")
    assert facts.value("kv.base_cells") == 131072
    assert facts.value("kv.cells") == 131072
    assert facts.value("kv.size_mib") == 3072.0
    assert facts.value("kv.CUDA0_mib") == 3072.0
    assert facts.value("kv.swa.cells") == 768
    assert facts.value("kv.swa.size_mib") == 18.0
    assert facts.value("kv.swa.CUDA0_mib") == 18.0


# --- weights, model metadata, context ---------------------------------------------------


def test_model_buffer_line() -> None:
    line = line_with("llamacpp_c2048_np2.log", "model buffer size")
    assert facts_of(line) == {"weights.CPU_Mapped_mib": 92.1}
    line = line_with("llamacpp_b5600_excerpt.log", "CUDA0 model buffer size")
    assert facts_of(line) == {"weights.CUDA0_mib": 2228.82}


def test_model_metadata_and_context() -> None:
    facts = boot("llamacpp_c2048_np2.log")
    assert facts.value("model.file_type") == "Q4_1"
    assert facts.value("model.file_size_mib") == 92.1
    assert facts.value("model.bpw") == 5.74
    assert facts.value("model.arch") == "llama"
    assert facts.value("model.params") == "134.52 M"
    assert facts.value("model.n_ctx_train") == 8192
    assert facts.value("model.n_layer") == 30
    assert facts.value("model.n_tensors") == 272
    assert facts.value("ctx.n_ctx") == 2048
    assert facts.value("ctx.n_ctx_seq") == 1024
    assert facts.value("ctx.kv_unified") is False
    assert facts.value("ctx.flash_attn") == "auto"
    assert facts.value("ctx.flash_attn_resolved") == "enabled"
    assert facts.value("compute.CPU_mib") == 14.51
    assert facts.value("output.CPU_mib") == 0.38


def test_older_metadata_wording() -> None:
    facts = boot("llamacpp_b6699_excerpt.log")
    assert facts.value("model.file_type") == "MXFP4 MoE"
    assert facts.value("model.file_size_mib") == 11540.48  # printed in GiB
    assert facts.value("model.n_expert") == 32
    assert facts.value("ctx.n_ctx_seq") == 131072  # from n_ctx_per_seq
    assert facts.value("weights.offloaded_layers") == 25


# --- server lines -----------------------------------------------------------------------


def test_slots_line() -> None:
    line = line_with("llamacpp_c2048_np2.log", "initializing, n_slots")
    assert facts_of(line) == {"slots.n": 2, "slots.n_ctx_slot": 1024, "slots.kv_unified": False}


def test_slots_older_wording() -> None:
    assert facts_of(line_with("llamacpp_b6699_excerpt.log", "initializing slots")) == {
        "slots.n": 1
    }
    assert facts_of(line_with("llamacpp_b6699_excerpt.log", "new slot n_ctx_slot")) == {
        "slots.n_ctx": 131072
    }


def test_ready_lines_current_wording() -> None:
    loaded = line_with("llamacpp_c2048_np2.log", "model loaded")
    listening = line_with("llamacpp_c2048_np2.log", "listening on")
    assert ADAPTER.is_ready_line(loaded)
    assert ADAPTER.is_ready_line(listening)
    assert facts_of(loaded) == {"ready": True}
    assert facts_of(listening) == {"server.url": "http://127.0.0.1:18080", "ready": True}


def test_ready_lines_older_wording() -> None:
    loaded = line_with("llamacpp_b5600_excerpt.log", "main: model loaded")
    listening = line_with("llamacpp_b5600_excerpt.log", "server is listening on")
    assert ADAPTER.is_ready_line(loaded)
    assert ADAPTER.is_ready_line(listening)
    assert facts_of(listening)["server.url"] == "http://127.0.0.1:35781"
    # Printed before the model loads in those builds: not a ready line.
    early = line_with("llamacpp_b6699_excerpt.log", "HTTP server is listening, hostname")
    assert not ADAPTER.is_ready_line(early)
    assert facts_of(early) == {}


def test_chat_template_lines() -> None:
    facts = boot("llamacpp_c2048_np2.log")
    assert facts.value("chat.example_start") == "<|im_start|>system"
    assert facts.value("chat.thinking") is False
    old = boot("llamacpp_b5600_excerpt.log")
    assert str(old.value("chat.template")).startswith("{{ bos_token }}")


def test_loading_error_line() -> None:
    line = line_with("llamacpp_missing_model.log", "exiting due to")
    assert ADAPTER.is_error(line)
    assert facts_of(line) == {"exit.reason": "model loading error"}
    facts = boot("llamacpp_missing_model.log")
    assert "ready" not in facts.facts
    assert facts.errors[-1] == line
    assert any("failed to open GGUF file '/tmp/models/missing.gguf'" in e for e in facts.errors)


def test_port_in_use_error() -> None:
    facts = boot("llamacpp_port_busy.log")
    assert facts.value("exit.reason") == "HTTP server error"
    assert "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 18085" in facts.errors[0]
    assert "ready" not in facts.facts


def test_invalid_argument_error() -> None:
    line = read("llamacpp_invalid_arg.log").splitlines()[0]
    assert line == "error: invalid argument: --foo"
    assert ADAPTER.is_error(line)
    facts = boot("llamacpp_invalid_arg.log")
    assert facts.value("exit.reason") == "invalid argument: --foo"
    assert facts.value("exit.bad_arg") == "--foo"
    assert facts.errors == [line]


def test_invalid_argument_value_error() -> None:
    facts = boot("llamacpp_bad_spec_type.log")
    # Only the first line is the error; the usage text after it is not.
    assert facts.errors == [
        'error while handling argument "--spec-type": unknown speculative type: nonsense'
    ]
    assert facts.value("exit.bad_arg") == "--spec-type"
    assert str(facts.value("exit.reason")).endswith("unknown speculative type: nonsense")


# --- speculative decoding ---------------------------------------------------------------


def test_draft_acceptance_timing_line() -> None:
    line = line_with("llamacpp_draft_q2k_chat.log", "draft acceptance =")
    assert facts_of(line) == {
        "spec.accept_rate": 0.53846,
        "spec.accepted": 49,
        "spec.generated": 91,
        "spec.mean_len": 4.77,
    }


def test_draft_acceptance_older_wording() -> None:
    line = line_with("llamacpp_older_lines.log", "draft acceptance rate =")
    assert facts_of(line) == {"spec.accept_rate": 0.57576, "spec.accepted": 171, "spec.generated": 297}
    stats = line_with("llamacpp_older_lines.log", "statistics ngram_simple")
    assert facts_of(stats)["spec.lifetime.ngram_simple.gen_tokens"] == 187


def test_drafter_facts_are_kept_apart_from_the_target() -> None:
    facts = boot("llamacpp_draft_q2k_chat.log")
    assert facts.value("spec.draft_model") == "/tmp/models/q2k.gguf"
    assert facts.value("model.file_type") == "Q4_1"
    assert facts.value("draft.model.file_type") == "Q2_K - Medium"
    assert facts.value("weights.CPU_Mapped_mib") == 92.1
    assert facts.value("draft.weights.CPU_Mapped_mib") == 81.94
    assert facts.value("draft.weights.CPU_REPACK_mib") == 42.71
    assert "weights.CPU_REPACK_mib" not in facts.facts
    assert facts.value("draft.kv.cells") == 1024
    # Server-level lines after the drafter loads are not the drafter's.
    assert facts.value("slots.n") == 2
    assert "draft.slots.n" not in facts.facts
    assert facts.value("spec.impl.draft-simple") is True
    assert facts.value("spec.n_max") == 7
    assert facts.value("spec.ctx_initialized") is True
    assert facts.value("timing.eval_tokens") == 64
    assert facts.value("spec.lifetime.draft-simple.gen_drafts") == 13
    assert facts.value("ready") is True


def test_missing_drafter_fails_the_boot() -> None:
    facts = boot("llamacpp_missing_draft.log")
    assert facts.value("exit.reason") == "model loading error"
    assert any("failed to load draft model" in e for e in facts.errors)
    # The fit step's failure is only a warning; the boot goes on until the drafter is loaded.
    assert any("failed to measure the memory of the extra model" in w for w in facts.warnings)


def test_spec_counters_from_real_metrics_scrape() -> None:
    samples = {
        s.name: float(s.value)
        for family in text_string_to_metric_families(read("llamacpp_draft_metrics.txt"))
        for s in family.samples
        if not s.labels
    }
    assert ADAPTER.spec_counters(samples) == {"drafts": 13.0, "drafted": 91.0, "accepted": 49.0}
    assert ADAPTER.spec_counters({"llamacpp:prompt_tokens_total": 38.0}) is None
    # What the rep receipt says when the delta cannot be taken, naming the flag.
    # Read as a rep reads it, each draft position's accepted count too.
    assert ADAPTER.spec_counters(ADAPTER.metric_samples(read("llamacpp_draft_metrics.txt"))) == {
        "drafts": 13.0, "drafted": 91.0, "accepted": 49.0, "pos.0": 10.0, "pos.1": 10.0, "pos.2": 9.0,
        "pos.3": 7.0, "pos.4": 6.0, "pos.5": 5.0, "pos.6": 2.0}
    assert ADAPTER.missing_metrics(200, samples) is None
    assert "--metrics" in (ADAPTER.missing_metrics(501, None) or "")
    assert "speculation is off" in (ADAPTER.missing_metrics(200, {"llamacpp:prompt_tokens_total": 3.0}) or "")
    assert "--metrics" in (ADAPTER.metrics_requirement(["-m", "x.gguf"]) or "")
    assert ADAPTER.metrics_requirement(["--metrics"]) is None


def test_request_acceptance_from_real_response() -> None:
    body = json.loads(read("llamacpp_draft_chat_response.json"))
    assert ADAPTER.request_acceptance(body) == {"drafted": 91, "accepted": 49}
    assert ADAPTER.request_acceptance({"choices": []}) is None
    assert ADAPTER.request_acceptance({"timings": {"predicted_n": 64}}) is None
    assert ADAPTER.chat_path == "/v1/chat/completions"
    assert ADAPTER.metrics_path == "/metrics"


# --- accumulation, diff, classification -------------------------------------------------


def test_diff_of_two_context_sizes() -> None:
    small, large = boot("llamacpp_c2048_np2.log"), boot("llamacpp_c4096_np2.log")
    diff = small.diff(large)
    assert diff["changed"]["kv.cells"] == [1024, 2048]
    assert diff["changed"]["kv.size_mib"] == [45.0, 90.0]
    assert diff["changed"]["ctx.n_ctx"] == [2048, 4096]
    assert "weights.CPU_Mapped_mib" in diff["equal"]
    assert "model.file_type" in diff["equal"]
    assert diff["only_here"] == {}
    assert diff["only_there"] == {}


def test_diff_lists_facts_present_on_one_side() -> None:
    plain, drafted = boot("llamacpp_c2048_np2.log"), boot("llamacpp_draft_q2k_chat.log")
    diff = plain.diff(drafted)
    assert diff["only_there"]["draft.weights.CPU_REPACK_mib"] == 42.71
    assert diff["changed"]["spec.enabled"] == [False, True]


def test_as_json_keeps_verbatim_lines() -> None:
    facts = boot("llamacpp_c2048_np2.log")
    doc = facts.as_json()
    assert set(doc) == {"facts", "lines", "errors", "warnings"}
    assert doc["facts"]["kv.cells"] == 1024
    raw_lines = set(read("llamacpp_c2048_np2.log").splitlines())
    assert all(line in raw_lines for line in doc["lines"].values())
    assert doc["lines"]["kv.cells"].endswith("V (f16):   22.50 MiB")


def test_errors_and_warnings_of_a_clean_boot() -> None:
    facts = boot("llamacpp_c2048_np2.log")
    assert facts.errors == []
    assert len(facts.warnings) == 1
    assert "security: no API key is set" in facts.warnings[0]


def test_level_letter_decides_over_wording() -> None:
    # An INFO line that happens to say "failed to" is not an error; bare lines use wording.
    assert not ADAPTER.is_error("0.00.001.000 I cmn  common_init_: failed to x, using y instead")
    assert ADAPTER.is_error("0.00.001.000 E srv  load_model: something broke")
    assert ADAPTER.is_warning("0.00.001.000 W srv  load_model: speculative decoding not supported")
    assert not ADAPTER.is_error("warning: failed to create prompts-log-dir 'x': denied")
    assert ADAPTER.is_warning("warning: failed to create prompts-log-dir 'x': denied")


def test_errors_are_capped() -> None:
    facts = BootFacts()
    for i in range(MAX_ERRORS + 50):
        facts.feed(ADAPTER, f"0.00.000.{i:03d} E llama_model_load: error loading model: {i}")
    assert len(facts.errors) == MAX_ERRORS
    assert facts.errors[0].endswith(": 0")  # the first ones carry the cause
    assert facts.as_json()["dropped_errors"] == 50


# --- readiness ---------------------------------------------------------------------------


def test_readiness_loading_body() -> None:
    body = (LOGS / "llamacpp_health_503.json").read_bytes()
    assert b"Loading model" in body
    assert ADAPTER.readiness(503, body) is Readiness.LOADING


def test_readiness_ok_body() -> None:
    body = (LOGS / "llamacpp_health_200.json").read_bytes()
    assert body == b'{"status":"ok"}'
    assert ADAPTER.readiness(200, body) is Readiness.READY


def test_readiness_connection_refused() -> None:
    assert ADAPTER.readiness(None, b"") is Readiness.LOADING


@pytest.mark.parametrize("status", [500, 404])
def test_readiness_other_answers_are_dead(status: int) -> None:
    assert ADAPTER.readiness(status, b'{"error":{"message":"Model failed to load"}}') is (
        Readiness.DEAD
    )


# --- parse_number ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2,042,016", 2042016),
        ("3.81", 3.81),
        (" 42 ", 42),
        ("-1", -1),
        ("1.0e-05", 1.0e-05),
        ("0.53846", 0.53846),
        ("1_000", 1000),
    ],
)
def test_parse_number(text: str, expected: int | float) -> None:
    got = parse_number(text)
    assert got == expected
    assert type(got) is type(expected)


@pytest.mark.parametrize("text", ["", "abc", "1,2.3.4", "12 MiB", "nan", "1e999", "-1e999"])
def test_parse_number_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_number(text)
