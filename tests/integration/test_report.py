"""ruler report on real runs of the testbed: every number checked against the receipts.

The two small real runs (llama-server as a process) are tests/integration/report_runs.py's, built
once per test session and shared with tests/integration/test_compare.py.
"""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from engine.method.boots import CONTROL_CONFIG, Boot, fit
from engine.method.verdict import versus
from engine.record.fold import fold
from engine.record.journal import read_events
from engine.report import (
    CHARTS_SKIPPED,
    REPORT,
    cmd_report,
    delta,
    load_run,
    pct,
    receipt_rep_tok_s,
    tok,
    write_report,
)
from engine.report.text import judgement_of
from tests.hostile import HOSTILE, MARK, PAYLOADS, poisoned
from tests.integration.report_runs import POLICY_A, POLICY_B, csv_rows, recomputed
from tests.paths import FIXTURES

DEMO = FIXTURES / "runs" / "demo-smollm2"  # a recorded run: its report needs no testbed

# The first test to ask for a run pays for building it (minutes on a busy 2-core box): the
# 900 s per-test default would cut a session-scoped build short; the module is slow for it.
pytestmark = [pytest.mark.timeout(3600), pytest.mark.slow]


@pytest.fixture(scope="session")
def report_a(run_a: Path) -> str:
    write_report(run_a)
    return (run_a / REPORT).read_text()


# ------------------------------------------------------------------------------ helpers


def md_cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def md_table(text: str, heading: str) -> list[dict[str, str]]:
    """The first markdown table after a heading line, as dicts by header (pipes unescaped)."""
    lines = text.splitlines()
    i = lines.index(heading)
    while not lines[i].startswith("|"):
        i += 1
    head = md_cells(lines[i])
    rows: list[dict[str, str]] = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(head, md_cells(ln), strict=True)))
    return rows


def section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    level = heading.split(" ")[0]
    rest = text[start + len(heading) + 1:]
    ends = [rest.find(f"\n{h} ") for h in ("#" * n for n in range(1, len(level) + 1))]
    ends = [e for e in ends if e >= 0]
    return rest[:min(ends)] if ends else rest


def pick(rows: list[dict[str, str]], cls: str, c: int) -> dict[str, str]:
    return next(r for r in rows if r["class"] == cls and r["C"] == str(c))


# ------------------------------------------------------------------------------ tests




def across(row: dict[str, Any], name: str, spec: str) -> str:
    """A figure's interval across the reps as the table writes it after the figure ("": none)."""
    lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
    return f" [{lo:{spec}}, {hi:{spec}}]" if lo is not None and hi is not None else ""


def test_control_table_is_recomputed_from_the_receipts(run_a: Path, report_a: str) -> None:
    table = md_table(report_a, "### s1: control")
    assert {(r["class"], r["C"]) for r in table} == {("prose", "1"), ("prose", "2"), ("code", "1"),
                                                     ("code", "2")}
    for cls in ("prose", "code"):
        for c in (1, 2):
            again = recomputed(run_a, ("s1", "control", cls, c), POLICY_A)
            cells = pick(table, cls, c)
            assert cells["tok/s"] == tok(again["agg_tok_s"])
            assert cells["per user"] == tok(again["per_user_tok_s"])
            assert cells["spread"] == pct(again["spread"])
            assert cells["reps tok/s"] == ", ".join(tok(v) for v in again["rep_tok_s"])
            assert cells["accept len / rate"] == (
                f"{again['accept_len']:.2f}{across(again, 'accept_len', '.2f')} / "
                f"{again['accept_rate']:.3f}{across(again, 'accept_rate', '.3f')}")
            assert cells["status"] == again["status"]


def test_window_deltas_against_the_sessions_control(run_a: Path, report_a: str) -> None:
    table = md_table(report_a, "### s1-block5: draft block 5")
    for cls in ("prose", "code"):
        w = recomputed(run_a, ("s1", "block5", cls, 1), POLICY_A)
        ctl = recomputed(run_a, ("s1", "control", cls, 1), POLICY_A)
        # The noise between boots at C1 and the class: each session's control once and block5
        # once measure none (a level per session, an effect for block5: no residual), so the
        # campaign's declared 5 % stands in, with the reps' own noise.
        boots = [Boot(s, CONTROL_CONFIG if win == "control" else win,
                      tuple(recomputed(run_a, (s, win, cls, 1), POLICY_A)["rep_tok_s"]))
                 for s, win in (("s1", "control"), ("s2", "control"), ("s1", "block5"))]
        noise = fit(boots, 0.05).noise
        assert noise.source == "declared"
        v = versus(w["rep_tok_s"], [ctl["rep_tok_s"]], noise)
        assert v is not None and v.interval() is not None
        lo, hi = v.interval()  # type: ignore[misc]  # checked above
        cells = pick(table, cls, 1)
        assert cells["tok/s"] == tok(w["agg_tok_s"]) and cells["control"] == tok(ctl["agg_tok_s"])
        # throughput.csv says the same, from the same reps, and the report its call.
        row = csv_rows(run_a)[("s1", "block5", cls, 1)]
        assert (float(row["delta"]), float(row["delta_lo"]), float(row["delta_hi"])) == (
            round(v.delta, 4), round(lo, 4), round(hi, 4))
        mark = {"observable effect": " effect", "no observable effect": " (no effect)",
                "undetermined": " (undetermined)"}[row["verdict"]]
        # The report prints throughput.csv's figures (checked above against the receipts'), so
        # from them: a delta of 8.745 % is 0.0875 there and +8.8 % here.
        d, dlo, dhi = (float(row[k]) * 100 for k in ("delta", "delta_lo", "delta_hi"))
        assert cells["Δ tok/s [95 % CI], call"] == f"{d:+.1f} % [{dlo:+.1f}, {dhi:+.1f}]{mark}"
        assert row["boot_noise_how"].startswith("declared 5.0 %")
        assert cells["spread (window / control)"] == f"{pct(w['spread'])} / {pct(ctl['spread'])}"
        assert cells["reps tok/s"] == ", ".join(
            tok(v) for v in receipt_rep_tok_s(run_a, csv_rows(run_a)[("s1", "block5", cls, 1)][
                "source"], 1, csv_rows(run_a)[("s1", "block5", cls, 1)]["basis"]))


def test_rejected_window_keeps_the_servers_words(run_a: Path, report_a: str) -> None:
    text = section(report_a, "### s2-qv8: q8_0 V cache without flash attention")
    assert "**Rejected at boot**" in text
    verbatim = (run_a / "windows" / "s2-qv8" / "rejection.txt").read_text()
    line = next(ln for ln in verbatim.splitlines()
                if "quantized V cache requires flash_attn to be enabled" in ln)
    assert f"\n{line}\n" in text  # verbatim, in the fenced block
    assert "[rejection.txt](windows/s2-qv8/rejection.txt)" in text
    glance = md_table(report_a, "## Windows at a glance")
    qv8 = next(r for r in glance if r["window"] == "s2-qv8")
    assert qv8["status"] == "rejected" and qv8["greedy"] == "rejected"


def test_verdicts_come_from_the_journal(run_a: Path, report_a: str) -> None:
    ws = fold(read_events(run_a / "journal.jsonl")).windows["s1-block5"]
    greedy, tf = ws.verdicts["greedy"], ws.verdicts["teacher_forced"]
    glance = next(r for r in md_table(report_a, "## Windows at a glance") if r["window"] == "s1-block5")
    assert glance["greedy"] == f"{greedy['figures']['identical']}/{greedy['figures']['n']}"
    assert glance["|Δlogp| p99"] == f"{tf['figures']['p99']:.3g}"
    assert glance["ruler check"] == "ruler suspect"  # SmolLM2's template ignores enable_thinking
    assert glance["no observable effect"] == ws.verdicts["no_effect"]["verdict"]
    text = section(report_a, "### s1-block5: draft block 5")
    assert f"- **greedy**: {greedy['summary']}" in text or f"- **greedy**: {greedy['verdict']}: " \
        f"{greedy['summary']}" in text
    assert "[teacher-forced.json](windows/s1-block5/teacher-forced.json)" in text
    assert "RULER SUSPECT: chat_template_kwargs" in text
    assert "`spec.n_max` 5 vs 7" in text  # the boot fact the axis changes
    assert "server.url" not in text  # a per-boot fact is not a difference


def test_controls_and_drift(run_a: Path, report_a: str) -> None:
    rows = csv_rows(run_a)
    ctl = md_table(report_a, "## Controls")
    s2 = next(r for r in ctl if r["session"] == "s2")
    p1 = rows[("s2", "control", "prose", 1)]
    assert s2["prose C1 tok/s (spread)"] == f"{tok(float(p1['agg_tok_s']))} ({pct(float(p1['spread']))})"
    top = rows[("s2", "control", "code", 2)]
    assert s2["code C2 agg / per user (spread)"] == (
        f"{tok(float(top['agg_tok_s']))} / {tok(float(top['per_user_tok_s']))} "
        f"({pct(float(top['spread']))}, {top['status']})")
    drift = md_table(report_a, "### Control drift across sessions")
    view = load_run(run_a)
    for cls in ("prose", "code"):
        d = delta(view.rows_of("s2", "control")[(cls, 1, None)],
                  view.rows_of("s1", "control")[(cls, 1, None)], judgement_of(view))
        assert d.lo is not None  # two reps a side: an interval
        assert pick(drift, cls, 1)["s2"].endswith(d.text())
    # Each session's control once and each window in one session: nothing measures the noise
    # between boots, so the campaign's declared 5 % stands in at each class and load, and says so.
    noise = md_table(report_a, "### Noise between boots")
    shapes = {(k, c) for k in ("prose", "code") for c in ("C1", "C2")}
    assert {(r["class"], r["load"]) for r in noise} == shapes
    assert all(r["how"].startswith("declared 5.0 %") for r in noise)
    assert "`drift.json`" in report_a if (run_a / "drift.json").exists() else True


def test_methods_say_how_it_was_measured(run_a: Path, report_a: str) -> None:
    methods = section(report_a, "## Methods")
    env = json.loads((run_a / "env.json").read_text())
    assert f"**ruler**: {env['ruler_version']}" in methods
    assert env["host"]["node"] in methods and f"{env['host']['cpus']} CPUs" in methods
    assert "2 reps per shape" in methods and "max_tokens 12" in methods
    assert "a row wider than 0.01 % is *leak-shaped* when its lowest rep" in methods
    assert "At C >= 2 only a leak-shaped row is void, rewarmed and rerun (up to 1 times)" in methods
    assert "Rows of fewer than 3 reps are not judged" in methods  # 2 reps here: none voided
    assert "one warm pass" in methods and "- **Steady state**: " in methods
    assert '{"chat_template_kwargs": {"enable_thinking": false}}' in methods
    flags = md_table(report_a, "### Flags per window")
    block5 = next(r for r in flags if r["window"] == "s1-block5")
    assert block5["change vs control"] == "`--spec-draft-n-max 5` (control `--spec-draft-n-max 7`)"
    assert "--spec-draft-n-max 5" in block5["argv"] and "-fa off" in block5["argv"]
    qv8 = next(r for r in flags if r["window"] == "s2-qv8")
    assert "--cache-type-v q8_0" in qv8["argv"]


def test_charts_are_written(run_a: Path, report_a: str) -> None:
    pytest.importorskip("matplotlib")
    names = ["report-delta.png", "report-latency.png", "report-tok-s.png", "report-acceptance.png",
             "report-accept-pos.png", "report-control-drift.png"]
    for name in names:
        data = (run_a / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
        assert f"]({name})" in report_a
        print(f"{name}: {len(data)} bytes")
    assert CHARTS_SKIPPED not in report_a


def test_report_without_the_plotting_extra(run_a: Path, report_a: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The missing extra is simulated in-process: sys.modules["matplotlib"] = None makes every
    ``import matplotlib`` raise ImportError, as on an install without ruler[report]."""
    copy = tmp_path / run_a.name
    shutil.copytree(run_a, copy, ignore=shutil.ignore_patterns("report*"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for mod in [m for m in sys.modules if m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, mod, None)
    assert cmd_report(str(copy)) == 0
    text = (copy / REPORT).read_text()
    assert CHARTS_SKIPPED in section(text, "## Charts")
    assert not list(copy.glob("*.png"))
    with_charts = report_a
    # Every table is there all the same: the text differs only in the charts section.
    for heading in ("## Windows at a glance", "### s1: control", "### s1-block5: draft block 5",
                    "### Flags per window"):
        assert md_table(text, heading) == md_table(with_charts, heading)


def test_run_without_quality_receipts_says_not_measured(run_b: Path) -> None:
    path, charts, note = write_report(run_b)
    text = path.read_text()
    if not note:  # with the extra: one session booted the control once, so no drift chart
        assert [c.name for c in charts] == ["report-delta.png", "report-latency.png",
                                            "report-tok-s.png", "report-acceptance.png",
                                            "report-accept-pos.png"]
    glance = md_table(text, "## Windows at a glance")
    assert glance[0]["window"] == "s1-draft5"
    assert glance[0]["greedy"] == "not measured" and glance[0]["no observable effect"] == "not measured"
    assert "quality checks: not measured (quality checks off in the campaign)" in text
    assert "**Quality**: off" in text
    table = md_table(text, "### s1-draft5: draft block 5")
    again = recomputed(run_b, ("s1", "draft5", "prose", 2), POLICY_B)
    assert pick(table, "prose", 2)["tok/s"] == tok(again["agg_tok_s"])


# ------------------------------------------------------------------------------ report.html

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(page: Path, work: Path, *args: str) -> tuple[str, list[str]]:
    """Debian's Chromium, headless, on ``page``: what it printed (the DOM after its scripts ran,
    with --dump-dom) and every request the page made, from Chromium's own net log (those whose
    network isolation key is the file's: the browser's own background requests are not the
    page's)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Chromium is not installed: apt-get install chromium (.ci/run installs it)"
    net = work / "net.json"
    proc = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={work / 'profile'}",
                           f"--log-net-log={net}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = json.loads(net.read_text())
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    requests = [e["params"]["url"] for e in log["events"]
                if names.get(e["type"]) == "URL_REQUEST_START_JOB"
                and "file://" in str(e.get("params", {}).get("network_isolation_key", ""))]
    return proc.stdout, requests


class Rows(HTMLParser):
    """The rows of each table of a page, by its id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, int]] = []
        self.body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append((dict(attrs).get("id") or "", 0))
        elif tag == "tbody":
            self.body = True
        elif tag == "tr" and self.body:
            ident, n = self.tables[-1]
            self.tables[-1] = (ident, n + 1)

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self.body = False


def test_the_html_report_in_headless_chromium(run_a: Path, report_a: str, tmp_path: Path) -> None:
    """report.html opened in a real browser: it renders (a screenshot), every row of throughput.csv
    is in its table once the page's script ran, and nothing is fetched while it is viewed."""
    pytest.importorskip("matplotlib")
    assert cmd_report(str(run_a), as_html=True) == 0
    page = run_a / "report.html"
    shot = tmp_path / "report.png"
    _, requests = chromium(page, tmp_path / "shot", f"--screenshot={shot}", "--window-size=1280,2000")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert requests == []
    dom, requests = chromium(page, tmp_path / "dom", "--dump-dom")
    assert requests == []
    parsed = Rows()
    parsed.feed(dom)
    tables = dict(parsed.tables)
    with (run_a / "throughput.csv").open(newline="") as f:
        rows = len(list(csv.DictReader(f)))
    assert tables["rows"] == rows > 0
    # The report's own tables came through: one row per window at a glance, every chart inlined.
    assert sum(n for ident, n in parsed.tables if not ident) > rows
    assert dom.count('src="data:image/png;base64,') == len(list(run_a.glob("report-*.png")))
    assert not re.search(r'(src|href)="(https?:)?//', dom)


# Added to a copy of the page: once it has loaded, where its parts lie, as the page's attribute.
LAYOUT = """<script>window.addEventListener("load", function () {
  var charts = document.getElementById("charts"), chart = document.querySelector("img");
  var after = Array.prototype.find.call(document.querySelectorAll("table"), function (t) {
    return charts.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING; });
  function top(el) { return el.getBoundingClientRect().top + window.scrollY; }
  document.body.setAttribute("data-layout", JSON.stringify({
    glance: top(document.getElementById("windows-at-a-glance")), chart: top(chart),
    chart_end: top(chart) + chart.getBoundingClientRect().height, chart_alt: chart.alt,
    table: top(after), page: document.documentElement.scrollHeight}));
});</script>"""


def test_the_html_report_opens_on_the_glance_table_and_the_delta_chart(tmp_path: Path) -> None:
    """Laid out by a real browser at 1280 x 2000: the first screen holds the windows at a glance
    and the whole delta chart; the tables of figures come after it (they came first, and the
    charts began 9,300 px down the page)."""
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    assert cmd_report(str(run), as_html=True) == 0
    probe = run / "probe.html"
    probe.write_text((run / "report.html").read_text().replace("</body>", LAYOUT + "</body>"))
    dom, requests = chromium(probe, tmp_path / "layout", "--window-size=1280,2000",
                             "--virtual-time-budget=5000", "--dump-dom")
    assert requests == []
    found = re.search(r'data-layout="([^"]+)"', dom)
    assert found, dom[-2000:]
    at = json.loads(html.unescape(found[1]))
    assert at["chart_alt"].startswith("Each window against its session's control"), at
    assert at["glance"] < at["chart"] < at["chart_end"] <= 2000 < at["page"], at
    assert at["chart_end"] < at["table"], at


def test_the_net_log_sees_a_page_that_fetches(tmp_path: Path) -> None:
    """The check above can fail: a page with an image from elsewhere is caught making the request."""
    page = tmp_path / "fetches.html"
    page.write_text('<html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    _, requests = chromium(page, tmp_path / "fetch", "--dump-dom")
    assert requests == ["http://127.0.0.1:9/x.png"]


# A page's scripts are given this first: a payload that runs calls it, and it marks the page.
TRIP = ("<script>window.PWNED = function () { document.documentElement.setAttribute('data-pwned', "
        "'1'); };</script>")
# Then, once the page has loaded, every link is clicked: a javascript: one runs its script; any
# other is kept from leaving the page (the check reads this page's DOM).
CLICK_ALL = ("<script>window.addEventListener('load', function () {"
             " document.querySelectorAll('a').forEach(function (a) {"
             "  a.addEventListener('click', function (e) {"
             "   if (!/^javascript:/i.test(a.getAttribute('href') || '')) { e.preventDefault(); } });"
             "  a.click(); }); });</script>")


def ran_a_payload(page: Path, work: Path) -> bool:
    """Whether any script a payload carries ran when ``page`` was opened in Chromium and every link
    on it clicked (the page's copy, with the trip and the clicks added, is what is opened)."""
    text = page.read_text()
    armed = work / f"armed-{page.name}"
    work.mkdir(parents=True, exist_ok=True)
    armed.write_text(text.replace("<head>", "<head>" + TRIP, 1).replace("</body>", CLICK_ALL + "</body>", 1))
    dom, _ = chromium(armed, work / "profile-run", "--dump-dom", "--virtual-time-budget=3000")
    return 'data-pwned="1"' in dom


def test_the_trip_sees_a_page_whose_markup_runs(tmp_path: Path) -> None:
    """The check below can fail: a page with a javascript: link, or an image whose handler runs,
    is caught, each on its own."""
    for i, body in enumerate(['<a href="javascript:PWNED()">x</a>', '<img src="x" onerror="PWNED()">']):
        page = tmp_path / f"runs-{i}.html"
        page.write_text(f"<html><head></head><body>{body}</body></html>")
        assert ran_a_payload(page, tmp_path / f"w{i}")


def report_ran_a_payload(run: Path, text: str, work: Path) -> bool:
    shutil.copytree(DEMO, run)
    poisoned(run, text)
    assert cmd_report(str(run), as_html=True) == 0
    assert (MARK in text) <= (MARK in (run / "report.html").read_text())  # the text is there, as text
    return ran_a_payload(run / "report.html", work)


def test_no_payload_runs_in_the_html_report_in_chromium(tmp_path: Path) -> None:
    """Issue 49: a campaign's description, axes and flag values, and what a server said (reasons,
    errors, a parity cell from a /tokenize error body, boot facts), made of markdown links to
    javascript:, raw tags with handlers and the rest (tests.hostile): report.html opened in
    Chromium with every link clicked runs none of it."""
    assert not report_ran_a_payload(tmp_path / "run", " ".join(PAYLOADS), tmp_path / "work")


@settings(max_examples=2, deadline=None, database=None)  # each a report and a browser; PAYLOADS whole above
@given(text=HOSTILE)
def test_no_hostile_text_runs_in_the_html_report_in_chromium(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        assert not report_ran_a_payload(Path(tmp) / "run", text, Path(tmp) / "work"), text
