"""The report's acceptance: length and rate with their interval across reps, and per draft
position a table and a chart, each window's curve beside its session's control's."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from engine.report import acceptance, chartdata, charts
from engine.report.run import Row, RunView, load_run
from engine.report.text import acceptance_text
from engine.words import CONTROL
from tests.paths import FIXTURES

DEMO = FIXTURES / "runs" / "demo-smollm2"


def view_with_curves(tmp_path: Path) -> RunView:
    """The demo run (recorded before per-position acceptance) with a curve on its drafting rows:
    the control's one, every window's another; the intervals on the control's rows only."""
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    view = load_run(run)
    def curve(r: Row) -> str:
        return ("0.70 0.45 0.20" if r.window == CONTROL else "0.60 0.30 0.10") if r.accept_len else ""
    rows = [dataclasses.replace(r, accept_per_pos=curve(r),
                                accept_len_lo=2.1 if r.window == CONTROL else None,
                                accept_len_hi=2.4 if r.window == CONTROL else None) for r in view.rows]
    return dataclasses.replace(view, rows=rows)


def test_length_and_rate_carry_their_interval(tmp_path: Path) -> None:
    view = view_with_curves(tmp_path)
    control = next(r for r in view.rows if r.window == CONTROL and r.accept_len)
    assert acceptance_text(control) == f"{control.accept_len:.2f} [2.10, 2.40] / {control.accept_rate:.3f}"


def test_the_table_puts_each_curve_beside_its_control(tmp_path: Path) -> None:
    view = view_with_curves(tmp_path)
    lines = acceptance.section(view)
    assert lines[0] == "## Acceptance per draft position"
    window = next(r for r in view.rows if r.window != CONTROL and r.accept_len)
    start = f"| {window.session} | {window.window} | {window.cls} | {window.load} |"
    row = next(ln for ln in lines if ln.startswith(start))
    assert row.endswith("| 0.60 0.30 0.10 | 0.70 0.45 0.20 |")


def test_no_section_without_a_curve(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    view = load_run(run)
    assert acceptance.section(view) == [] and chartdata.curve_data(view) is None


def test_the_chart_has_a_panel_per_class_and_load_with_the_control_marked(tmp_path: Path) -> None:
    view = view_with_curves(tmp_path)
    data = chartdata.curve_data(view)
    assert data is not None
    shapes = {r.shape for r in view.rows if r.accept_per_pos}
    assert len(data["panels"]) == len(shapes)
    for panel in data["panels"]:
        controls = [ln for ln in panel["lines"] if ln["control"]]
        assert controls and all(ln["ys"] == [0.7, 0.45, 0.2] for ln in controls)
    job = next(j for j in charts.jobs(view) if j.name == "accept-pos")
    assert charts.draw(job).exists()
