"""The report's PNG charts, drawn with matplotlib (the optional extra ``ruler[report]``).

Each chart is read from the run first (``jobs``: plain values, no matplotlib) and drawn from
those (``draw``), so the report can hand the drawing to a process of its own and keep a chart
whose values have not changed: the PNG carries the hash of what it was drawn from (``KEY``).
matplotlib is imported inside the drawing functions, so ``engine.report`` imports this module
freely and a missing extra surfaces as an ImportError. Only the object API (``Figure`` on the Agg
canvas) is used: no pyplot, no global backend, no display.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import files
from engine.record import results
from engine.report.chartdata import (
    MAX_LABELS,
    MAX_LEGEND,
    Bar,
    Data,
    acceptance_data,
    curve_data,
    delta_data,
    drift_data,
    latency_data,
    tok_s_data,
    trade_data,
)
from engine.report.run import RunView

DPI = 110
VOID_ALPHA = 0.4  # a void/failed row is drawn faded and hatched: present, not comparable
KEY = "ruler-chart"  # the PNG text chunk holding the hash of what the chart was drawn from


@dataclass(frozen=True)
class Job:
    """One chart to draw: what from, where, and the key its PNG carries."""

    name: str
    data: Data
    path: Path
    key: str


def _figure(width: float, height: float, rows: int = 1, cols: int = 1,
            groups: int = 0) -> tuple[Any, Any]:
    from matplotlib.figure import Figure  # the ImportError the report catches

    if groups <= MAX_LABELS:
        fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        return fig, fig.subplots(rows, cols, squeeze=False)
    # Hundreds of windows, every n-th labelled: fixed margins fit those labels, and the
    # constrained layout's measuring of every artist was a third of the drawing.
    fig = Figure(figsize=(width, height), dpi=DPI)
    axes = fig.subplots(rows, cols, squeeze=False)
    fig.subplots_adjust(left=0.04, right=0.9, bottom=0.12, top=0.93, hspace=0.5, wspace=0.25)
    return fig, axes


def _on_grid(d: dict[str, Any], groups: int = 0) -> tuple[Any, Any]:
    """The figure of a job whose panels sit on a grid (``grid``: rows and columns) at its ``size``."""
    rows, cols = d["grid"]
    width, height = d["size"]
    return _figure(width, height, rows, cols, groups)




def _ticks(ax: Any, labels: Sequence[str], **style: Any) -> None:
    """Every group's tick, or every n-th one's when there are more than ``MAX_LABELS``; then
    only the bottom row of panels has them (the panels above share its groups): the tick
    labels were half of the drawing."""
    if len(labels) > MAX_LABELS and not ax.get_subplotspec().is_last_row():
        ax.set_xticks([])
        return
    step = -(-len(labels) // MAX_LABELS)
    at = range(0, len(labels), step)
    ax.set_xticks(at, [labels[i] for i in at], **style)


def _save(fig: Any, job: Job) -> Path:
    # PNG: SVG of the 800-window charts took three times as long to write and was six times the
    # size (0.9-1 MB). zlib's fastest level: a tenth of the drawing less, PNGs 14 % larger.
    # Through a temporary renamed into place: a report killed mid-write leaves the chart before
    # it or none, never a torn one carrying the key of whole values (kept forever after).
    with results.atomic_file(job.path) as f:
        fig.savefig(f, format="png", metadata={KEY: job.key}, pil_kwargs={"compress_level": 1})
    return job.path




def _grouped(ax: Any, groups: Sequence[str], series: Sequence[str], bars: Sequence[Sequence[Bar]],
             title: str, ylabel: str) -> None:
    """Bars: one group per window, one bar per series (class); ``bars[j]``: series j's bars.

    A series' bars are one collection, not a patch each: thousands of bars (a day-long campaign)
    draw, lay out and place a legend in a second rather than a minute."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    width = 0.8 / max(1, len(series))
    for j, these in enumerate(bars):
        xs = [i + (j - (len(series) - 1) / 2) * width for i, *_ in these]
        hs, los, his, voids = ([b[k] for b in these] for k in (1, 2, 3, 4))
        for void in (False, True):
            boxes = [[(x - width / 2, 0), (x - width / 2, h), (x + width / 2, h), (x + width / 2, 0)]
                     for x, h, v in zip(xs, hs, voids, strict=True) if v is void]
            if boxes:  # a void row is present but not comparable: faded and hatched, in its colour
                faded: dict[str, Any] = {"alpha": VOID_ALPHA, "hatch": "//"} if void else {}
                ax.add_collection(PolyCollection(boxes, facecolors=f"C{j}", edgecolors="none",
                                                 linewidths=0, **faded))
        if not any(los) and not any(his):  # no caps on single values
            continue
        if len(groups) <= MAX_LABELS:
            ax.errorbar(xs, hs, yerr=[los, his], fmt="none", ecolor="k", elinewidth=1, capsize=3)
        else:  # no caps (they would hide the bars); one line broken by NaNs, not a path per bar
            ax.plot([v for x in xs for v in (x, x, math.nan)],
                    [v for h, lo, hi in zip(hs, los, his, strict=True)
                     for v in (h - lo, h + hi, math.nan)], color="k", linewidth=1)
    ax.autoscale_view()
    ax.set_ylim(bottom=0)
    if series:  # beside the panel, never over a bar
        ax.legend(handles=[Patch(color=f"C{j}", label=s) for j, s in enumerate(series)],
                  fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    _ticks(ax, groups, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)  # a window without bars (rejected) keeps its slot
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def draw_bars(job: Job) -> Path:
    """Grouped bars, a panel per ``data["panels"]`` entry, row by row of ``data["grid"]``."""
    d = job.data
    fig, axes = _on_grid(d, len(d["groups"]))
    for ax, panel in zip(axes.flat, d["panels"], strict=True):
        _grouped(ax, d["groups"], d["series"], panel["bars"], panel["title"], panel["ylabel"])
        for i, text in panel.get("gaps", []):  # a slot a label names
            ax.text(i, 0, f" {text}", rotation=90, ha="center", va="bottom", fontsize=8,
                    color="0.35")
    return _save(fig, job)










def draw_curves(job: Job) -> Path:
    d = job.data
    fig, axes = _on_grid(d)
    for ax, panel in zip(axes.flat, d["panels"], strict=False):
        others = 0
        for line in panel["lines"]:
            style: dict[str, Any] = ({"color": "k", "linewidth": 2.0} if line["control"]
                                     else {"color": f"C{others % 10}", "linewidth": 1.2})
            others += not line["control"]
            ax.plot(range(len(line["ys"])), line["ys"], "o-", label=line["label"], markersize=4, **style)
        ax.set_xlabel("draft position")
        ax.set_ylabel("share of verify steps accepting it")
        ax.set_ylim(0, 1.02)
        ax.set_title(panel["title"], fontsize=10)
        ax.grid(alpha=0.3)
        if len(panel["lines"]) <= MAX_LEGEND:
            ax.legend(fontsize=8, loc="upper right")
    for ax in list(axes.flat)[len(d["panels"]):]:
        ax.set_visible(False)
    return _save(fig, job)




def draw_drift(job: Job) -> Path:
    d = job.data
    width, height = d["size"]
    fig, axes = _figure(width, height, groups=len(d["sessions"]))
    ax = axes[0, 0]
    for j, line in enumerate(d["lines"]):
        xs, mids, void = line["xs"], line["mids"], line["void"]
        ax.errorbar(xs, mids, yerr=[line["los"], line["his"]], marker="o", capsize=3,
                    color=f"C{j}", label=line["label"])
        # A void row is drawn (it was measured) but hollow: it is not a figure to compare.
        ax.plot([xs[i] for i in void], [mids[i] for i in void], "o", color=f"C{j}", mfc="white",
                zorder=3)
    _ticks(ax, d["sessions"])
    ax.set_title("Control across sessions: aggregate tok/s (median rep, rep range)", fontsize=10)
    ax.set_ylabel("tok/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, job)




def draw_delta(job: Job) -> Path:
    d = job.data
    groups, loads = d["groups"], d["loads"]
    width, height = d["size"]
    fig, axes = _figure(width, height, len(d["panels"]), groups=len(groups))
    width = 0.7 / max(1, len(loads))
    for ax, panel in zip(axes[:, 0], d["panels"], strict=True):
        ax.axhline(0, color="0.3", linewidth=0.8)
        for j, points in enumerate(panel["series"]):
            if not points:
                continue
            xs = [p[0] + (j - (len(loads) - 1) / 2) * width for p in points]
            ys = [p[1] * 100 for p in points]
            lo = [(p[1] - p[2]) * 100 if p[2] is not None else 0.0 for p in points]
            hi = [(p[3] - p[1]) * 100 if p[3] is not None else 0.0 for p in points]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor=f"C{j}", elinewidth=1.2,
                        capsize=3 if len(groups) <= MAX_LABELS else 0)
            inside = [p[4] for p in points]
            ax.scatter(xs, ys, s=28, zorder=3, edgecolors=f"C{j}",
                       facecolors=["white" if i else f"C{j}" for i in inside])
            ax.scatter([], [], s=28, color=f"C{j}", label=loads[j])  # the legend's: filled
        for i, text in panel["gaps"]:  # a window without a delta says why where it would be
            ax.text(i, 0, f" {text}", rotation=90, ha="center", va="bottom", fontsize=8, color="0.35")
        _ticks(ax, groups, rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.set_title(panel["title"], fontsize=10)
        ax.set_ylabel("Δ tok/s, %")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, job)






def draw_latency(job: Job) -> Path:
    d = job.data
    fig, axes = _on_grid(d)
    for ax, panel in zip(axes.flat, d["panels"], strict=True):
        for j, line in enumerate(panel["lines"]):
            ax.plot(line["xs"], line["p50"], "o-", color=f"C{j % 10}", label=line["label"],
                    linewidth=1.2, markersize=4)
            p99 = [(x, v) for x, v in zip(line["xs"], line["p99"], strict=True) if v is not None]
            if p99:
                ax.plot(*zip(*p99, strict=True), "x--", color=f"C{j % 10}", linewidth=1, markersize=5)
        ax.set_xticks(range(len(d["loads"])), d["loads"], fontsize=8)
        ax.set_title(panel["title"], fontsize=10)
        ax.set_ylabel(panel["ylabel"])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    # One legend for every panel (the windows), beside them: the panel with the most lines has all.
    # Past MAX_LEGEND windows a legend would be taller than the chart: the lines go unnamed.
    ax = max(axes.flat, key=lambda a: len(a.get_lines()))
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) <= MAX_LEGEND:
        fig.legend(handles, labels, fontsize=8, loc="outside right upper")
    return _save(fig, job)




def draw_trade(job: Job) -> Path:
    d = job.data
    width, height = d["size"]
    fig, axes = _figure(width, height, len(d["panels"]), 1)
    for ax, panel in zip(axes.flat, d["panels"], strict=True):
        n = len(panel["lines"])
        for j, line in enumerate(panel["lines"]):
            # Side by side within a value, so the bars of two classes do not hide each other.
            xs = [i + (j - (n - 1) / 2) * 0.08 for i in range(len(panel["xs"]))]
            ax.errorbar(xs, line["ys"], yerr=[line["los"], line["his"]], fmt="none", color=f"C{j}",
                        capsize=3, elinewidth=1)
            ax.plot(xs, line["ys"], "-", color=f"C{j}", alpha=0.5, label=line["label"])
            for x, y, called in zip(xs, line["ys"], line["called"], strict=True):
                ax.plot([x], [y], "o", color=f"C{j}", mfc=f"C{j}" if called else "white", zorder=3)
        ax.axhline(0, color="0.4", linewidth=0.8)
        _ticks(ax, panel["xs"], fontsize=8)
        ax.set_title(panel["title"], fontsize=10)
        ax.set_ylabel("delta vs control, %")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, job)


# Each chart: what it is drawn from (read from the run, no matplotlib) and how it is drawn; the
# delta against the control first, what a write-up shows.
CHARTS: dict[str, tuple[Callable[[RunView], Data | None], Callable[[Job], Path]]] = {
    "delta": (delta_data, draw_delta), "latency": (latency_data, draw_latency),
    "tok-s": (tok_s_data, draw_bars), "acceptance": (acceptance_data, draw_bars),
    "accept-pos": (curve_data, draw_curves),
    "control-drift": (drift_data, draw_drift), "trade": (trade_data, draw_trade)}


@functools.cache
def _code() -> str:
    """What else decides a chart's pixels: this module and matplotlib's version."""
    from importlib.metadata import version

    return hashlib.sha256(Path(__file__).read_bytes() + version("matplotlib").encode()).hexdigest()


def jobs(view: RunView) -> list[Job]:
    """Every chart that has data, with the key of what it is drawn from: the data, as JSON (the
    same rows give the same text), and the code that draws it."""
    out = []
    for name, (extract, _) in CHARTS.items():
        data = extract(view)
        if data is not None:
            text = json.dumps([name, data, _code()], separators=(",", ":"))
            out.append(Job(name, data, view.dir / f"report-{name}.png",
                           hashlib.sha256(text.encode()).hexdigest()))
    return out


def stored_key(path: Path) -> str | None:
    """The KEY text chunk of a PNG this module wrote (before its image data), or None."""
    try:
        with files.open_bounded(path) as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return None
            while head := f.read(8):
                size, kind = int.from_bytes(head[:4], "big"), head[4:]
                if kind == b"IDAT" or len(head) < 8:
                    return None
                chunk = f.read(size + 4)[:size]  # and its CRC
                if kind == b"tEXt" and chunk.startswith(KEY.encode() + b"\0"):
                    return chunk[len(KEY) + 1:].decode("latin-1")
    except (OSError, files.Unreadable):  # a FIFO or a device where the PNG was: drawn again
        return None
    return None


def draw(job: Job) -> Path:
    return CHARTS[job.name][1](job)


def warm() -> None:
    """matplotlib imported and its fonts found: what the drawing process does while the run is
    read. Raises ImportError without matplotlib."""
    from matplotlib import font_manager
    from matplotlib.backends import backend_agg  # noqa: F401 - savefig's canvas
    from matplotlib.figure import Figure  # noqa: F401

    font_manager.findfont(font_manager.FontProperties())
