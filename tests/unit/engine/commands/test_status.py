"""``ruler status`` of a run whose engine holds its lock: where it is now, how long it has run and
how long it has left (the stopped and finished runs' text: tests/fixtures/fold/*.status.txt)."""

from __future__ import annotations

import fcntl
import gc
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from engine.commands.cli import main
from engine.commands.status import format_summary, summary
from engine.record import results, snapshot
from engine.record.liveness import LOCK, PID
from tests.cli import ruler
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


def without_snapshot(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the recorded demo run (1,057 lines, past snapshot.EVERY) without its snapshot,
    as a copied run or an older ruler's is: and where its snapshot goes."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "demo-smollm2", run)
    kept = snapshot.path_of(run / results.JOURNAL)
    kept.unlink()
    return run, kept


def test_status_answers_and_ends_and_its_child_keeps_the_snapshot_after(tmp_path: Path) -> None:
    """``ruler status`` as a process of its own answers, and ends, before the snapshot of its fold
    is written: a child writes it, holding none of its streams (this pipe reaches its end when
    status does), and the next reader takes it."""
    run, kept = without_snapshot(tmp_path)
    out = ruler("status", "--json", str(run))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    said = json.loads(out.stdout)
    deadline = time.monotonic() + 60
    while not kept.exists():  # the child's rename: the event waited for
        assert time.monotonic() < deadline, "no snapshot written behind ruler status"
        time.sleep(0.01)
    folded = snapshot.read_folded(run / results.JOURNAL, keep=False)
    assert folded.why == "" and folded.prefix is not None and folded.prefix.lines == 1057
    assert summary(run, folded) | {"elapsed_s": None} == said | {"elapsed_s": None}


def test_status_called_in_its_callers_process_keeps_the_snapshot_before_it_returns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A caller in its own process (a test, a tool) is never forked nor ended: the snapshot is
    there when main returns."""
    run, kept = without_snapshot(tmp_path)
    assert gc.isenabled()
    assert main(["status", "--json", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["campaign"] == "demo-smollm2"
    assert kept.exists() and snapshot.load(run / results.JOURNAL)[0] is not None
    assert gc.isenabled()  # the collector it stopped for its fold, back on for its caller


def test_a_day_long_run_names_its_first_suspect_windows_and_counts_the_rest(tmp_path: Path) -> None:
    """Every window of the recorded demo run is ruler suspect (its knobs were inert): ten copies
    of its sessions make 70 such windows, which one line names eight of, the rest counted."""
    run, _ = without_snapshot(tmp_path)
    journal = run / results.JOURNAL
    said = summary(run)
    assert len(said["ruler_suspect"]) == 7
    lines = journal.read_bytes().splitlines(keepends=True)
    copies = [lines[0]]
    seq = 1
    for n in range(10):  # each copy's sessions renamed, as bench/journal_bench.py builds them
        for raw in lines[1:]:
            e = json.loads(raw)
            seq += 1
            e["seq"] = seq
            if "session" in e:
                e["session"] = f"{e['session']}r{n}"
            copies.append(json.dumps(e).encode() + b"\n")
    journal.write_bytes(b"".join(copies))
    text = format_summary(summary(run))
    line = next(x for x in text.splitlines() if "RULER SUSPECT" in x)
    named = line.split(": ", 1)[1].split(", and ")[0].split(", ")
    assert len(named) == 8 and line.endswith(", and 62 more (--json lists them)"), line
    assert len(summary(run)["ruler_suspect"]) == 70
