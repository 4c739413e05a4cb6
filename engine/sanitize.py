"""Text from outside ruler (a server's log lines, error bodies and stream text, an operator's command
arguments, a campaign's axis) made inert for where it is written: one function per destination.

- :func:`terminal`: a terminal or a log pane. Every control character (C0 but tab, DEL, C1) and the
  bidirectional overrides are shown as escapes (``\\x1b``), so an OSC cannot retitle a pane, a CSI
  cannot clear the screen and a CR or LF cannot forge a line of its own.
- :func:`markdown`: report.md (and report.html, made from its lines). The text, terminal-safe, as
  plain words when it is only those, else as one code span: no heading, link, HTML tag or table
  cell starts inside it.
- :func:`csv_cell`: a CSV cell. Terminal-safe, and a text a spreadsheet would run as a formula
  (``=``, ``+``, ``-``, ``@``, tab; a CR is already shown as ``\\x0d``) gets a leading ``'``
  (OWASP's CSV injection advice); numbers stay. :func:`csv_document` writes every CSV ruler
  writes (throughput.csv, verdicts.csv) with it, and :func:`csv_text` reads a cell back as written.

In the bottom layer: the record, the report, the commands and the console all write such text.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# C0 but tab, DEL, C1; the bidi embeddings, overrides and isolates (text that reads other than
# it is stored); the line and paragraph separators (a line break in some terminals and viewers).
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_FORMULA = ("=", "+", "-", "@", "\t")
# Characters no markdown or HTML construct starts with, mid-line: letters, digits, _ and these;
# brackets too (an interval, "[-2.0, +3.0]") unless one closes into what makes a link or a
# reference definition: "](", "][" or "]:".
_PLAIN = re.compile(r"(?:[\w .,:;=+\-/%()@'\[]|\](?![(\[:]))*")


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal(text: object) -> str:
    """``text`` with every character a terminal would act on shown as its escape instead."""
    return _UNSAFE.sub(_shown, str(text))


class Md(str):
    """Markdown ruler wrote, whose links, emphasis and code are meant: what :func:`markdown` and
    :func:`code` return, and a line ruler composes of them and its own words. Any other text a
    document's table takes is escaped there (engine.report.text.table)."""

    __slots__ = ()


def markdown(text: object) -> Md:
    """``text`` as inert markdown, for the middle of a line or a table's cell: as it is when every
    character is plain (words, numbers, spaces, a few punctuation marks, brackets that make no
    link: ``5``, ``q4_0``, ``+1.0 % [-2.0, +3.0]``), else
    one code span (empty text: nothing), which shows it exactly as it is. In a span a backtick
    would end it, so it becomes ``'``; a ``|`` would end a table cell, so it is escaped as tables
    need. The one escaping path of every text from outside ruler (a server, a campaign, an
    operator) that reaches report.md, report.html or tune.md."""
    s = terminal(text)
    return Md(s) if _PLAIN.fullmatch(s) else code(s)


def code(text: object) -> Md:
    """``text`` as one inert code span, plain or not (a name the report sets in code type)."""
    s = terminal(text).replace("`", "'").replace("|", "\\|")
    return Md(f"`{s}`" if s.strip() else "")


def csv_cell(value: Any) -> Any:
    """A CSV cell's value: a number as it is, a text terminal-safe and never a formula."""
    if not isinstance(value, str):
        return value
    s = terminal(value)
    return "'" + s if _quoted(s) else s


def csv_text(cell: str) -> str:
    """A CSV cell as ruler wrote the text: :func:`csv_cell`'s quote before a formula taken off."""
    return cell[1:] if cell.startswith("'") and _quoted(cell[1:]) else cell


def _quoted(s: str) -> bool:
    """Whether :func:`csv_cell` quotes ``s``: a formula, or a text that would read back as one
    once its own leading quotes are taken for ruler's (``'=x`` is written ``''=x``)."""
    bare = s.lstrip("'")
    return bare.startswith(_FORMULA) and not _number(bare)


def _number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def csv_document(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """Every CSV ruler writes: ``columns`` as its header, then each row's values under them
    (others left out), None as an empty cell, every other through :func:`csv_cell`."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow(["" if (v := row.get(k)) is None else csv_cell(v) for k in columns])
    return buf.getvalue()


def terminal_lines(text: object) -> str:
    """``text`` of several lines (a message, a table) for a terminal: each line :func:`terminal`,
    the LFs between them kept; a CR is shown, never taken for a line break."""
    return "\n".join(map(terminal, str(text).split("\n")))
