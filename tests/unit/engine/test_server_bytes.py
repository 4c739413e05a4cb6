"""A server's bytes through the real code paths that print or write them (issue 39's property test,
its server-bytes half): whatever a server puts in a boot-log line, an error body or its stream
text, no terminal escape, C1 control or bare CR reaches terminal text, no HTML or markdown link
of its own reaches a document, and no CSV cell starts with a formula character unless it is a
number.

The runs are the recorded demo run (tests/fixtures/runs/demo-smollm2) and a journal of every
event kind (tests/fixtures/fold/every-kind.jsonl), their outside text replaced by the example's:
the boot facts' values, the rows' errors and reasons, the verdicts' summaries, the windows' ends,
the rejection's error lines, the engine's error, an operator command's arguments and reply, the
boot excerpts, the boot facts' files (their values and their differences from the control's).
From each: the headless lines (``format_event``), ``ruler status`` and ``compare``, the console's detail panes
and its log pane's lines, ``ruler facts`` on a boot log of such lines, throughput.csv and
verdicts.csv as the engine writes them, report.md and the HTML page made from it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import shutil
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.commands.facts import facts_json, read_facts, render_table
from engine.commands.progress import format_event
from engine.commands.status import format_summary, summary
from engine.quality.verdicts import VERDICTS, verdict_row, write_verdicts
from engine.record.journal import read_events
from engine.record.receipts import throughput_rows, write_throughput
from engine.record.results import THROUGHPUT
from engine.record.snapshot import fold_journal
from engine.report import load_run, render
from engine.report.compare import cmd_compare
from engine.report.html import page
from engine.sanitize import terminal
from engine.servers import get_adapter
from tests.paths import FIXTURES
from tui.core.detail import detail, receipts
from tui.core.rules import leak_rule, verdict_rule
from tui.widgets.log import BootLog
from tui.widgets.text import to_text

RUNS = {"demo": FIXTURES / "runs" / "demo-smollm2", "every kind": FIXTURES / "fold" / "every-kind.jsonl"}
LOGS = FIXTURES / "logs"

# What a hostile server sends: escapes (OSC retitles a pane, CSI clears it, a C1 CSI), a CR and
# an LF (a forged line), bidi overrides, markdown (a heading, a link, an image, code, a table
# cell), HTML, formulas; mixed with arbitrary text and arbitrary bytes decoded as ruler decodes.
ATTACKS = ["\x1b]0;TITLE\x07", "\x1b[2J", "\x9b31m", "\r", "\n", "\n# Owned", "\u202e", "\u2028",
           "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[x](javascript:alert(1))",
           "![i](http://evil/i.png)", "`", "|", "**", "*", "\\", "&amp;", "=cmd|' /C calc'!A0",
           "+1+1", "-2+3", "@SUM(A1)", "\t=1", "-3.2", " "]
PIECE = st.one_of(st.sampled_from(ATTACKS), st.text(max_size=12),
                  st.binary(max_size=12).map(lambda b: b.decode("utf-8", "replace")))
SERVER_TEXT = st.lists(PIECE, min_size=1, max_size=6).map("".join)

# The events' fields whose text came from outside ruler (a log line's value, an error body, a
# verdict on what the server generated, what an operator typed), by event kind.
SERVER_FIELDS = {"row_done": ("error", "reason", "spread_why"), "row_void": ("reason", "spread_why"),
                 "verdict": ("summary",), "window_rejected": ("reason",), "boot_fact": ("value",),
                 "window_finished": ("reason",), "rerun_aborted": ("reason",),
                 "window_reboot": ("reason",), "engine_error": ("error",), "command": ("reply",),
                 "leak_suspected": ("detail",)}
FORMULA = ("=", "+", "-", "@", "\t", "\r")
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")


def acted_on(text: str) -> list[str]:
    """The characters of one line a terminal acts on rather than shows."""
    return [c for c in text if (unicodedata.category(c) == "Cc" and c != "\t") or c in BIDI]


def hostile_run(tmp: Path, source: str, text: str) -> Path:
    """The run ``source`` names with every outside text of it ``text``."""
    run = tmp / "run"
    if run.exists():
        shutil.rmtree(run)
    if RUNS[source].is_dir():
        shutil.copytree(RUNS[source], run)
    else:
        run.mkdir()
        shutil.copy(RUNS[source], run / "journal.jsonl")
    lines = []
    for line in (run / "journal.jsonl").read_text().splitlines():
        e = json.loads(line)
        for field in SERVER_FIELDS.get(e["kind"], ()):
            if isinstance(e.get(field), str):
                e[field] = text
        if e["kind"] == "window_rejected":
            e["errors"] = [text, f"E srv {text}"]
        if e["kind"] == "command":
            e["args"] = [text]
        lines.append(json.dumps(e))
    (run / "journal.jsonl").write_text("\n".join(lines) + "\n")
    for f in run.glob("windows/*/boot-facts.json"):
        facts = json.loads(f.read_text())
        facts["facts"] = {k: text if isinstance(v, str) else v for k, v in facts["facts"].items()}
        facts["errors"] = facts["warnings"] = [text]
        diff = facts.get("diff_vs_control") or {}
        diff["changed"] = {f"{k}{text}": [text, v[1]] for k, v in (diff.get("changed") or {}).items()}
        f.write_text(json.dumps(facts))
    one_line = " ".join(text.splitlines())  # a log's line, as ruler splits a log into lines
    for f in [*run.glob("windows/*/boot-excerpt.txt"), *run.glob("windows/*/rejection.txt")]:
        f.write_text("".join(f"{line} {one_line}\n" for line in f.read_text().splitlines()))
    return run


def terminal_lines(run: Path, text: str) -> dict[str, list[str]]:
    """Every line each terminal path prints of the run, by path."""
    state = fold_journal(run / "journal.jsonl")
    leak, rule = leak_rule(state), verdict_rule(state)
    panes = []
    for key in [*state.windows, *state.rows]:
        d = detail(state, key, leak, rule, receipts(run, key) if key in state.windows else None)
        assert d is not None
        panes += [to_text(line, {}).plain for line in d.lines]
    pane = BootLog(lambda _: "", 1000)  # the console's log pane, outside an app: nothing to scroll
    pane.write_lines([f"0.00.001.000 E srv  {text}", text], scroll_end=False)
    log = "".join(f"{line}{text}\n" for line in (LOGS / "llamacpp_c2048_np2.log").read_text().splitlines())
    adapter = get_adapter("llamacpp")
    headless = [format_event(e) for e in read_events(run / "journal.jsonl")]
    compared = io.StringIO()
    with contextlib.redirect_stdout(compared), contextlib.redirect_stderr(compared):
        cmd_compare([str(run), str(run)], allow_different=True)
    return {"headless": [line for line in headless if line is not None],
            "compare": compared.getvalue().splitlines(),
            "status": format_summary(summary(run)).splitlines(),
            "console detail": panes, "console log pane": list(pane.lines),
            "facts": render_table(facts_json("llamacpp", "boot.log", *read_facts(adapter, log))).splitlines()}


def cells(path: Path) -> list[str]:
    return [c for row in csv.reader(io.StringIO(path.read_text())) for c in row]


def write_csvs(run: Path) -> None:
    """throughput.csv and verdicts.csv from the run's fold, as the engine writes them."""
    state = fold_journal(run / "journal.jsonl")
    write_throughput(run, throughput_rows(state, verdict_rule(state)))
    write_verdicts(run, [verdict_row(ws.session, ws.window, ws.axis, False, ws.verdicts)
                         for ws in state.windows.values()])


_SPAN = re.compile(r"`[^`]*`")
_MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)]*)\)")
_TAG = re.compile(r"<(/?[A-Za-z][\w-]*)")
_URL = re.compile(r"""(?:href|src)="([^"]*)\"""")


def shape(md: str) -> dict[str, Any]:
    """What report.md makes of itself outside its code spans and fenced blocks: headings, link
    targets, raw HTML; and its fences (none opened or closed by a server's text)."""
    lines, fenced = [], False
    for line in md.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            lines.append("```")
        elif not fenced:
            lines.append(line)
    prose = [_SPAN.sub("", line) for line in lines]
    return {"headings": [line for line in lines if line.startswith("#")],
            "fences": lines.count("```"),
            "links": sorted({t for line in prose for t in _MD_LINK.findall(line)}),
            "html": [m for line in prose for m in re.findall(r"<[A-Za-z/!?]", line)]}


def page_shape(html: str) -> dict[str, Any]:
    """The page's tags and the addresses they link or load (the charts' data URIs cut short)."""
    body = html.split("<body>", 1)[1].rsplit("<script>", 1)[0]
    return {"tags": sorted(set(_TAG.findall(body))),
            "urls": sorted({u[:11] if u.startswith("data:") else u for u in _URL.findall(body)})}


@pytest.fixture(scope="module", params=list(RUNS))
def baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run's report with plain words for its outside text: what a hostile one may not add to."""
    run = hostile_run(tmp_path_factory.mktemp("baseline"), request.param, "plain words")
    write_csvs(run)
    md = render(load_run(run), [], "")
    return {"source": request.param, "md": shape(md), "page": page_shape(page("t", md, run, []))}


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=SERVER_TEXT)
def test_no_server_byte_reaches_a_terminal_or_a_document_as_more_than_text(
        text: str, tmp_path: Path, baseline: dict[str, Any]) -> None:
    run = hostile_run(tmp_path, baseline["source"], text)
    for where, lines in terminal_lines(run, text).items():
        assert lines, where
        for line in lines:
            assert not acted_on(line), (where, line)
        if where == "headless":
            assert terminal(text) in "\n".join(lines), where  # it got there, as text
        elif where in ("console detail", "console log pane"):
            # The console shows a line as a terminal would: what follows its last CR is written
            # over the line's start (tui.core.logview.overstruck), so that much of it is there.
            assert terminal(text.rsplit("\r", 1)[-1]) in "\n".join(lines), where

    write_csvs(run)
    for name in (THROUGHPUT, VERDICTS):
        for cell in cells(run / name):
            assert not acted_on(cell.replace("\n", "")), (name, cell)
            if cell.startswith(FORMULA):
                float(cell)  # only a number may: a spreadsheet reads it as one

    md = render(load_run(run), [], "")
    for line in md.splitlines():
        assert not acted_on(line), line
    assert shape(md) == baseline["md"]
    assert page_shape(page("t", md, run, [])) == baseline["page"]
