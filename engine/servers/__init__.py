"""Server adapters, looked up by name (the ``server:`` field of a campaign).

An adapter is one class per server (:class:`~engine.servers.adapter.ServerAdapter`) made of three
parts, each documented in its module with what a new server must implement:

* :mod:`engine.servers.launch` -- the command-line arguments ruler adds (listen, log verbosity,
  the metrics flag);
* :mod:`engine.servers.logs` -- reading the server's log: boot facts, errors, warnings, the ready
  line;
* :mod:`engine.servers.client` -- the HTTP calls: readiness, metrics, the load generator's request
  and the quality requests.

Each adapter is a package, ``engine/servers/<name>/``, with one module per part (``launch.py``,
``logs.py``, ``client.py``) and the class assembled from them in its ``__init__``; what more than
one adapter needs is in :mod:`engine.servers.common`, never imported from another adapter.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.servers.adapter import ServerAdapter
from engine.servers.client import Readiness
from engine.servers.logs import BootFacts, Fact, parse_number


# Each adapter's package is imported when it is asked for: a run (or the console) uses one, and
# each package compiles its log patterns as it loads.
def _llamacpp() -> ServerAdapter:
    from engine.servers.llamacpp import LlamaCppAdapter

    return LlamaCppAdapter()


def _sglang() -> ServerAdapter:
    from engine.servers.sglang import SGLangAdapter

    return SGLangAdapter()


def _vllm() -> ServerAdapter:
    from engine.servers.vllm import VLLMAdapter

    return VLLMAdapter()


# Factories, not instances: a client part may keep a cache (rendered prompts), so each caller
# gets an adapter of its own.
_ADAPTERS: dict[str, Callable[[], ServerAdapter]] = {
    "llamacpp": _llamacpp,
    "sglang": _sglang,
    "vllm": _vllm,
}


def known_adapters() -> list[str]:
    return sorted(_ADAPTERS)


def get_adapter(name: str) -> ServerAdapter:
    """Return the adapter for ``name``; ValueError naming the known ones otherwise."""
    try:
        factory = _ADAPTERS[name]
    except KeyError:
        raise ValueError(
            f"unknown server adapter {name!r}; known: {', '.join(known_adapters())}"
        ) from None
    return factory()


__all__ = [
    "BootFacts",
    "Fact",
    "Readiness",
    "ServerAdapter",
    "get_adapter",
    "known_adapters",
    "parse_number",
]
