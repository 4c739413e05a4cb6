"""The knobs: every request carries them as JSON, which has no infinity or NaN."""

import math
from collections.abc import Iterator
from typing import Any

from engine.campaign.checks.draft import Draft
from engine.campaign.spec import Campaign
from engine.campaign.yamlmarks import Issue, KeyPath, describe, dotted


def finite(d: Draft) -> list[Issue]:
    return [(path, False, f"{dotted(d.data_path(path))}: must be a finite number, got {describe(value)} "
                          "(requests are JSON)")
            for path, value in knob_values(d.campaign)
            if isinstance(value, float) and not math.isfinite(value)]


def knob_values(c: Campaign) -> Iterator[tuple[KeyPath, Any]]:
    """Every value in workload.knobs and in a window's change.knobs, at its path, however deep."""
    def walk(value: Any, path: KeyPath) -> Iterator[tuple[KeyPath, Any]]:
        if isinstance(value, dict):
            for key, item in value.items():
                yield from walk(item, (*path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from walk(item, (*path, i))
        else:
            yield path, value

    yield from walk(c.workload.knobs, ("workload", "knobs"))
    for i, window in enumerate(c.windows):
        yield from walk(window.change.knobs, ("windows", i, "change", "knobs"))
