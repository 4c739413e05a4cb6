"""``ruler report --html``: report.md as one self-contained HTML file, ``report.html``.

Nothing in it is fetched when it is viewed: the charts are inlined as data URIs, the style and the
sorting script are in the page, no font, script or stylesheet comes from elsewhere (a report whose
template lived on a server went blank the day it moved). Links to the run's receipts stay relative
links, followed only when clicked. Every table sorts by a click on its header; after the report's
own sections, every row of throughput.csv in one table (``#rows``).

The page is made from report.md's own lines, through the few constructs the report writes
(headings, paragraphs, lists, tables, bold, italics, code, links, images), so the two never say
different things.
"""

from __future__ import annotations

import base64
import csv
import html
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine import files
from engine.record import results

HTML = "report.html"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_CODE = re.compile(r"`([^`]+)`")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITALIC = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1400px; padding: 0 1.5em; color: #1b1f24; background: #fff; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 2em; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 13px; display: block;
        overflow-x: auto; max-width: 100%; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; cursor: pointer; user-select: none; white-space: nowrap; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
tr:nth-child(even) td { background: #fafbfc; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f3f4f6; padding: 0 3px;
       border-radius: 3px; }
img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
.caption { color: #57606a; font-style: italic; }
"""

# Click a header: its table's body rows sorted by that column, figures by value, again the other way.
SCRIPT = """
document.querySelectorAll("table").forEach(function (table) {
  var heads = table.querySelectorAll("thead th");
  heads.forEach(function (th, col) {
    th.addEventListener("click", function () {
      var down = th.getAttribute("aria-sort") === "ascending";
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", down ? "descending" : "ascending");
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var text = (row.cells[col] ? row.cells[col].textContent : "").trim();
        var m = text.match(/^[~+]?(-?\\d+(?:\\.\\d+)?)/);
        return m ? [0, parseFloat(m[1]), text] : [text === "-" || text === "" ? 2 : 1, 0, text];
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x[0] !== y[0]) { return x[0] - y[0]; }
        var c = x[0] === 0 ? x[1] - y[1] : x[2].localeCompare(y[2]);
        return down ? -c : c;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


# A link ruler writes: a receipt in the run directory (a relative path, no scheme, never above
# the directory) or an http(s) page; anything else a link of the markdown says is shown as text.
_RECEIPT = re.compile(r"(?![/\\])(?!.*(?:^|/)\.\.(?:/|$))[\w./@+,=~-]+")
_WEB = re.compile(r"https?://[^\s<>\"'`\\]+", re.I)


class Links:
    """Where a page may link: the run directory's own files, and web pages. The page is made from
    report.md, whose every text from outside ruler is escaped (engine.sanitize.markdown); this is
    the second wall: a link to anything else (javascript:, data:, a file elsewhere) is not made."""

    def __init__(self, run_dir: Path | None) -> None:
        self.run_dir = run_dir

    def allows(self, target: str) -> bool:
        if _WEB.fullmatch(target):
            return True
        if self.run_dir is None or not _RECEIPT.fullmatch(target):
            return False
        path = self.run_dir / target
        return path.exists() and path.resolve().is_relative_to(self.run_dir.resolve())


NO_LINKS = Links(None)


def inline(text: str, images: dict[str, str], links: Links = NO_LINKS) -> str:
    """One line's markdown (code, images, links, bold, italics) as HTML, everything else escaped.
    An image is one of the page's charts (``images``: its path to its data URI), a link one
    ``links`` allows: any other is shown as the text it was written as."""
    parts = _CODE.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # inside backticks: as written
            out.append(f"<code>{html.escape(part)}</code>")
            continue
        s = html.escape(part, quote=False)

        def image(m: re.Match[str]) -> str:
            alt, src = m.group(1), html.unescape(m.group(2))
            data = images.get(src)
            if data is None:
                return m.group(0).replace("[", "&#91;").replace("]", "&#93;")
            return f'<img alt="{html.escape(html.unescape(alt))}" src="{html.escape(data)}">'

        def link(m: re.Match[str]) -> str:
            target = html.unescape(m.group(2))
            if not links.allows(target):
                return m.group(0).replace("[", "&#91;").replace("]", "&#93;")
            return f'<a href="{html.escape(target)}">{m.group(1)}</a>'

        s = _IMAGE.sub(image, s)
        s = _LINK.sub(link, s)
        s = _BOLD.sub(r"<b>\1</b>", s)
        s = _ITALIC.sub(r"<i>\1</i>", s)
        out.append(s)
    return "".join(out).replace("\\|", "|")


def cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip() for c in _CELL_SPLIT.split(inner)]


def table_html(head: list[str], body: Iterable[list[str]], images: dict[str, str],
               ident: str = "", data: bool = False, links: Links = NO_LINKS) -> Iterator[str]:
    """A table of markdown cells; ``data``: of plain text cells (a CSV's, which may quote a
    server), escaped and nothing else: no link, image or emphasis is made of them."""
    def show(c: str) -> str:
        return html.escape(c) if data else inline(c, images, links)
    yield f'<table{f" id={chr(34)}{ident}{chr(34)}" if ident else ""}>'
    yield "<thead><tr>" + "".join(f"<th>{show(c)}</th>" for c in head) + "</tr></thead>"
    yield "<tbody>"
    for row in body:
        yield "<tr>" + "".join(f"<td>{show(c)}</td>" for c in row) + "</tr>"
    yield "</tbody></table>"


def blocks(lines: list[str], images: dict[str, str], links: Links = NO_LINKS) -> Iterator[str]:
    """The report's markdown, block by block, as HTML."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif m := re.match(r"(#{1,6}) (.*)", line):
            level, title = len(m.group(1)), m.group(2)
            slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")  # report.html#charts
            yield f'<h{level} id="{slug}">{inline(title, images, links)}</h{level}>'
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            body = [r for r in rows[1:] if not all(re.fullmatch(r":?-+:?", c) for c in r)]
            yield from table_html(rows[0], body, images, links=links)
        elif line.startswith("- "):
            yield "<ul>"
            while i < len(lines) and lines[i].startswith("- "):
                yield f"<li>{inline(lines[i][2:], images, links)}</li>"
                i += 1
            yield "</ul>"
        else:
            para, i = [line], i + 1  # a line like a heading that heads nothing ("#x") is text too
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "- ")):
                para.append(lines[i])
                i += 1
            text = " ".join(para)
            caption = text.startswith("*") and text.endswith("*") and not text.startswith("**")
            yield f'<p{" class=caption" if caption else ""}>{inline(text, images, links)}</p>'


def rows_table(run_dir: Path, images: dict[str, str]) -> list[str]:
    """Every row of throughput.csv, as the file has them."""
    path = run_dir / results.THROUGHPUT
    if not path.is_file():
        return []
    with files.open_text(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return []
    return [f"<h2>Every row of {results.THROUGHPUT} ({len(rows) - 1})</h2>",
            *table_html(rows[0], rows[1:], images, ident="rows", data=True)]


def data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(files.read_bounded(png)).decode("ascii")


def page(title: str, markdown: str, run_dir: Path, charts: list[Path]) -> str:
    images = {str(p.relative_to(run_dir)): data_uri(p) for p in charts if p.is_file()}
    body = [*blocks(markdown.splitlines(), images, Links(run_dir)), *rows_table(run_dir, images)]
    # A policy that lets nothing be fetched, should a report line ever name an outside address.
    policy = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>", f"<style>{STYLE}</style>", "</head><body>",
        *body, f"<script>{SCRIPT}</script>", "</body></html>", ""])


def write_html(run_dir: Path, title: str, markdown: str, charts: list[Path]) -> Path:
    path = run_dir / HTML
    results.write_atomic(path, page(title, markdown, run_dir, charts))
    return path
