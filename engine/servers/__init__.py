"""Server adapters, looked up by name (the ``server:`` field of a campaign)."""

from __future__ import annotations

from collections.abc import Callable

from engine.servers.base import (
    BootFacts,
    Fact,
    Readiness,
    ServerAdapter,
    parse_number,
)
from engine.servers.llamacpp import LlamaCppAdapter
from engine.servers.sglang import SGLangAdapter
from engine.servers.vllm import VLLMAdapter

# Factories, not instances: adapters are stateless today, but a fresh one per call keeps a
# future stateful adapter from leaking state between boots.
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
