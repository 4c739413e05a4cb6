"""A run's own campaign: the campaign.yaml a run directory holds, read with what the run froze.

A run freezes at its start, beside its copy of the campaign, every text its requests are built
from: each class's items (``prompts.json`` for a plain class's prompts, ``items.json`` for any
other class's) and the quality checks' prompts read from files (``quality.json``: the greedy
prompts sent, the KL texts). The copy's file paths are relative to the folder the campaign was
first written in, which the run directory is not; so a campaign file that sits beside a run's
frozen items is read with them: its classes' items and its quality prompts are the frozen ones,
wherever the command runs and whether or not the original files still exist. ``ruler validate``
and ``ruler run`` on it validate and run what that run sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import files
from engine.campaign.prompts import DataFileError
from engine.campaign.sources.item import Item, plain_item
from engine.words import FROZEN_ITEMS, FROZEN_PROMPTS, FROZEN_QUALITY

CAMPAIGN = "campaign.yaml"  # a run directory's copy of its campaign (engine.record.results.CAMPAIGN)
GREEDY, KL = "greedy", "kl"  # quality.json's keys: quality.greedy's prompts, quality.kl's texts


@dataclass(frozen=True)
class Frozen:
    """What a run froze at its start: the directory, each class's items, the quality prompts."""

    run_dir: Path
    items: dict[str, list[Item]] = field(default_factory=dict)
    quality: dict[str, list[str]] = field(default_factory=dict)


def run_of(campaign_file: Path) -> Path | None:
    """The run directory when ``campaign_file`` is a run's own campaign (campaign.yaml beside the
    items the run froze), else None."""
    here = campaign_file.parent
    if campaign_file.name != CAMPAIGN:
        return None
    return here if any((here / name).is_file() for name in (FROZEN_PROMPTS, FROZEN_ITEMS)) else None


def _read(path: Path, kind: type) -> dict[str, list[Any]]:
    """A frozen JSON file: per name, a list of ``kind``; a damaged one is a DataFileError."""
    try:
        data = json.loads(files.read_text(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:  # files.Unreadable is a ValueError
        raise DataFileError(path, f"cannot be read as the run froze it ({exc})") from None
    if not isinstance(data, dict) or not all(
            isinstance(v, list) and all(isinstance(x, kind) for x in v) for v in data.values()):
        raise DataFileError(path, "not what ruler froze there (edited or damaged)")
    return data


def read(run_dir: Path) -> Frozen:
    """What the run in ``run_dir`` froze; a damaged file is a DataFileError naming it."""
    items: dict[str, list[Item]] = {cls: [plain_item(p) for p in prompts] for cls, prompts in
                                    _read(run_dir / FROZEN_PROMPTS, str).items()}
    items.update(_read(run_dir / FROZEN_ITEMS, dict))
    return Frozen(run_dir, items, _read(run_dir / FROZEN_QUALITY, str))
