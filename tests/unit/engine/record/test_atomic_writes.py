"""Files rewritten whole (charts, the fold's snapshot) go through a temporary renamed into place: a
process killed mid-write leaves the file before it or none, never a torn one, and the temporary
it left is removed by the next write. Report PNGs are owner-only like every other results file.

The kills are real SIGKILLs, injected at a chosen point of the write by patching the killed
process's own code (said where each one is): a fault-injecting test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.record import results, snapshot
from engine.record.writer import JournalWriter
from engine.report import charts, write_report
from tests.paths import FIXTURES, REPO

DEMO = FIXTURES / "runs" / "demo-smollm2"
NAMES = ["report-tok-s.png", "report-acceptance.png", "report-control-drift.png"]
ROOT = REPO


def killed(script: str) -> None:
    """Run ``script`` in a Python process of its own, which must die by SIGKILL."""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == -9, done.stderr[-3000:]


def whole_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(b"\x89PNG\r\n\x1a\n") and data[-12:-4] == b"\0\0\0\0IEND"


# Injected: the drawing process's savefig writes half its PNG where it was told, then the report
# and its drawing process are killed (kill -9 of `ruler report` mid-chart).
KILL_MID_CHART = """
import io, os, signal, sys
from pathlib import Path
from matplotlib.figure import Figure
from engine.report import write_report

real = Figure.savefig

def torn(self, target, **kw):
    buf = io.BytesIO()
    real(self, buf, **kw)
    data = buf.getvalue()
    if hasattr(target, "write"):
        target.write(data[: len(data) // 2]); target.flush()
    else:
        Path(target).write_bytes(data[: len(data) // 2])
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)

Figure.savefig = torn
write_report(sys.argv[1] if len(sys.argv) > 1 else {run!r})
"""


def test_a_report_killed_mid_chart_leaves_no_torn_chart_and_the_next_draws_it(
        tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    killed(KILL_MID_CHART.format(run=str(run)))
    # The chart it was writing is not there at all, so not kept with a key of whole values.
    assert not any((run / name).exists() for name in NAMES)
    assert [p.name for p in run.glob(".report-*")]  # the temporary the kill left
    _, drawn, note = write_report(run)
    assert not note and [p.name for p in drawn] == NAMES
    for name in NAMES:
        assert whole_png(run / name) and charts.stored_key(run / name)
        assert (run / name).stat().st_mode & 0o777 == 0o600  # owner-only, like the receipts
    assert not list(run.glob(".report-*"))  # the killed report's temporaries are gone


# Injected: the snapshot's temporary is written, then the writer is killed before its rename.
KILL_MID_SNAPSHOT = """
import os, signal
from engine.record.writer import JournalWriter
os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
j = JournalWriter({journal!r})
j.append("command", cmd="status", args=[], who={{"pid": 1}}, reply="ok")
j.close()
"""


def test_a_snapshot_temporary_a_kill_left_is_removed_by_the_next_write(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    shutil.copy(DEMO / "journal.jsonl", journal)
    killed(KILL_MID_SNAPSHOT.format(journal=str(journal)))
    (left,) = tmp_path.glob(".state.snapshot.json.*")
    # One a live writer is still writing (this process's, here) is not touched.
    fd, live = results.temporary_for(snapshot.path_of(journal))
    os.close(fd)
    j = JournalWriter(journal)  # the resume
    j.append("command", cmd="status", args=[], who={"pid": 2}, reply="ok")
    j.close()  # its snapshot
    assert not left.exists() and Path(live).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["journal.jsonl", snapshot.SNAPSHOT, Path(live).name])
    assert snapshot.read_folded(journal).prefix is not None
