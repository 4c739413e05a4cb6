"""``ruler report``'s charts: drawn by a process of their own while the tables are written, and
kept when the values they are drawn from have not changed (the PNG carries their hash)."""

from __future__ import annotations

import csv
import multiprocessing
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.record import results
from engine.report import CHARTS_SKIPPED, REPORT, ReportError, chartdata, charts, load_run, write_report
from engine.report.text import verdict
from tests.paths import FIXTURES

DEMO = FIXTURES / "runs" / "demo-smollm2"
NAMES = ["report-delta.png", "report-tok-s.png", "report-acceptance.png", "report-control-drift.png"]

pytest.importorskip("matplotlib")


def stamps(run: Path) -> dict[str, int]:
    return {name: (run / name).stat().st_mtime_ns for name in NAMES}


def test_a_chart_is_drawn_again_only_when_its_values_change(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    _, drawn, note = write_report(run)
    assert [p.name for p in drawn] == NAMES and not note
    first, text = stamps(run), (run / REPORT).read_text()
    assert all(charts.stored_key(run / name) for name in NAMES)

    _, kept, _ = write_report(run)  # nothing changed: no chart is written again
    assert kept == drawn and stamps(run) == first and (run / REPORT).read_text() == text

    # One window row's tok/s changes (a rerun landed): its chart only is drawn again.
    lines = list(csv.DictReader((run / results.THROUGHPUT).open(newline="")))
    row = next(r for r in lines if r["window"] != "control")
    row["agg_tok_s"] = str(float(row["agg_tok_s"]) * 2)
    with (run / results.THROUGHPUT).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(lines[0]))
        w.writeheader()
        w.writerows(lines)
    write_report(run)
    now = stamps(run)
    assert now["report-tok-s.png"] != first["report-tok-s.png"]
    assert {k: v for k, v in now.items() if k != "report-tok-s.png"} == {
        k: v for k, v in first.items() if k != "report-tok-s.png"}


def test_a_chart_not_written_by_ruler_is_drawn_again(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    (run / "report-tok-s.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # no key: not ours, or torn
    write_report(run)
    assert charts.stored_key(run / "report-tok-s.png") is not None


def test_a_drawing_that_fails_is_raised_with_its_traceback(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)

    def broken(job: charts.Job) -> Path:
        raise ValueError(f"cannot draw {job.name}")

    monkeypatch.setattr(charts, "draw", broken)  # the drawing process is forked: it has this too
    before = set(multiprocessing.active_children())  # other tests' (the load shards') are left
    with pytest.raises(RuntimeError, match="(?s)drawing the charts failed.*ValueError: cannot draw delta"):
        write_report(run)
    assert not (run / REPORT).exists() and set(multiprocessing.active_children()) <= before


def test_a_directory_that_is_not_a_run_leaves_no_drawing_process(tmp_path: Path) -> None:
    before = set(multiprocessing.active_children())
    with pytest.raises(ReportError):
        write_report(tmp_path)
    assert set(multiprocessing.active_children()) <= before


def test_without_the_extra_the_charts_are_skipped(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The missing extra, simulated: sys.modules["matplotlib"] = None, as on an install without
    ruler[report]."""
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    _, drawn, note = write_report(run)
    assert (drawn, note) == ([], CHARTS_SKIPPED)
    assert CHARTS_SKIPPED in (run / REPORT).read_text() and not list(run.glob("*.png"))


@pytest.mark.parametrize("name", ["demo-smollm2", "compare-a"])
def test_every_legend_is_beside_the_panels_and_inside_the_picture(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A legend over a panel covered its bars. Each chart of a recorded run (the demo's: delta,
    tok/s with drafting's acceptance, the control's drift; compare-a's: latency against the load),
    drawn in this process and laid out again on the Agg canvas, the PNG's: every legend's box
    clear of every panel's, and within the figure (not cut off its edge)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    run = tmp_path / name
    shutil.copytree(FIXTURES / "runs" / name, run)
    save, checked = charts._save, []

    def checking(fig: Any, job: charts.Job) -> Path:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
        for legend in legends:
            box = legend.get_window_extent(renderer)
            for ax in fig.axes:
                assert not box.overlaps(ax.get_window_extent(renderer)), (job.name, ax.get_title())
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, job.name
            assert fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, job.name
        checked.append((job.name, len(legends)))
        return save(fig, job)

    monkeypatch.setattr(charts, "_save", checking)
    for job in charts.jobs(load_run(run)):
        charts.draw(job)
    assert all(n for _, n in checked)  # every chart has a legend: none went unchecked
    assert {"delta", "tok-s"} <= {c for c, _ in checked}
    assert ("acceptance" in dict(checked)) == (name == "demo-smollm2")
    assert ("latency" in dict(checked)) == (name == "compare-a")


def test_the_first_chart_is_each_windows_delta_with_its_interval_then_latency_against_load() -> None:
    """The report's main chart: each window against its control per class and load, the delta
    and interval the report's tables give (engine.report.text.verdict); then TTFT and TPOT at
    p50 and p99 per window against the load; raw tok/s after them."""
    view = load_run(FIXTURES / "runs" / "compare-a")
    assert [j.name for j in charts.jobs(view)] == ["delta", "latency", "tok-s"]
    row = next(r for r in view.rows if r.window == "ctx")
    d = verdict(view, row)
    delta = chartdata.delta_data(view)
    assert delta is not None and delta["groups"] == ["s1-ctx"] and delta["loads"] == ["C1"]
    assert delta["panels"][0]["series"] == [[[0, d.value, d.lo, d.hi, not d.effect]]]
    latency = chartdata.latency_data(view)
    assert latency is not None
    ttft, tpot = latency["panels"]
    assert {x["label"]: (x["p50"], x["p99"]) for x in ttft["lines"]}["s1-ctx"] == (
        [row.ttft_p50], [row.ttft_p99])
    assert {x["label"]: (x["p50"], x["p99"]) for x in tpot["lines"]}["s1-ctx"] == (
        [row.tpot_p50], [row.tpot_p99])
