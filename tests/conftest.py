"""Shared by both tiers: tests/unit/ (in-process, seconds) and tests/integration/ (real parts)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    return tmp_path / "results"
