"""SGLang (``python3 -m sglang.launch_server``): the adapter assembled from its launch, log and client
parts.

Formats were checked against SGLang 0.5.23's own source (the PyPI wheel):
``model_executor/model_runner.py`` (weights), ``mem_cache/memory_pool.py`` (KV and Mamba
pools), ``mem_cache/kv_cache_configurator.py`` (``Memory pool end``, the ReplaySSM guard),
``model_executor/model_runner_components/cuda_graph_setup.py`` and ``kv_pool_runtime.py``
(graph capture, post-capture sizing), ``managers/scheduler.py`` (``max_total_num_tokens=``),
``managers/scheduler_components/metrics_reporter.py`` (``Decode batch``),
``entrypoints/http_server.py`` (health, ``fired up``), ``entrypoints/engine.py`` (server args,
startup timings, rank death), ``observability/metrics_collector.py`` (``/metrics`` names) and
``layers/attention/linear/kda_backend.py`` (the fused KDA chain-verify notice). Older wordings
come from public logs quoted in SGLang issues and PRs (tests/fixtures/logs/README.md).
"""

from __future__ import annotations

from engine.servers.adapter import ServerAdapter
from engine.servers.sglang.client import SGLangClient
from engine.servers.sglang.launch import SGLangLaunch
from engine.servers.sglang.logs import SGLangLogs


class SGLangAdapter(SGLangLaunch, SGLangLogs, SGLangClient, ServerAdapter):
    name = "sglang"
    metrics_flag = "--enable-metrics"  # /metrics is mounted only with it (http_server.py)
