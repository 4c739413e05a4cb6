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
from engine.control import SOCKET
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


@pytest.mark.parametrize("code", [errno.EIO, errno.EROFS], ids=["EIO", "EROFS"])
def test_a_results_disk_failing_mid_run_is_said_plainly(
        tmp: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """The results disk fails mid-run (FAKED: the journal's appends raise after the first rep, and
    the control socket's file cannot be removed, as on a file system gone read-only): the engine
    says it cannot write and how to resume, not a traceback of the second error."""
    append, unlink = JournalWriter.append, Path.unlink
    failed: list[str] = []

    def failing_append(self: JournalWriter, kind: str, **data: Any) -> Any:
        if kind == "row_done" or failed:
            failed.append(kind)
            raise OSError(code, os.strerror(code), str(self.path))
        return append(self, kind, **data)

    def failing_unlink(self: Path, missing_ok: bool = False) -> None:
        if self.name == SOCKET and failed:
            raise OSError(code, os.strerror(code), str(self))
        unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(JournalWriter, "append", failing_append)
    monkeypatch.setattr(Path, "unlink", failing_unlink)
    with pytest.raises(EngineError, match=f"the run stopped: cannot write .*journal.jsonl "
                                          f"\\({os.strerror(code)}\\).*run --resume"):
        run_with(tmp, Behaviour(), monkeypatch)
    monkeypatch.undo()
    [run] = (tmp / "results").iterdir()
    assert [e for e in read_events(run / "journal.jsonl") if e["kind"] == "rep_done"]


def test_a_stream_line_with_no_end_is_a_request_error_that_says_so(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each streamed answer is one 8 MiB SSE line with no end (FAKED by the server): each request
    fails at the bound, saying why, rather than holding (and copying at every read) all of it."""
    run, _ = run_with(tmp, Behaviour(endless_line=8 << 20), monkeypatch)
    state = fold_journal(run / "journal.jsonl")
    errors = {r.row.get("error", "") for r in state.rows.values()}
    assert errors and all("with no end yet (more than 1,048,576)" in e for e in errors), errors
