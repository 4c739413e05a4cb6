"""The snapshot vouches for every byte it covers: damage inside the covered lines that keeps the
journal's length (a run of NULs over a line, a line edited in place) makes readers fold the whole
journal, so status names the damage and resume refuses, as without a snapshot.

On the recorded demo run's real journal (tests/fixtures/runs/demo-smollm2), its snapshot written
by the journal's writer as the engine leaves it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.commands.cli import main
from engine.record import snapshot
from engine.record.writer import JournalDamaged, JournalWriter
from tests.paths import FIXTURES

DEMO = FIXTURES / "runs" / "demo-smollm2"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DEMO / "journal.jsonl", run / "journal.jsonl")
    (run / "engine.json").write_text("{}")
    JournalWriter(run / "journal.jsonl").close()  # the snapshot the engine leaves when it stops
    assert snapshot.read_folded(run / "journal.jsonl").prefix is not None
    return run


def overwrite_line(path: Path, line: int, fill: bytes) -> None:
    """Line ``line`` (1-based) overwritten in place, its newline and length kept."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[line - 1] = fill * (len(lines[line - 1]) - 1) + b"\n"
    data = b"".join(lines)
    with path.open("r+b") as f:  # in place, as a disk or a crash leaves it: same inode, same size
        f.write(data)


@pytest.mark.parametrize("fill", [b"\0", b" "])
def test_damage_the_snapshot_covers_is_seen(run: Path, fill: bytes,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    journal = run / "journal.jsonl"
    size = journal.stat().st_size
    overwrite_line(journal, 40, fill)
    assert journal.stat().st_size == size
    folded = snapshot.read_folded(journal)
    assert folded.prefix is None and folded.why == "journal changed inside what the snapshot covers"
    damage = [(d.line, d.reason) for d in folded.state.damage]
    assert damage[0][0] == 40 and damage[1:] == [(41, "seq 41 after seq 39: 1 events missing")]

    assert main(["status", str(run)]) == 0
    assert f"{journal}:40: " in capsys.readouterr().out

    before = journal.read_bytes()
    with pytest.raises(JournalDamaged):
        JournalWriter(journal)
    assert main(["run", "--resume", str(run)]) == 2
    assert f"{journal}:40: " in capsys.readouterr().err
    assert journal.read_bytes() == before  # nothing appended after the damage


def test_a_snapshot_the_writer_takes_while_appending_still_matches(run: Path) -> None:
    """The writer's CRC, kept as it appends, is the file's: its next snapshot is taken."""
    journal = run / "journal.jsonl"
    j = JournalWriter(journal, snapshot_every=2)
    for i in range(5):
        j.append("command", cmd="status", args=[], who={"pid": i}, reply="ok")
    j.close()
    folded = snapshot.read_folded(journal)
    assert folded.why == "" and folded.prefix is not None
    assert folded.prefix.length == journal.stat().st_size
    with journal.open("rb") as f:
        assert folded.prefix.crc == snapshot.covered_crc(f, folded.prefix.length)


def without_snapshot(run: Path) -> Path:
    journal = run / "journal.jsonl"
    snapshot.path_of(journal).unlink()
    return journal


def test_a_fold_kept_later_vouches_for_the_bytes_it_read(run: Path) -> None:
    """A reader that keeps its fold later (``ruler status``'s child, the console after its first
    screen) read no CRC as it folded: the CRC is read when the snapshot is written, over the
    same bytes, and the next reader takes the snapshot."""
    journal = without_snapshot(run)
    folded = snapshot.read_folded(journal, keep=False)
    assert folded.read.crc is None and folded.read_at is not None
    snapshot.keep_fold(journal, folded)
    again = snapshot.read_folded(journal, keep=False)
    assert again.why == "" and again.prefix is not None and again.prefix.lines == folded.read.lines
    with journal.open("rb") as f:
        assert again.prefix.crc == snapshot.covered_crc(f, again.prefix.length)


@pytest.mark.parametrize("change", ["edited in place", "appended"])
def test_a_journal_written_to_after_the_fold_keeps_no_snapshot_of_it(run: Path, change: str) -> None:
    """Between the fold and its snapshot, the journal was written to: a line edited in place
    (same size: the CRC read then would vouch for bytes the fold never read) or a line appended
    (a live run's engine). No snapshot is kept; the next reader folds the journal as it is."""
    journal = without_snapshot(run)
    folded = snapshot.read_folded(journal, keep=False)
    if change == "edited in place":
        overwrite_line(journal, 40, b" ")
    else:
        with journal.open("ab") as f:
            f.write(folded.last.replace(b'"seq":', b'"was":', 1))
    # The file system's clock a tick on: a coarse one could stamp the copy and this write alike.
    os.utime(journal, ns=(journal.stat().st_atime_ns, journal.stat().st_mtime_ns + 1))
    snapshot.keep_fold(journal, folded)
    assert not snapshot.path_of(journal).exists()
    assert snapshot.read_folded(journal, keep=False).why == "no snapshot"
