"""The snapshot vouches for every byte it covers: damage inside the covered lines that keeps the
journal's length (a run of NULs over a line, a line edited in place) makes readers fold the whole
journal, so status names the damage and resume refuses, as without a snapshot.

On the recorded demo run's real journal (tests/fixtures/runs/demo-smollm2), its snapshot written
by the journal's writer as the engine leaves it.
"""

from __future__ import annotations

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
