"""The writers of a run directory look at what is at their path first (issue 49, H6): a directory,
a FIFO, a device or a link that loops where ruler writes a file, or a file where it keeps a
directory, is files.Unwritable naming the path and what is there, before a byte is written; a link
to a regular file is replaced, its target never written through."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import files
from engine.record import results
from engine.record.receipts import ReceiptError, source_paths


def _dir(path: Path) -> str:
    path.mkdir()
    return "not a regular file (a directory)"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "not a regular file (a FIFO)"


def _loop(path: Path) -> str:
    path.symlink_to(path.name)
    return "not a regular file (a symbolic link that loops)"


def _zero(path: Path) -> str:
    path.symlink_to("/dev/zero")
    return "not a regular file (a symbolic link to a character device)"


SHAPES: dict[str, Callable[[Path], str]] = {"dir": _dir, "fifo": _fifo, "loop": _loop, "zero": _zero}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_file_written_whole_over_what_is_no_file_is_unwritable(tmp_path: Path, shape: str) -> None:
    target = tmp_path / "results.json"
    said = SHAPES[shape](target)
    with pytest.raises(files.Unwritable) as raised:
        results.write_json(target, {"a": 1})
    assert raised.value.path == target and str(raised.value).startswith(said), str(raised.value)
    assert isinstance(raised.value, OSError)  # a cache's writer that skips a failed write skips it
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary made


@pytest.mark.parametrize("shape", ["fifo", "loop", "zero"])
def test_a_file_appended_to_over_what_is_no_file_is_unwritable(tmp_path: Path, shape: str) -> None:
    target = tmp_path / "journal.jsonl"
    SHAPES[shape](target)
    with pytest.raises(files.Unwritable) as raised:
        results.open_append(target)
    assert raised.value.path == target


def test_a_parent_that_is_no_directory_is_named_not_the_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "windows")
    with pytest.raises(files.Unwritable) as raised:
        results.write_json(tmp_path / "windows" / "s1-control" / "greedy.json", {})
    assert raised.value.path == tmp_path / "windows"
    assert str(raised.value).startswith("not a directory (a FIFO)")
    with pytest.raises(files.Unwritable) as raised:
        results.window_dir(tmp_path, "s1", "control")
    assert raised.value.path == tmp_path / "windows"


def test_a_link_to_a_regular_file_is_replaced_and_its_target_kept(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text("kept\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").symlink_to(outside)
    results.write_json(run / "results.json", {"a": 1})
    assert not (run / "results.json").is_symlink() and outside.read_text() == "kept\n"


def test_a_file_where_a_directory_goes_is_unwritable(tmp_path: Path) -> None:
    (tmp_path / "export").write_text("")
    with pytest.raises(files.Unwritable) as raised:
        files.make_dir(tmp_path / "export")
    assert str(raised.value).startswith("not a directory (a regular file)")
    files.make_dir(tmp_path / "made")  # and one missing is made, owner-only
    assert (tmp_path / "made").stat().st_mode & 0o777 == 0o700


def test_clearing_removes_a_stale_file_and_refuses_a_directory(tmp_path: Path) -> None:
    for make in (_fifo, _loop, _zero):
        make(tmp_path / "control.sock")
        files.clear(tmp_path / "control.sock")
        assert not os.path.lexists(tmp_path / "control.sock")
    (tmp_path / "control.sock").mkdir()
    (tmp_path / "control.sock" / "kept").write_text("")
    with pytest.raises(files.Unwritable) as raised:
        files.clear(tmp_path / "control.sock")
    assert str(raised.value).startswith("not a file (a directory)")
    assert (tmp_path / "control.sock" / "kept").exists()


def test_a_receipt_that_is_a_link_loop_is_a_receipt_error(tmp_path: Path) -> None:
    """Path.resolve raised RuntimeError("Symlink loop ...") out of `ruler export` and resume."""
    (tmp_path / "reps").mkdir()
    _loop(tmp_path / "reps" / "r.jsonl")
    with pytest.raises(ReceiptError, match="r.jsonl: a symbolic link that loops"):
        source_paths(tmp_path, "reps/r.jsonl")
