"""``ruler report`` on a full disk: one line naming the file it could not write, exit code 1.

The full disk is injected: ``os.fsync`` (where a full disk shows when the write itself was
buffered) raises ENOSPC, in the report and in the drawing process it forks.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from engine.commands.cli import main
from tests.paths import FIXTURES

DEMO = FIXTURES / "runs" / "demo-smollm2"


def no_space(fd: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("charts", [True, False])
def test_a_full_disk_is_one_line_and_exit_1(tmp_path: Path, charts: bool,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    if charts:
        pytest.importorskip("matplotlib")
    else:  # the charts kept (drawn before): report.md is the file the disk refuses
        assert main(["report", str(run)]) == 0
        capsys.readouterr()
    monkeypatch.setattr(os, "fsync", no_space)
    assert main(["report", str(run)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    name = "report-delta.png" if charts else "report.md"  # the first chart drawn
    assert err == (f"ruler report: cannot write {run / name}: No space left on device; make room, "
                   f"then make the report again\n")
    assert not list(run.glob(".report*"))  # no temporary left behind
