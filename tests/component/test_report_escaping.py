"""Issue 49's escaping property: whatever text a server or a campaign holds, report.md and
report.html make no link, image or HTML of their own out of it. Links are ruler's alone: a receipt
the run directory holds, or an http(s) page; images its own charts.

A recorded run (the demo's) is given hostile text in every field a campaign file or a server
fills: the campaign's description, each window's axis, its flags' values, the journal's reasons,
errors, verdict summaries, boot facts, a rejection's verbatim lines, a parity verdict. report.md
is then read as a CommonMark renderer reads it, report.html as a browser parses it (and, in a real
browser with every link clicked: tests/integration/test_report.py)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from engine.report import html
from engine.report.render import render
from engine.report.run import load_run
from tests.hostile import HOSTILE, MARK, PAYLOADS, html_refs, markdown_refs, poisoned
from tests.paths import FIXTURES

DEMO = FIXTURES / "runs" / "demo-smollm2"


def allowed_link(run: Path, target: str) -> bool:
    if re.fullmatch(r"https?://[^\s]+", target):
        return MARK not in target
    return (not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|/|\\", target) and ".." not in target.split("/")
            and (run / target).exists())


def assert_inert(run: Path, markdown: str, page: str, text: str) -> None:
    links, images, raw = markdown_refs(markdown)
    assert raw == [], (text, raw)
    assert images == [], (text, images)  # no chart drawn here: none at all
    assert all(allowed_link(run, t) for t in links), (text, links)
    parsed = html_refs(page)
    allowed_tags = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "h5", "h6",
                    "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "code", "b", "i", "a",
                    "img", "script", "pre"}
    for tag, attrs in parsed.tags:
        assert tag in allowed_tags, (text, tag)
        assert not any(k.startswith("on") for k in attrs), (text, tag, attrs)
        if tag == "a":
            assert allowed_link(run, attrs.get("href", "")), (text, attrs)
        if tag == "img":
            assert attrs.get("src", "").startswith("data:image/png;base64,"), (text, attrs)
        assert all(MARK not in v for v in attrs.values()), (text, tag, attrs)
    assert [t for t, _ in parsed.tags].count("script") == 1 and not any(MARK in s for s in parsed.scripts)


def report_of(run: Path) -> tuple[str, str]:
    view = load_run(run)
    assert view.campaign is not None, view.campaign_note  # every section written, the methods too
    markdown = render(view, [], "")
    return markdown, html.page("t", markdown, run, [])


def test_every_payload_at_once_is_inert(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    text = " ".join(PAYLOADS)
    poisoned(run, text)
    markdown, page = report_of(run)
    assert "PWNED" in markdown and "PWNED" in page  # the text is shown, as text
    assert_inert(run, markdown, page, text)


@pytest.mark.timeout(900)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=HOSTILE)
def test_no_campaign_or_server_text_makes_a_link_image_or_tag_of_its_own(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(DEMO, run)
        poisoned(run, text)
        markdown, page = report_of(run)
        assert_inert(run, markdown, page, text)
