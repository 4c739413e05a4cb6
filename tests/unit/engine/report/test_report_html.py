"""``ruler report --html``: report.md's own lines as one self-contained page (in a real browser:
tests/integration/test_report.py)."""

from __future__ import annotations

import csv
import itertools
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from engine.report import cmd_report
from engine.report.html import Links, blocks, inline
from tests.paths import FIXTURES

DEMO = FIXTURES / "runs" / "demo-smollm2"


def test_the_reports_markdown_becomes_html_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "windows" / "s1").mkdir(parents=True)
    (tmp_path / "windows" / "s1" / "greedy.json").write_text("{}")
    assert inline("**void** at `-fa off` (*within noise*) [greedy.json](windows/s1/greedy.json)",
                  {}, Links(tmp_path)) == ('<b>void</b> at <code>-fa off</code> (<i>within noise</i>) '
                                           '<a href="windows/s1/greedy.json">greedy.json</a>')
    assert inline("<script>alert(1)</script> a \\| b, 2 * 3 * 4", {}) == (
        "&lt;script&gt;alert(1)&lt;/script&gt; a | b, 2 * 3 * 4")
    assert inline("`**not bold** <b>`", {}) == "<code>**not bold** &lt;b&gt;</code>"
    assert inline("![Δ tok/s](report-delta.png)", {"report-delta.png": "data:image/png;base64,AA=="}) == (
        '<img alt="Δ tok/s" src="data:image/png;base64,AA==">')
    md = ["# run: ruler report", "", "A paragraph", "on two lines.", "", "| window | Δ \\| x |",
          "|---|---|", "| s1-a | +1.0 % |", "", "- one", "- two", "", "*A caption.*"]
    assert list(blocks(md, {})) == [
        '<h1 id="run-ruler-report">run: ruler report</h1>', "<p>A paragraph on two lines.</p>", "<table>",
        "<thead><tr><th>window</th><th>Δ | x</th></tr></thead>", "<tbody>",
        "<tr><td>s1-a</td><td>+1.0 %</td></tr>", "</tbody></table>",
        "<ul>", "<li>one</li>", "<li>two</li>", "</ul>", "<p class=caption><i>A caption.</i></p>"]


def test_a_line_that_starts_like_a_heading_but_is_none_is_a_paragraph() -> None:
    """A "#" with no space after it, or seven of them, heads nothing: the line is text (it was
    left unread, and the page grew by an empty paragraph for ever: a campaign's text can say it)."""
    got = list(itertools.islice(blocks(["#x", "a", "####### seven", "#"], {}), 5))
    assert got == ["<p>#x a</p>", "<p>####### seven</p>", "<p>#</p>"]


@pytest.mark.parametrize("target", [
    "javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,<script>alert(1)</script>",
    "vbscript:x", "file:///etc/passwd", "/etc/passwd", "../other-run/journal.jsonl", "//evil.example/x",
    "windows/s1/missing.json", "&#106;avascript:alert(1)"])
def test_a_link_or_image_the_run_does_not_hold_is_text_not_a_link(tmp_path: Path, target: str) -> None:
    """report.html makes a link only where ruler writes one: a receipt the run directory holds, or
    an http(s) page; an image only of its own charts. Whatever else a line of the markdown says
    (a campaign's or a server's text that reached it) is shown as the text it is."""
    (tmp_path / "windows" / "s1").mkdir(parents=True)
    for text in (f"[x]({target})", f"see [x]({target}) and ![i]({target})", f"| [x]({target}) |"):
        said = inline(text, {}, Links(tmp_path))
        assert "<a " not in said and "<img" not in said, said
    assert inline("[x](https://example.org/a?b=1)", {}, Links(tmp_path)) == (
        '<a href="https://example.org/a?b=1">x</a>')


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, int] = {}
        self.table = ""
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.table = a.get("id") or ""
        elif tag == "tr" and self.table:
            self.rows[self.table] = self.rows.get(self.table, 0) + 1
        self.refs += [v for k, v in attrs if k in ("src", "href") and v]


def test_the_page_holds_every_row_and_chart_and_fetches_nothing(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    assert cmd_report(str(run), as_html=True) == 0
    page = Page()
    text = (run / "report.html").read_text()
    page.feed(text)
    with (run / "throughput.csv").open(newline="") as f:
        assert page.rows["rows"] == 1 + len(list(csv.DictReader(f)))  # its header and every row
    charts = sorted(run.glob("report-*.png"))
    images = [r for r in page.refs if r.startswith("data:image/png;base64,")]
    assert len(images) == len(charts) == 4  # the delta against the control first
    links = [r for r in page.refs if not r.startswith("data:")]
    assert links and all(not re.match(r"[a-z]+:|//", r) and (run / r).exists() for r in links), links
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    md = (run / "report.md").read_text()
    assert text.count("<h2") == md.count("\n## ") + 1  # the report's sections, then every row


def test_the_report_opens_on_the_glance_table_and_the_delta_chart_tables_after(tmp_path: Path) -> None:
    """What a reader looks for first is on the first screen: the run, the windows at a glance and
    the delta chart; every table of figures comes after them (in a browser:
    tests/integration/test_report.py)."""
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    assert cmd_report(str(run), as_html=True) == 0
    md = (run / "report.md").read_text()
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads[:2] == ["## Windows at a glance", "## Charts"], heads
    charts = md[md.index("## Charts"):md.index("## Controls")]
    drawn = re.findall(r"\(report-([a-z-]+)\.png\)", charts)
    assert drawn[0] == "delta" and len(drawn) == 4, drawn
    text = (run / "report.html").read_text()
    first_table_after = text.index("<table", text.index('id="charts"'))
    assert text.index('id="charts"') < text.index("<img") < first_table_after
