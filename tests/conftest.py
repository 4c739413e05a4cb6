"""Shared by both tiers: tests/unit/ (in-process, seconds) and tests/integration/ (real parts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# No test asserts a timing (speed is bench/'s), and hypothesis's per-example deadline is one: on a
# busy two-core machine an example of 472 ms failed a 200 ms deadline. Every tier runs without it.
settings.register_profile("ruler", deadline=None)
settings.load_profile("ruler")


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    return tmp_path / "results"
