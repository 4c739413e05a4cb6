"""Where a class's requests come from: one source per module behind the ``SOURCES`` registry,
keyed by the class key that selects it (a class sets exactly one). :func:`class_items` gives a
class's items (engine.campaign.sources.item); the run freezes them at its start."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.campaign.sources.base import Source
from engine.campaign.sources.conversations import ConversationsSource
from engine.campaign.sources.dataset import Dataset
from engine.campaign.sources.files import Inline, PromptFile
from engine.campaign.sources.item import Item
from engine.campaign.sources.shared_prefix import SharedPrefix
from engine.campaign.sources.trace import TraceSource
from engine.campaign.variables import expand
from engine.words import plural

if TYPE_CHECKING:
    from engine.campaign.spec import Campaign
    from engine.campaign.workload import PromptClass

SOURCES: dict[str, Source] = {s.key: s for s in (Inline(), PromptFile(), Dataset(), SharedPrefix(),
                                                 TraceSource(), ConversationsSource())}

__all__ = ["SOURCES", "Item", "Source", "chosen", "class_items", "class_notes"]


def chosen(cls: PromptClass) -> tuple[Source, Any]:
    """The source a class uses and its spec (validation guarantees exactly one is set)."""
    for key, source in SOURCES.items():
        spec = getattr(cls, key)
        if spec is not None:
            return source, spec
    raise AssertionError("a class with no source passed validation")


def class_items(campaign: Campaign, name: str, variables: Mapping[str, str] | None = None) -> list[Item]:
    """The items of class ``name``; a ${...} in its file's path is expanded with ``variables``
    when given. Raises the source's error (file:line) or UnresolvedVariable."""
    source, spec = chosen(campaign.workload.classes[name])
    frozen = _frozen(campaign, name, source, spec)
    if frozen is not None:  # a run's own campaign: the items that run sent (engine.campaign.frozen)
        return list(frozen)
    return source.items(spec, _path(campaign, source, spec, variables))


def class_notes(campaign: Campaign, name: str, variables: Mapping[str, str] | None = None) -> list[str]:
    """What class ``name`` becomes beyond its requests' lengths, for ``ruler validate --explain``
    (a trace's duration and rate, a multi-turn class's conversations; none for most sources)."""
    source, spec = chosen(campaign.workload.classes[name])
    frozen = _frozen(campaign, name, source, spec)
    if frozen is not None:
        return [f"{plural(len(frozen), 'item')} as this run froze them (not read from {source.file(spec)})"]
    return source.describe(spec, _path(campaign, source, spec, variables))


def _frozen(campaign: Campaign, name: str, source: Source, spec: Any) -> list[Item] | None:
    """A class's items as the run whose own campaign this is froze them: a class that reads a
    file (its inline prompts or generated items are in the campaign itself)."""
    run = campaign.frozen
    return run.items.get(name) if run is not None and source.file(spec) is not None else None


def _path(campaign: Campaign, source: Source, spec: Any,
          variables: Mapping[str, str] | None) -> Path | None:
    file = source.file(spec)
    if file is None:
        return None
    return campaign.source_path.parent / (file if variables is None else expand(file, variables))
