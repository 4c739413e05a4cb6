"""report.md from the sections, the charts beside it, and ``ruler report``'s entry point."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.record import results
from engine.report.methods import files, methods
from engine.report.run import ReportError, RunView, load_run
from engine.report.sections import controls, header, summary
from engine.report.windows import windows

REPORT = "report.md"
CHARTS_SKIPPED = "charts skipped: install ruler[report]"


CAPTIONS = {"tok-s": "Aggregate tok/s per window and class (bars: median rep; whiskers: the rep "
            "range)", "acceptance": "Acceptance length and rate per class",
            "control-drift": "The control across sessions (whiskers: the rep range)"}


def charts_section(view: RunView, charts: list[Path], note: str) -> list[str]:
    out = ["## Charts", ""]
    if note:
        return out + [note, ""]
    if not charts:
        return out + ["No chart: no throughput rows to draw.", ""]
    for path in charts:
        cap = next((v for k, v in CAPTIONS.items() if k in path.name), path.stem)
        out += [f"![{cap}]({path.relative_to(view.dir)})", "", f"*{cap}.*", ""]
    return out


def render(view: RunView, charts: list[Path], note: str) -> str:
    sections = [header(view), summary(view), controls(view), windows(view),
                charts_section(view, charts, note), methods(view), files(view)]
    return "\n".join(line for s in sections for line in s).rstrip() + "\n"


def make_charts(view: RunView) -> tuple[list[Path], str]:
    """The PNGs, or none and the reason: matplotlib is the optional extra ruler[report]."""
    try:
        from engine.report import charts

        return charts.render_all(view), ""
    except ImportError as e:
        if not (e.name or "").startswith("matplotlib"):
            raise  # a broken install of ours is a bug to see, not a missing extra
        return [], CHARTS_SKIPPED


def write_report(run_dir: str | Path) -> tuple[Path, list[Path], str]:
    """report.md and the charts; returns (report path, chart paths, a note when charts skipped)."""
    view = load_run(run_dir)
    charts, note = make_charts(view)
    path = view.dir / REPORT
    results.write_atomic(path, render(view, charts, note))
    return path, charts, note


def cmd_report(run_dir: str) -> int:
    try:
        path, charts, note = write_report(run_dir)
    except ReportError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"report: {path}")
    for c in charts:
        print(f"chart:  {c} ({c.stat().st_size} bytes)")
    if note:
        print(note)
    return 0
