"""Hostile text for the escaping tests, and the oracles that read a report as its readers do.

``poisoned`` gives a recorded run (tests/fixtures/runs/demo-smollm2) that text wherever a campaign
file or a server fills one: its description, axes, flag values, the journal's reasons, errors,
summaries, boot facts, a rejection's lines, a parity verdict, a sweep, a capacity search.

``HOSTILE``: text a server or a campaign could hold, mixing what makes markdown and HTML act (links
and images to ``javascript:``, raw tags with handlers, reference definitions, code fences, table
bars, line breaks) with arbitrary text. Every payload that would run names :data:`MARK`, so a page
that ran one is known by it.

``markdown_refs`` reads report.md as a CommonMark + tables renderer does (markdown-it-py, link
validation off: every link the text makes, whatever its scheme) and returns its links, images and
raw HTML; ``html_refs`` reads report.html's tags and attributes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

MARK = "PWNED"
PAYLOADS = [
    f"[x](javascript:{MARK}(1))", f"[x](javascript:{MARK}%28%29)", f"![i](javascript:{MARK})",
    f"[x]( javascript:{MARK} )",
    f"<img src=x onerror={MARK}()>", f"<script>{MARK}()</script>", f"<a href='javascript:{MARK}'>a</a>",
    f"[r]: javascript:{MARK}", "[r]", f"<javascript:{MARK}>", f"[x](data:text/html,<script>{MARK}</script>)",
    f"&#106;avascript:{MARK}", f"[x](&#106;avascript:{MARK})", f"<svg onload={MARK}()>",
    f"[x](//evil.example/{MARK})", f"![i](http://evil.example/{MARK}.png)", "`", "``", "|", "\\|", "\\",
    "\n", "\r\n", "\n\n", "# ", "- ", "> ", "```\n", "    ", "**", "_", "*", "](", "![", "<", ">", "&",
    "\x1b]0;t\x07", "\u202e",
]
HOSTILE = st.lists(st.one_of(st.sampled_from(PAYLOADS), st.text(max_size=12)), min_size=1,
                   max_size=6).map("".join)


def _tokens(tokens: list[Token]) -> Iterator[Token]:
    for t in tokens:
        yield t
        yield from _tokens(t.children or [])


def markdown_refs(text: str) -> tuple[list[str], list[str], list[str]]:
    """(link targets, image sources, raw HTML) of a markdown document, as CommonMark with tables
    renders it; no link is dropped for its scheme, so a javascript: one is seen."""
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.validateLink = lambda url: True  # type: ignore[method-assign]  # see every link, any scheme
    links, images, raw = [], [], []
    for t in _tokens(md.parse(text)):
        if t.type == "link_open":
            links.append(str(t.attrGet("href") or ""))
        elif t.type == "image":
            images.append(str(t.attrGet("src") or ""))
        elif t.type in ("html_inline", "html_block"):
            raw.append(t.content)
    return links, images, raw


class HtmlRefs(HTMLParser):
    """Every tag of a page with its attributes, and the text of its scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def html_refs(page: str) -> HtmlRefs:
    parsed = HtmlRefs()
    parsed.feed(page)
    return parsed


# The journal's fields that hold what a server said, what a campaign said, or a word ruler would
# write but a damaged journal may hold instead (a status, a verdict): the report prints them all.
TEXT_FIELDS = {"axis", "reason", "error", "metrics_rejected", "summary", "value", "image", "image_id",
               "verdict", "spread_why", "spread_shape", "precision_status", "campaign", "server"}


def poisoned(run: Path, text: str) -> None:
    """The demo run with ``text`` wherever a campaign or a server put words."""
    raw = yaml.safe_load((run / "campaign.yaml").read_text())
    raw["description"] = text
    for i, w in enumerate(raw["windows"]):
        w["axis"] = f"{text} {i}"
        for flag in list(w.get("change", {}).get("args", {})):
            w["change"]["args"][flag] = text
    raw["control"]["env"] = {"NOTE": text}
    (run / "campaign.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    lines = []
    for line in (run / "journal.jsonl").read_text().splitlines():
        e = json.loads(line)
        for k in TEXT_FIELDS & set(e):
            if isinstance(e[k], str):
                e[k] = text
        if e["kind"] == "window_started" and e["window"] != "control":
            e["axis"] = text
            if e["window"] == "block5":
                e["stack"] = text  # a window on another stack, named as the journal says
        if e["kind"] == "run_started":  # a sweep of two of the windows, its values as written
            e["sweeps"] = {"sw": {"axis": text, "control": text, "windows": {"block5": text, "ngram": text}}}
        lines.append(json.dumps(e))
    last = json.loads(lines[-1])
    extra: list[dict[str, Any]] = [
        {"kind": "parity", "session": "s1", "window": "block5", "reference": "llamacpp",
         "stack": text, "classes": {"prose": {"verdict": text, "identical": False, "prompts": 1,
                                              "differing": 0, "failed": 1}}},
        {"kind": "command", "cmd": "rerun", "args": [f"s1-block5/{text}"], "reply": text},
        *({"kind": "capacity", "session": "s1", "window": w, "class": "prose", "over": "concurrency",
           "criteria": text, "found": "bracketed", "lo": 1, "hi": 4, "mixed": [],
           "probes": [{"load": 1, "probe": text, "held": 3, "reps": 3}]} for w in ("control", "block5"))]
    lines += [json.dumps({"seq": last["seq"] + i, "ts": last["ts"], **e}) for i, e in enumerate(extra, 1)]
    (run / "journal.jsonl").write_text("\n".join(lines) + "\n")
    (run / "state.snapshot.json").unlink(missing_ok=True)
    facts = run / "windows" / "s1-block5" / "boot-facts.json"
    data = json.loads(facts.read_text())
    data["diff_vs_control"] = {"changed": {f"k{text}": [text, text]}, "equal": []}
    facts.write_text(json.dumps(data))
    (run / "windows" / "s2-qv8" / "rejection.txt").write_text(
        f"reason: {text}\n\nerror lines (verbatim):\n{text}\n```\n{text}\n\n")
    (run / "drift.json").write_text(json.dumps({"rows": [{"session": text, "class": text, "concurrency": 1,
                                                          "delta_pct": 1.0, "against": text,
                                                          "verdict": text}]}))
