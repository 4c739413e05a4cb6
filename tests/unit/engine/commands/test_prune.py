"""``ruler prune`` on what is no run directory: exit 2, saying so. Pruning real containers is
tests/integration/test_prune.py's."""

from __future__ import annotations

from pathlib import Path

from tests.cli import ruler


def test_prune_bad_input(tmp_path: Path) -> None:
    out = ruler("prune", str(tmp_path), timeout=120)
    assert out.returncode == 2 and "is not a ruler run directory" in out.stderr
    out = ruler("prune", "--older-than", "soon", timeout=120)
    assert out.returncode == 2 and "--older-than 'soon': expected a duration" in out.stderr
