"""The run-directory half of issue 39's property: any file of a recorded run (its journal,
throughput.csv, verdicts.csv, a rep receipt, a quality receipt, engine.json...) that is a FIFO, a
link to /dev/zero or a sparse file past ruler's bound, given to `ruler report`, `compare` and
`status` through the CLI's entry function: exit 2 naming the file, or the command's answer without
that file (an optional file it skips); never a hang, never a traceback, never memory past a bound.

Each command runs in a forked child (tests.component.children); the parent waits with a
generous timeout, and a child still running then is a hang."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.files import MAX_RUN_FILE_BYTES
from tests.component.children import cli_in_child, fifo, link_to_zero, sparse
from tests.paths import FIXTURES

FIXTURE = FIXTURES / "runs" / "demo-smollm2"
RECEIPT = "windows/s1-control/reps/prose-c1-1-1.jsonl"  # a receipt throughput.csv names
# Every file of the recorded run, and a receipt its rows name (the fixture keeps their figures in
# the journal, not the receipts).
FILES = sorted({str(p.relative_to(FIXTURE)) for p in FIXTURE.rglob("*") if p.is_file()} | {RECEIPT})
SHAPES: dict[str, Callable[[Path], Path]] = {
    "fifo": fifo,
    "linkzero": link_to_zero,
    "sparse": sparse(MAX_RUN_FILE_BYTES + 1),
}
COMMANDS = [["report"], ["compare"], ["status"]]


def _run_with(tmp: Path, name: str, shape: str) -> Path:
    run = tmp / "run"
    shutil.copytree(FIXTURE, run)
    target = run / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    SHAPES[shape](target)
    return run


def _argv(command: str, run: Path) -> list[str]:
    if command == "compare":  # the bad run against a good copy of it, either side
        return ["compare", str(FIXTURE), str(run)]
    return [command, str(run)]


@pytest.mark.timeout(600)
@settings(max_examples=10, deadline=None)
@given(name=st.sampled_from(FILES), shape=st.sampled_from(sorted(SHAPES)),
       command=st.sampled_from([c[0] for c in COMMANDS]))
def test_any_run_file_is_read_or_refused_by_name(name: str, shape: str, command: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = _run_with(Path(tmp), name, shape)
        code, said = cli_in_child(_argv(command, run), {}, Path(tmp) / "out.txt")
    assert code is not None, f"a {shape} at {name} hung `ruler {command}`"
    assert "Traceback" not in said, said[-3000:]
    assert code in (0, 1, 2), (name, shape, command, said[-3000:])
    if code == 2:  # refused: by the file's name
        assert re.search(rf"{re.escape(name)}(:\d+)?:? ", said), said[-3000:]


@pytest.mark.parametrize(("name", "command"), [
    ("journal.jsonl", "report"), ("journal.jsonl", "compare"), ("journal.jsonl", "status"),
    ("throughput.csv", "report"), ("throughput.csv", "compare")])  # status reads the journal only
def test_a_fifo_for_a_run_file_is_refused_at_once(name: str, command: str) -> None:
    """The reproduction: a FIFO nobody writes to where the journal or throughput.csv should be
    blocked every reader's open() forever."""
    with tempfile.TemporaryDirectory() as tmp:
        run = _run_with(Path(tmp), name, "fifo")
        code, said = cli_in_child(_argv(command, run), {}, Path(tmp) / "out.txt")
    assert code == 2, (code, said[-3000:])
    assert f"{name}: not a regular file (a FIFO)" in said, said[-3000:]
