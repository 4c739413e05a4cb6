"""Helpers of the unit tier's record tests: the recorded journals, and the state as JSON sees it
(test_fold_snapshot, test_state_snapshot)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.paths import FIXTURES

# places (sessions on two places) was recorded after these snapshots; test_tui_follow.py folds it.
JOURNALS = {p.parent.name: p for p in sorted((FIXTURES / "journals").glob("*/journal.jsonl"))
            if p.parent.name != "places"}
JOURNALS["every-kind"] = FIXTURES / "fold" / "every-kind.jsonl"


def plain(x: Any) -> Any:
    """The state as JSON sees it: sets sorted, tuples as lists, dict keys as strings."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, set):
        return sorted(plain(v) for v in x)
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x
