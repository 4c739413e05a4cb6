"""A server's bytes are data, never instructions: what a hostile or broken server sends (escapes in
an error body, a stream line with no end, answers that fail every request) reaches no terminal,
document or JSON file of the run as anything but inert text.

The real engine (``ruler engine``'s run_engine) against the FAKE server of tests/component/fakes.py,
which injects the hostile answers (``Behaviour.error_body``, ``Behaviour.endless_line``).
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from engine.commands.cli import main
from engine.errors import EngineError
from engine.record.journal import read_events
from engine.record.snapshot import fold_journal
from engine.record.writer import JournalWriter
from engine.report import load_run
from engine.report.render import write_report
from tests.component.fakes import Behaviour
from tests.component.helpers import run_with

pytestmark = pytest.mark.timeout(120)

HOSTILE = (b"# Owned\n<script>alert(1)</script> [click](javascript:alert(1))\r"
           b"\x1b]0;TITLE\x07\x1b[2J=cmd|' /C calc'!A0")


def strict(line: str) -> object:
    def refuse(word: str) -> object:
        raise ValueError(f"{word} is not JSON")
    return json.loads(line, parse_constant=refuse)


def json_files(run: Path) -> list[Path]:
    return [p for p in run.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file()]


def test_a_row_of_failed_requests_writes_strict_json(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = run_with(tmp, Behaviour(stream_status=500), monkeypatch)
    state = fold_journal(run / "journal.jsonl")
    assert {r.row["spread"] for r in state.rows.values()} == {None}
    checked = 0
    for path in json_files(run):
        # One document, or one a line (the journal, the receipts, the state snapshot's head and body).
        indented = path.suffix == ".json" and path.read_text().startswith("{\n")
        texts = [path.read_text()] if indented else path.read_text().splitlines()
        for text in filter(str.strip, texts):
            strict(text)
            checked += 1
    assert checked


def test_a_text_error_body_reaches_no_document_or_terminal_raw(
        tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = run_with(tmp, Behaviour(stream_status=500, error_body=HOSTILE), monkeypatch, echo=True,
                      axis="=cmd|' /C calc'!A0")
    out = capsys.readouterr()
    report, _, _ = write_report(run, as_html=True)
    main(["status", str(run)])
    main(["compare", str(run), str(run)])
    later = capsys.readouterr()
    documents = {"stdout": out.out, "stderr": out.err, "report.md": report.read_text(),
                 "status and compare": later.out + later.err,
                 "report.html": (run / "report.html").read_text(),
                 "throughput.csv": (run / "throughput.csv").read_text()}
    assert "Owned" in documents["report.md"]  # the error is there, as text
    for name, text in documents.items():
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text, name
    assert "\n# Owned" not in documents["report.md"]
    page = documents["report.html"]
    assert "<script>alert" not in page and 'href="javascript:' not in page
    cells = [c for row in csv.reader(io.StringIO(documents["throughput.csv"])) for c in row]
    assert "'=cmd|' /C calc'!A0" in cells  # the axis, quoted: no spreadsheet runs it
    assert not [c for c in cells if c.startswith(("=", "+", "@"))]
    assert {r.axis for r in load_run(run).rows if r.window == "ctx"} == {"=cmd|' /C calc'!A0"}  # read back


def test_a_stream_line_with_no_end_is_a_request_error_that_says_so(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each streamed answer is one 8 MiB SSE line with no end (FAKED by the server): each request
    fails at the bound, saying why, rather than holding (and copying at every read) all of it."""
    run, _ = run_with(tmp, Behaviour(endless_line=8 << 20), monkeypatch)
    state = fold_journal(run / "journal.jsonl")
    errors = {r.row.get("error", "") for r in state.rows.values()}
    assert errors and all("with no end yet (more than 1,048,576)" in e for e in errors), errors


class _ReadOnlyAfter:
    """FAKED fault: from the moment it is set, the results tree behaves as a file system that went
    read-only or failing (EIO, EROFS) under the engine: creating, replacing, removing a file or a
    directory there raises, and so does every fsync (the journal's appends included)."""

    WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def __init__(self, root: Path, code: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.code, self.on = str(root), code, False
        self.first: str | None = None  # the first file that could not be written
        for name in ("replace", "rename", "unlink", "remove", "mkdir", "rmdir"):
            monkeypatch.setattr(os, name, self._path_op(getattr(os, name), name == "mkdir"))
        real_open, real_fsync = os.open, os.fsync

        def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & self.WRITE:
                self._check(path)
            return real_open(path, flags, *args, **kwargs)

        def fake_fsync(fd: Any) -> None:
            if self.on:
                self._fail(os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}"))
            real_fsync(fd)
        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "fsync", fake_fsync)

    def _path_op(self, real: Any, mkdir: bool) -> Any:
        def op(path: Any, *args: Any, **kwargs: Any) -> Any:
            if mkdir and os.path.exists(path):  # as Linux: the name is looked up first
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
            self._check(path)
            return real(path, *args, **kwargs)
        return op

    def _check(self, path: Any) -> None:
        name = os.fsdecode(path) if not isinstance(path, int) else ""
        if self.on and (name.startswith(self.root) or name.startswith("/proc/self/fd/")):
            self._fail(name)

    def _fail(self, name: str) -> None:
        self.first = self.first or name
        raise OSError(self.code, os.strerror(self.code), name)


@pytest.mark.parametrize("code", [errno.EIO, errno.EROFS], ids=["EIO", "EROFS"])
@pytest.mark.parametrize("after", ["rep_done", "quality_started"], ids=["mid-measurement", "mid-quality"])
def test_a_results_tree_gone_read_only_mid_run_says_its_first_error(
        tmp: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], code: int,
        after: str) -> None:
    """The results disk fails mid-run, after the first rep or as the quality checks begin (FAKED by
    _ReadOnlyAfter: every write, rename, removal and fsync under results/ raises from then on, as on
    a file system remounted read-only or an I/O error): the first write that failed (a receipt, a
    check's file) is what the engine says, with how to resume (exit code 1, EngineError); no
    cleanup on the way out (the window's stop and its record, the quality verdicts' table, the
    journal's close, the control socket's and pid file's removal) raises over it; no traceback."""
    fault = _ReadOnlyAfter(tmp / "results", code, monkeypatch)
    append = JournalWriter.append

    def append_then_fail(self: JournalWriter, kind: str, **data: Any) -> Any:
        event = append(self, kind, **data)
        fault.on = fault.on or kind == after
        return event
    monkeypatch.setattr(JournalWriter, "append", append_then_fail)
    with pytest.raises(EngineError) as raised:
        run_with(tmp, Behaviour(), monkeypatch, quality={"greedy": {"n": 2, "max_tokens": 8}})
    monkeypatch.undo()
    [run] = (tmp / "results").iterdir()
    assert fault.first is not None and fault.first.startswith(str(run / "windows/s1-control/")), fault.first
    first = Path(fault.first)
    if first.name.startswith("."):  # a temporary (results.temporary_for): said as the file it was for
        first = first.with_name(first.name[1:].rsplit(".", 2)[0])
    said = str(raised.value)
    assert said.startswith(f"the run stopped: cannot write {first} ({os.strerror(code)})"), said
    assert f"run --resume {run}" in said
    assert "Traceback" not in capfd.readouterr().err
    assert [e for e in read_events(run / "journal.jsonl") if e["kind"] == after]
