"""The adapter interface: every adapter is reached through its three documented parts only."""

from __future__ import annotations

from engine.servers import ServerAdapter, get_adapter, known_adapters
from engine.servers.client import ServerClient
from engine.servers.launch import LaunchArgs
from engine.servers.logs import LogReader

PARTS = (LaunchArgs, LogReader, ServerClient, ServerAdapter)


def public_names(cls: type) -> set[str]:
    """Attributes, methods and annotated fields a class itself defines, leaving out ``_private``."""
    names = set(vars(cls)) | set(vars(cls).get("__annotations__", {}))
    return {n for n in names if not n.startswith("_")}


def test_an_adapter_adds_nothing_its_parts_do_not_declare() -> None:
    """A public name on an adapter that no part declares is one callers must ``getattr`` for, as
    the dry run once did for ``watched_facts`` and ``ready_text`` (with a table for llama.cpp);
    declared on a part, it is documented there and every adapter has it."""
    declared = set().union(*(public_names(part) for part in PARTS))
    for server in known_adapters():
        adapter = get_adapter(server)
        own = set().union(*(public_names(c) for c in type(adapter).__mro__
                             if c not in PARTS and c.__module__.startswith("engine.servers.")))
        assert own - declared == set(), f"{server}: not declared by any part: {sorted(own - declared)}"
        # Every part's attribute has a value on a real adapter, not only an annotation.
        for name in declared:
            assert hasattr(adapter, name), f"{server} lacks {name}"
