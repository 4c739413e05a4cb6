"""engine.sanitize: text from outside ruler (a server's bytes, an operator's arguments, an axis) is
inert wherever it is written: a terminal, a markdown document (and the HTML made from it), a CSV.
The property tests feed arbitrary text, server bytes decoded as ruler decodes them included."""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.commands.progress import format_event
from engine.record.figures import CSV_COLUMNS
from engine.record.receipts import write_throughput
from engine.report.html import page
from engine.sanitize import csv_cell, csv_document, csv_text, markdown, terminal
from tests.hostile import markdown_refs

SERVER_TEXT = st.one_of(st.text(), st.binary().map(lambda b: b.decode("utf-8", "replace")))
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")


def acted_on(text: str) -> list[str]:
    """The characters a terminal acts on rather than shows: controls but tab, and bidi/line
    separators."""
    return [c for c in text if (unicodedata.category(c) == "Cc" and c != "\t") or c in BIDI]


def test_escapes_are_shown_not_acted_on() -> None:
    assert terminal("\x1b]0;TITLE\x07\x1b[2J") == "\\x1b]0;TITLE\\x07\\x1b[2J"
    assert terminal("one\rtwo\nthree\u202e") == "one\\x0dtwo\\x0athree\\u202e"
    assert terminal("tab\tkept, é kept") == "tab\tkept, é kept"


def test_markdown_is_one_inert_code_span() -> None:
    assert markdown("# Owned\n<b>[x](javascript:y)</b> `a|b`") == (
        "`# Owned\\x0a<b>[x](javascript:y)</b> 'a\\|b'`")
    assert markdown("") == ""
    assert markdown("5") == "5" and markdown("q4_0 -> 1.5 GiB") == "`q4_0 -> 1.5 GiB`"
    assert markdown("2,048 (n_ctx)") == "2,048 (n_ctx)"
    # Brackets alone are words; closed into what makes a link or a definition, a span.
    assert markdown("+1.0 % [-2.0, +3.0]") == "+1.0 % [-2.0, +3.0]"
    assert [markdown(t)[:1] for t in ("[a](b)", "[a][b]", "[a]: http://x", "![i](x)")] == ["`"] * 4


def test_a_formula_cell_is_quoted_and_a_number_is_kept() -> None:
    assert [csv_cell(v) for v in ("=cmd|' /C calc'!A0", "+1+1", "@SUM(A1)", "-2+3", "-1.5", 3.0, None)] == [
        "'=cmd|' /C calc'!A0", "'+1+1", "'@SUM(A1)", "'-2+3", "-1.5", 3.0, None]
    assert [csv_text(csv_cell(v)) for v in ("=cmd", "-c 4096", "'quoted", "-1.5", "'=cmd", "''+1")] == [
        "=cmd", "-c 4096", "'quoted", "-1.5", "'=cmd", "''+1"]


def test_every_cell_of_a_csv_document_is_inert() -> None:
    doc = csv_document(["axis", "delta", "error"], [
        {"axis": "=cmd|' /C calc'!A0", "delta": -3.2, "error": "\r=1+1"},
        {"axis": "-3.2", "delta": None, "error": "\t@SUM(A1)", "ignored": "=x"}])
    assert list(csv.reader(io.StringIO(doc))) == [
        ["axis", "delta", "error"], ["'=cmd|' /C calc'!A0", "-3.2", "\\x0d=1+1"],
        ["-3.2", "", "'\t@SUM(A1)"]]


@given(SERVER_TEXT)
def test_no_server_text_reaches_a_terminal_as_an_escape(text: str) -> None:
    assert not acted_on(terminal(text))


@given(SERVER_TEXT)
def test_no_server_text_reaches_a_csv_as_an_escape_or_a_formula(text: str) -> None:
    [_, [cell]] = list(csv.reader(io.StringIO(csv_document(["text"], [{"text": text}]))))
    assert not acted_on(cell)
    if cell.startswith(("=", "+", "-", "@", "\t")):  # only a number may: a spreadsheet reads it as one
        float(cell)
    assert csv_text(cell) == terminal(text)  # read back as written


@given(SERVER_TEXT)
def test_no_server_text_makes_markdown_or_html_of_its_own(text: str) -> None:
    md = markdown(text)
    assert not acted_on(md) and "\n" not in md
    if md and md != text:  # one code span: nothing inside it is markdown
        assert md.startswith("`") and md.endswith("`") and md.count("`") == 2
    elif md:  # plain words, brackets that make no link among them
        assert not set(md) & set("`*<>#|!&\\~{}") and not re.search(r"\][(\[:]", md)
        links, images, raw = markdown_refs(f"[r]: javascript:x\n\n{md}")  # a definition it could use
        assert links == images == raw == [], md
    html = page("t", f"| a |\n|---|\n| {md} |\n\nline {md}\n", Path("/nonexistent"), [])
    body = html.split("<body>", 1)[1].rsplit("<script>", 1)[0]  # the page's own sorting script last
    assert "<a " not in body and "<img" not in body and "<script" not in body
    assert not acted_on(body.replace("\n", ""))


@settings(max_examples=50, deadline=None)
@given(SERVER_TEXT)
def test_no_server_text_reaches_headless_output_as_an_escape(text: str) -> None:
    """The headless lines that quote a server or an operator: a rejected boot's reason, a void
    row's, the engine's error, an operator's command."""
    where = {"seq": 1, "ts": 0.0, "session": "s1", "window": "w"}
    shape = {**where, "class": "prose", "concurrency": 2}
    for e in ({**where, "kind": "window_finished", "status": "failed", "reason": text},
              {**shape, "kind": "row_void", "reason": text, "spread_why": text},
              {**where, "kind": "engine_error", "error": text},
              {**where, "kind": "command", "cmd": "rerun", "args": [text], "reply": text}):
        line = format_event(e)
        assert line is not None and not acted_on(line) and "\n" not in line


@settings(max_examples=50, deadline=None)
@given(SERVER_TEXT)
def test_no_server_text_reaches_throughput_csv_as_an_escape_or_a_formula(tmp_path_factory: Any,
                                                                          text: str) -> None:
    run = tmp_path_factory.mktemp("run")
    write_throughput(run, [{k: text for k in CSV_COLUMNS}])
    [_, row] = list(csv.reader((run / "throughput.csv").open(newline="")))
    for cell in row:
        assert not acted_on(cell)
        if cell.startswith(("=", "+", "-", "@", "\t")):
            float(cell)
