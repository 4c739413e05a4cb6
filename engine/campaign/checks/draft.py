"""A campaign file as its checks see it: the model of what the schema accepted, and the marks.

Loading reports every problem in one pass, the schema's and the checks' alike, so the checks run
on a file the schema refused parts of. What they read is the model of the rest (:func:`accepted`):
each value the schema refused is left out, its key taking its default, its list item or mapping
entry dropped, and where a key the model cannot do without is refused, the part that holds it is
dropped too (a window whose name is refused). A check says nothing of a value the schema refused,
nor of what a dropped part would have said: the schema's message is the one to fix first, and a
check on a default in its place would mislead (``Draft.stands``, ``Draft.whole``).

Paths are the model's; the model's list of windows (or of any list the schema dropped items of)
is numbered without the dropped ones, so ``Draft.data_path`` gives the path in the data as written
(its sweeps expanded), which the marks place at file:line:col.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.campaign.frozen import Frozen
from engine.campaign.spec import Campaign
from engine.campaign.yamlmarks import Issue, KeyPath, Mark, MarkedDoc

# What stands for a key the campaign cannot do without where the schema refused it (its checks
# read none of them: each is refused, so no check stands on it).
STAND_INS: dict[str, Any] = {"name": "campaign", "server": "llamacpp", "control": {}, "windows": [],
                             "sessions": {}, "workload": {"classes": {"campaign": {"prompts": ["-"]}}}}
MAX_PASSES = 64  # each pass drops at least one refused value; a campaign needs a handful


@dataclass(frozen=True)
class Draft:
    """The campaign as the schema accepted it, where its file is, and what it was read with."""

    campaign: Campaign
    marks: MarkedDoc  # the file's marks, for the data's paths
    base_dir: Path = field(default_factory=Path)  # relative file names are relative to it
    kept: Frozen | None = None  # a run's own campaign: what the run froze (its files not looked for)
    refused: frozenset[KeyPath] = frozenset()  # data paths the schema refused
    # A list the schema dropped items of (its data path): the data index of each item the model has.
    renumbered: Mapping[KeyPath, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, data: object, campaign: Campaign | None, marks: MarkedDoc, base_dir: Path,
           kept: Frozen | None) -> Draft | None:
        """The draft of ``data`` (a campaign's YAML data, its sweeps expanded), ``campaign`` when
        the schema accepted all of it; None where nothing of it stands (no mapping at all)."""
        if campaign is not None:
            return cls(campaign, marks, base_dir, kept)
        found = accepted(data) if isinstance(data, dict) else None
        if found is None:
            return None
        model, refused, renumbered = found
        return cls(model, marks, base_dir, kept, refused, renumbered)

    def data_path(self, path: KeyPath) -> KeyPath:
        """Where a path of the model is in the data as written."""
        return _data_path(path, self.renumbered)

    def stands(self, path: KeyPath) -> bool:
        """The schema refused neither the value at ``path`` nor any part holding it: the model's
        value there is the file's (less what it refused inside it)."""
        at = self.data_path(path)
        return not any(at[:n] in self.refused for n in range(len(at) + 1))

    def whole(self, path: KeyPath) -> bool:
        """The model's value at ``path`` is all the file says there: nothing refused in or above it."""
        at = self.data_path(path)
        return self.stands(path) and not any(r[:len(at)] == at for r in self.refused)

    def refused_in(self, path: KeyPath) -> bool:
        """The schema refused the value at ``path`` or a part of it."""
        at = self.data_path(path)
        return any(r[:len(at)] == at for r in self.refused)

    def dropped(self, path: KeyPath) -> bool:
        """The schema dropped an item or entry of the list or mapping at ``path``."""
        at = self.data_path(path)
        return at in self.renumbered or any(len(r) == len(at) + 1 and r[:len(at)] == at
                                             for r in self.refused)

    def given(self, path: KeyPath, value: object) -> bool:
        """The file gives something at ``path``: the model's ``value`` there (not empty), or a
        value the schema refused (a typo of a value is still one given)."""
        return bool(value) or self.refused_in(path)

    def present(self, path: KeyPath, value: object) -> bool:
        """The file has a value at ``path``: the model's ``value`` (not None), or one refused."""
        return value is not None or self.refused_in(path)

    def value(self, path: KeyPath) -> Any:
        """The model's value at a path of its sections' keys (``("docker", "image")``)."""
        found: Any = self.campaign
        for key in path:
            found = getattr(found, str(key))
        return found

    def locate(self, path: KeyPath, *, key: bool = False) -> Mark:
        return self.marks.locate(self.data_path(path), key=key)

    def written(self, path: KeyPath) -> Any:
        """The value at ``path`` as the file wrote it: a number keeps its spelling (``4``, where
        the model holds ``4.0``) for a message that quotes it."""
        value = self.marks.data
        for part in self.data_path(path):
            value = value[part]
        return value

    def placed(self, issues: list[Issue]) -> list[Issue]:
        """Issues at the model's paths, at the data's."""
        return [(self.data_path(path), on_key, message) for path, on_key, message in issues]


def _data_path(path: KeyPath, renumbered: Mapping[KeyPath, Sequence[int]]) -> KeyPath:
    out: list[Any] = []
    for part in path:
        kept = renumbered.get(tuple(out))
        # An index past the items kept is one the schema says is missing (a fixed-length list
        # whose items it refused): the data has no item there, so it is its own path.
        if kept is not None and isinstance(part, int) and 0 <= part < len(kept):
            part = kept[part]
        out.append(part)
    return tuple(out)


@dataclass
class _Pruning:
    """The data as it is pruned pass by pass, and what was refused, at the data's paths."""

    data: dict[Any, Any]
    refused: set[KeyPath] = field(default_factory=set)
    renumbered: dict[KeyPath, list[int]] = field(default_factory=dict)

    def data_path(self, path: KeyPath) -> KeyPath:
        return _data_path(path, self.renumbered)

    def target(self, err: Mapping[str, Any]) -> KeyPath:
        """What to leave out for one error of the schema: the value it names, the mapping entry
        whose key it refuses, or the part that lacks a key it needs."""
        loc: KeyPath = tuple(err["loc"])
        if len(loc) == 1 and loc[0] in STAND_INS:
            return loc  # the campaign cannot do without it: one stands in
        if loc and loc[-1] == "[key]":
            loc = loc[:-1]
        elif err["type"] == "missing":
            self.refused.add(self.data_path(loc))
            loc = loc[:-1]
        return self._existing(loc)

    def _existing(self, loc: KeyPath) -> KeyPath:
        """``loc``, or the nearest part of it the data has."""
        node: Any = self.data
        for n, part in enumerate(loc):
            held = part in node if isinstance(node, dict) else (
                isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node))
            if not held:
                return loc[:n]
            node = node[part]
        return loc

    def drop(self, path: KeyPath) -> None:
        self.refused.add(self.data_path(path))
        if not path:
            return
        if len(path) == 1 and path[0] in STAND_INS:
            self.data[path[0]] = copy.deepcopy(STAND_INS[path[0]])
            return
        parent: Any = self.data
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if isinstance(parent, list) and isinstance(last, int):
            kept = self.renumbered.setdefault(self.data_path(path[:-1]), list(range(len(parent))))
            del kept[last]
        del parent[last]


# The model, the data paths the schema refused, and the lists it dropped items of.
Accepted = tuple[Campaign, frozenset[KeyPath], dict[KeyPath, tuple[int, ...]]]


def accepted(data: dict[Any, Any]) -> Accepted | None:
    """The model of what the schema accepted of ``data`` (a campaign's YAML data, its sweeps
    expanded), the paths it refused and the lists it dropped items of; None where nothing stands
    (the schema refused its whole shape)."""
    pruning = _Pruning(copy.deepcopy(data))
    for _ in range(MAX_PASSES):
        try:
            campaign = Campaign.model_validate(pruning.data)
        except ValidationError as exc:
            targets = {pruning.target(err) for err in exc.errors()}
        else:
            return (campaign, frozenset(pruning.refused),
                    {k: tuple(v) for k, v in pruning.renumbered.items()})
        if () in targets:
            return None
        # Within a pass the errors' paths are this pass's: the deepest first, and a list's items
        # from its last, so leaving one out moves no other's path; none under another left out.
        ordered = sorted((t for t in targets if not any(t[:n] in targets for n in range(len(t)))),
                         key=lambda t: (-len(t), t[:-1].__repr__(), -t[-1] if isinstance(t[-1], int) else 0))
        for path in ordered:
            pruning.drop(path)
    return None
