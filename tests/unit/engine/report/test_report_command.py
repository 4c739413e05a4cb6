"""``ruler report`` without a run: a delta's text says its call, and a directory
that is not a run is refused with exit 2. The report of real runs is tests/integration/test_report.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.method.verdict import Call
from engine.report import (
    Delta,
    cmd_report,
)

pytestmark = [pytest.mark.timeout(3600), pytest.mark.slow]


def test_delta_says_its_call() -> None:
    assert Delta(0.012, -0.03, 0.05, Call.UNDETERMINED).text() == "+1.2 % [-3.0, +5.0] (undetermined)"
    assert Delta(-0.06, -0.08, -0.04, Call.EFFECT).text() == "-6.0 % [-8.0, -4.0] effect"
    assert Delta(0.01, -0.01, 0.02, Call.NONE).text() == "+1.0 % [-1.0, +2.0] (no effect)"
    assert Delta(-0.06, -0.08, -0.04, Call.EFFECT).effect
    assert Delta(0.25).text() == "+25.0 %"  # no interval, no call: the figure alone
    assert Delta(None, why="void").text() == "n/a (void)"


def test_cmd_report_refuses_a_directory_that_is_not_a_run(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_report(str(tmp_path)) == 2
    assert "not a ruler run directory" in capsys.readouterr().err
