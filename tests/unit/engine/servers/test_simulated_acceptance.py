"""Each server's switch that makes it simulate speculative acceptance (its figures then set, not
measured), read from a window's command line and environment: SGLang's SGLANG_SIMULATE_ACC_LEN
(python/sglang/srt/environ.py: EnvFloat(-1), on above 0), vLLM's --speculative-config
rejection_sample_method "synthetic" (vllm/config/speculative.py), llama.cpp's --spec-synth-len and
--spec-synth-rates or their LLAMA_ARG_SPEC_SYNTH_* variables (common/arg.cpp)."""

from __future__ import annotations

import json

import pytest

from engine.servers import get_adapter


@pytest.mark.parametrize(("server", "argv", "env", "said"), [
    ("sglang", ["--speculative-algorithm", "EAGLE"], {"SGLANG_SIMULATE_ACC_LEN": "2.5"},
     "SGLANG_SIMULATE_ACC_LEN=2.5"),
    ("sglang", ["--speculative-algorithm", "EAGLE"], {"SGLANG_SIMULATE_ACC_LEN": "-1"}, ""),
    ("sglang", [], {}, ""),
    ("vllm", ["--speculative-config", json.dumps({"method": "eagle3", "num_speculative_tokens": 3,
                                                  "rejection_sample_method": "synthetic",
                                                  "synthetic_acceptance_length": 2.4})], {},
     "--speculative-config rejection_sample_method synthetic (synthetic_acceptance_length 2.4)"),
    ("vllm", ["--speculative-config={\"method\": \"ngram\", \"rejection_sample_method\": \"synthetic\", "
              "\"synthetic_acceptance_rates\": [0.7, 0.5]}"], {},
     "--speculative-config rejection_sample_method synthetic (synthetic_acceptance_rates [0.7, 0.5])"),
    ("vllm", ["--speculative-config", json.dumps({"method": "ngram"})], {}, ""),
    ("vllm", ["--speculative-config", "not json"], {}, ""),
    ("llamacpp", ["-md", "draft.gguf", "--spec-synth-len", "2.5"], {}, "--spec-synth-len 2.5"),
    ("llamacpp", ["--spec-synth-rates=0.8,0.5"], {}, "--spec-synth-rates 0.8,0.5"),
    ("llamacpp", ["-md", "draft.gguf"], {"LLAMA_ARG_SPEC_SYNTH_LEN": "3"}, "LLAMA_ARG_SPEC_SYNTH_LEN=3"),
    ("llamacpp", ["-md", "draft.gguf"], {}, ""),
])
def test_a_servers_simulated_acceptance_is_read_from_its_launch(
        server: str, argv: list[str], env: dict[str, str], said: str) -> None:
    assert get_adapter(server).simulated_acceptance(argv, env) == said
