"""``ruler report`` on a day-long journal: the events it reads are found without parsing every
line, each window's are indexed once, and a chart of hundreds of windows stays a screen wide. The
report reads the same as it did when it parsed every event."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.record.fold import fold_read
from engine.record.journal import read_events, read_journal, read_kinds
from engine.report import chartdata, charts
from engine.report.run import REPORTED, RunView, load_run
from engine.report.windows import windows
from tests.paths import FIXTURES, REPO

DEMO = FIXTURES / "runs" / "demo-smollm2"
LINES = (DEMO / "journal.jsonl").read_bytes().splitlines(keepends=True)


def escaped(line: bytes) -> bytes:
    """The same event with its kind written as JSON \\u escapes (a hand-written line may)."""
    e = json.loads(line)
    kind = "".join(f"\\u{ord(c):04x}" for c in e["kind"])
    return line.replace(json.dumps(e["kind"]).encode(), f'"{kind}"'.encode(), 1)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_kinds_read_are_every_event_of_those_kinds(data: st.DataObject) -> None:
    lines = list(data.draw(st.lists(st.sampled_from(LINES), max_size=60), label="events"))
    for _ in range(data.draw(st.integers(0, 4), label="odd lines")):
        odd = data.draw(st.one_of(
            st.sampled_from(LINES).map(escaped),  # a kind behind escapes
            st.sampled_from([b'{"seq":5,"ts":1,"kind":"boot_fact","key":"\\"window_started\\""}',
                             b'{"seq":6,"kind":"window_started","session":"s","window":"w"}',
                             b'"window_started"', b"not json \\u0041", b""]),
            st.binary(max_size=30).map(lambda b: b.replace(b"\n", b" "))))
        lines.insert(data.draw(st.integers(0, len(lines))), odd.rstrip(b"\n") + b"\n")
    torn = data.draw(st.sampled_from([b"", b'{"seq":9,"ts":1,"kind":"window_star']))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "journal.jsonl"
        path.write_bytes(b"".join(lines) + torn)
        assert read_kinds(path, REPORTED) == [e for e in read_events(path) if e["kind"] in REPORTED]


def test_the_report_reads_as_it_did_from_every_event(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    view = load_run(run)
    read = read_journal(run / "journal.jsonl")
    every = dataclasses.replace(view, events=[e for _, e in read.events], state=fold_read(read))
    assert len(view.events) < len(every.events) / 10
    assert windows(view) == windows(every)
    for ws in every.windows():
        assert view.window_events(ws.session, ws.window) == [
            e for e in every.events if e["kind"] in REPORTED
            and (e.get("session"), e.get("window")) == (ws.session, ws.window)]


def test_a_chart_of_more_windows_than_it_labels_stays_a_screen_wide(tmp_path: Path) -> None:
    from PIL import Image

    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    one = load_run(run)
    # The demo's rows predate the latency percentiles and the per-position acceptance: given
    # some, every chart is drawn.
    # Copies of the demo's windows enough for twice the labels a chart names: past every cap (the
    # width, the labels, the legend's lines); a chart drawn a slot per window would be far wider.
    windows = len({(r.session, r.window) for r in one.rows})
    copies = math.ceil(2 * max(chartdata.MAX_LABELS, chartdata.MAX_LEGEND) / windows)
    rows = [dataclasses.replace(r, session=f"{r.session}r{k}", ttft_p50=40.0 + k, ttft_p99=90.0 + k,
                                tpot_p50=30.0, tpot_p99=60.0,
                                accept_per_pos="0.8 0.6 0.4" if r.accept_len else "")
            for k in range(copies) for r in one.rows]
    many = RunView(run, one.events, one.state, rows, one.campaign, one.raw_campaign, "", one.env)
    jobs = charts.jobs(many)
    assert [job.name for job in jobs] == [n for n in charts.CHARTS if n != "trade"]  # no sweep here
    for job in jobs:
        width, _ = Image.open(charts.draw(job)).size
        assert width <= (chartdata.MAX_WIDTH + 1) * charts.DPI, job.name


def test_the_report_imports_no_run_phase() -> None:
    """``ruler report`` reads receipts: the quality phase (its HTTP probes), the run statistics
    and numpy are not imported for it (0.2-0.3 s of a report's start before)."""
    heavy = ("numpy", "engine.quality.phase", "engine.method.stats", "engine.run.gpuwatch")
    out = subprocess.run([sys.executable, "-c", "import sys, engine.report.render; print(sorted("
                          f"m for m in {heavy!r} if m in sys.modules))"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
