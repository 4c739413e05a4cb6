"""``ruler report`` without a run: a delta's text marks what is within the noise, and a directory
that is not a run is refused with exit 2. The report of real runs is tests/integration/test_report.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.report import (
    Delta,
    cmd_report,
)

pytestmark = [pytest.mark.timeout(3600), pytest.mark.slow]


def test_delta_marks_differences_within_the_noise() -> None:
    assert Delta(0.012, -0.03, 0.05).text() == "+1.2 % [-3.0, +5.0] (within noise)"
    assert Delta(-0.06, -0.08, -0.04).text() == "-6.0 % [-8.0, -4.0]"
    assert Delta(-0.06, -0.08, -0.04, floor=0.10).text() == "-6.0 % [-8.0, -4.0] (within noise)"
    assert Delta(0.05, 0.01, 0.09, floor=0.05).inside  # the edge counts as inside
    assert Delta(0.25, floor=0.2).text() == "+25.0 %"  # one rep: no interval, the floor decides
    assert Delta(None, why="void").text() == "n/a (void)"


def test_cmd_report_refuses_a_directory_that_is_not_a_run(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_report(str(tmp_path)) == 2
    assert "not a ruler run directory" in capsys.readouterr().err
