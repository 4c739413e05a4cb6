"""Server adapters, looked up by name (the ``server:`` field of a campaign).

An adapter is one class per server (:class:`~engine.servers.adapter.ServerAdapter`) made of three
parts, each documented in its module with what a new server must implement:

* :mod:`engine.servers.launch` -- the command-line arguments ruler adds (listen, log verbosity,
  the metrics flag);
* :mod:`engine.servers.logs` -- reading the server's log: boot facts, errors, warnings, the ready
  line;
* :mod:`engine.servers.client` -- the HTTP calls: readiness, metrics, the load generator's request
  and the quality requests.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.servers.adapter import ServerAdapter
from engine.servers.client import Readiness
from engine.servers.llamacpp import LlamaCppAdapter
from engine.servers.logs import BootFacts, Fact, parse_number
from engine.servers.sglang import SGLangAdapter
from engine.servers.vllm import VLLMAdapter

# Factories, not instances: a client part may keep a cache (rendered prompts), so each caller
# gets an adapter of its own.
_ADAPTERS: dict[str, Callable[[], ServerAdapter]] = {
    "llamacpp": LlamaCppAdapter,
    "sglang": SGLangAdapter,
    "vllm": VLLMAdapter,
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
    "LlamaCppAdapter",
    "Readiness",
    "ServerAdapter",
    "get_adapter",
    "known_adapters",
    "parse_number",
]
