"""``ruler status`` of a run whose engine holds its lock: where it is now, how long it has run and
how long it has left (the stopped and finished runs' text: tests/fixtures/fold/*.status.txt)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from pathlib import Path

from engine.commands.status import format_summary, summary
from engine.record.liveness import LOCK, PID
from tests.paths import FIXTURES


def test_a_running_run_says_where_it_is_its_time_so_far_and_left(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "journals" / "measuring", run)
    (run / PID).write_text(f"{os.getpid()}\n")
    fd = os.open(run / LOCK, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the engine's hold, as it takes it
        said = summary(run)
        text = format_summary(said)
    finally:
        os.close(fd)
    head, *lines = text.splitlines()
    assert said["eta_s"] is not None and said["eta_s"] > 0
    assert re.fullmatch(rf"tui-demo  running  engine alive \(pid {os.getpid()}\)  "
                        r"[\d:]+ so far, ~[\d:]+ left", head), head
    assert "  now     window s2-control  shape s2-control/code/c1  attempt 1 reps done 2" in lines
    assert not any(x.lstrip().startswith("resume") for x in lines)  # its engine goes on
