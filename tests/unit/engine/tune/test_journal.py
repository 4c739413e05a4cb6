"""The tune's journal: typed (a line that is not a tune event is refused where it is) and
position-independent (a round's run is found from any working directory, and in a journal an
earlier ruler wrote with the path as it was given)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine import files
from engine.errors import BadInput
from engine.tune import journal


def test_a_round_run_is_found_from_another_working_directory(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "here"
    first.mkdir()
    monkeypatch.chdir(first)
    tune_dir = Path("results") / "2025-01-01-tune-x"  # as `--results-dir results` gives it
    (tune_dir / journal.RUNS / "2025-01-01-x-r1").mkdir(parents=True)
    journal.append(tune_dir, "round_started", round=1, round_kind="axes",
                   run=journal.run_name(tune_dir / journal.RUNS / "2025-01-01-x-r1"),
                   control={}, candidates=[])
    absolute = tune_dir.resolve()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    [event] = journal.read(absolute)
    assert event["kind"] == "round_started"
    assert journal.run_dir(absolute, event["run"]).is_dir()


@pytest.mark.parametrize("recorded", ["results/2025-01-01-tune-x/runs/2025-01-01-x-r1",
                                      "/old/place/runs/2025-01-01-x-r1"])
def test_a_journal_of_an_earlier_ruler_is_read_where_the_tune_is_now(tmp_path: Path, recorded: str) -> None:
    assert journal.run_dir(tmp_path, recorded) == tmp_path / "runs" / "2025-01-01-x-r1"


def test_a_line_that_is_no_tune_event_is_refused_at_its_line(tmp_path: Path) -> None:
    journal.append(tmp_path, "tune_started", tune="/t.yaml", baseline=None, runtime=None)
    with (tmp_path / journal.TUNE_JOURNAL).open("a") as f:
        f.write(json.dumps({"kind": "round_started", "ts": 1.0, "round": "one"}) + "\n")
        f.write('{"kind": "tune_do')  # torn by a kill: left out
    with pytest.raises(BadInput, match=r"tune\.jsonl:2: round_started: round is 'one', not int"):
        journal.read(tmp_path)


@pytest.mark.timeout(60)  # opened the plain way, a FIFO with no writer blocks forever
def test_a_journal_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / journal.TUNE_JOURNAL)
    with pytest.raises(BadInput, match="FIFO"):
        journal.read(tmp_path)
    with pytest.raises(files.Unwritable, match="FIFO"):  # said by ruler's main, exit 2
        journal.append(tmp_path, "tune_started", tune="/t.yaml", baseline=None, runtime=None)
