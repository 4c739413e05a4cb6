"""llama.cpp (``llama-server``): the adapter assembled from its launch, log and client parts.

Formats were checked against the llama.cpp source vendored in llama-cpp-python 0.3.36
(``src/llama-kv-cache.cpp``, ``src/llama-model.cpp``, ``src/llama-model-loader.cpp``,
``src/llama-context.cpp``, ``tools/server/server*.cpp``, ``common/arg.cpp``,
``common/speculative.cpp``, ``common/log.cpp``) and against real logs recorded from that build
(``tests/fixtures/logs/``, where the README says how each was made). Older wordings we accept
are marked "older"; they come from public logs of older builds.
"""

from __future__ import annotations

from engine.servers.adapter import ServerAdapter
from engine.servers.llamacpp.client import LlamaCppClient
from engine.servers.llamacpp.launch import LlamaCppLaunch
from engine.servers.llamacpp.logs import LlamaCppLogs


class LlamaCppAdapter(LlamaCppLaunch, LlamaCppLogs, LlamaCppClient, ServerAdapter):
    name = "llamacpp"
    metrics_flag = "--metrics"
