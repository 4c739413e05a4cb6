"""The readers of a run directory's files refuse a FIFO, a /dev/zero link and a sparse file past
ruler's bound at once, naming the file, as they refuse a damaged one (issue 39): a FIFO nobody
writes to, opened as Python's open() does, blocks forever, so each call returning at all is the
reproduction, and the error says why."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.commands.baseline import read_baseline
from engine.errors import BadInput
from engine.files import MAX_RUN_FILE_BYTES, Unreadable, open_regular, read_bounded
from engine.record import results, snapshot
from engine.record.journal import read_journal, read_kinds
from engine.record.receipts import ReceiptError, read_rep
from engine.record.snapshot import fold_journal

FIXTURE = Path(__file__).parents[3] / "fixtures" / "runs" / "demo-smollm2"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "a FIFO"


def _zero(path: Path) -> str:
    path.symlink_to("/dev/zero")
    return "a character device"


def _sparse(path: Path) -> str:
    with path.open("wb") as f:
        f.truncate(MAX_RUN_FILE_BYTES + 1)
    return "more than the 1 GiB ruler reads"


SHAPES: dict[str, Callable[[Path], str]] = {"fifo": _fifo, "zero": _zero, "sparse": _sparse}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_opener_refuses_what_is_not_a_bounded_regular_file(tmp_path: Path, shape: str) -> None:
    why = SHAPES[shape](tmp_path / "f")
    with pytest.raises(Unreadable, match=why):
        read_bounded(tmp_path / "f")
    if shape != "sparse":  # a follower bounds what it reads itself
        with pytest.raises(Unreadable, match=why):
            open_regular(tmp_path / "f")


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_journal_that_is_no_file_is_bad_input_naming_it(tmp_path: Path, shape: str) -> None:
    journal = tmp_path / results.JOURNAL
    why = SHAPES[shape](journal)
    for read in (read_journal, lambda p: read_kinds(p, {"row_done"}), fold_journal):
        with pytest.raises(BadInput, match=f"{journal}: .*{why}"):
            read(journal)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_receipt_that_is_no_file_is_a_receipt_error_naming_it(tmp_path: Path, shape: str) -> None:
    receipt = tmp_path / "r.jsonl"
    why = SHAPES[shape](receipt)
    with pytest.raises(ReceiptError, match=f"{receipt}: .*{why}"):
        read_rep(receipt)


def test_a_snapshot_that_is_a_fifo_is_passed_over_for_the_journal(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    whole = fold_journal(run / results.JOURNAL)
    snapshot.path_of(run / results.JOURNAL).unlink(missing_ok=True)
    os.mkfifo(snapshot.path_of(run / results.JOURNAL))
    assert fold_journal(run / results.JOURNAL).rows.keys() == whole.rows.keys()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_baseline_with_a_journal_or_receipt_that_is_no_file_is_bad_input(
        tmp_path: Path, shape: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    (run / results.JOURNAL).unlink()
    SHAPES[shape](run / results.JOURNAL)
    with pytest.raises(BadInput, match=f"{results.JOURNAL}"):
        read_baseline(run)


def test_frozen_file_that_is_a_fifo_is_bad_input_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "engine.json"
    _fifo(path)
    with pytest.raises(BadInput, match=f"{path}: not a regular file"):
        results.read_frozen(path)
