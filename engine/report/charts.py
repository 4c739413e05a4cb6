"""The report's PNG charts, drawn with matplotlib (the optional extra ``ruler[report]``).

matplotlib is imported inside each function, so ``engine.report`` imports this module freely and
a missing extra surfaces as an ImportError the report turns into "charts skipped". Only the
object API (``Figure`` on the Agg canvas) is used: no pyplot, no global backend, no display.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.record.events import CONTROL, WindowStatus
from engine.record.state import load_text
from engine.report.run import Row, RunView

DPI = 110
# A day-long campaign has hundreds of windows: past these, a chart keeps every bar in a PNG of a
# width a screen can show and labels every n-th group (its table below names every row). Drawing a
# slot and a label per window took 70 s and 3 MB per PNG for 800 windows.
MAX_WIDTH = 20.0  # inches
MAX_LABELS = 40
Bar = tuple[float, float, float, bool]  # height, whisker below, whisker above, void
VOID_ALPHA = 0.4  # a void/failed row is drawn faded and hatched: present, not comparable


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
    fig.subplots_adjust(left=0.04, right=0.99, bottom=0.12, top=0.93, hspace=0.5, wspace=0.12)
    return fig, axes


def _width(groups: int, per: float, least: float) -> float:
    return min(MAX_WIDTH, max(least, per * groups + 2))


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


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, format="png")
    return path


def _range(row: Row) -> tuple[float, float, float]:
    """Median and the rep range below/above it, as error-bar lengths."""
    mid = row.agg_tok_s or 0.0
    if not row.rep_tok_s:
        return mid, 0.0, 0.0
    return mid, max(0.0, mid - min(row.rep_tok_s)), max(0.0, max(row.rep_tok_s) - mid)


def _grouped(ax: Any, groups: Sequence[str], series: Sequence[str],
             value: Callable[[str, str], Bar | None], title: str, ylabel: str) -> None:
    """Bars: one group per window, one bar per series (class); value(g, s) -> (h, lo, hi, void).

    A series' bars are one collection, not a patch each: thousands of bars (a day-long campaign)
    draw, lay out and place a legend in a second rather than a minute."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    width = 0.8 / max(1, len(series))
    for j, s in enumerate(series):
        xs, hs, los, his, voids = [], [], [], [], []
        for i, g in enumerate(groups):
            got = value(g, s)
            if got is None:
                continue
            h, lo, hi, void = got
            xs.append(i + (j - (len(series) - 1) / 2) * width)
            hs.append(h)
            los.append(lo)
            his.append(hi)
            voids.append(void)
        for void in (False, True):
            boxes = [[(x - width / 2, 0), (x - width / 2, h), (x + width / 2, h), (x + width / 2, 0)]
                     for x, h, v in zip(xs, hs, voids, strict=True) if v is void]
            if boxes:  # a void row is present but not comparable: faded and hatched, in its colour
                ax.add_collection(PolyCollection(boxes, facecolors=f"C{j}", edgecolors="none",
                                                 linewidths=0, **(
                                                     {"alpha": VOID_ALPHA, "hatch": "//"} if void else {})))
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
    if series:
        ax.legend(handles=[Patch(color=f"C{j}", label=s) for j, s in enumerate(series)],
                  fontsize=8, loc="best" if len(groups) <= MAX_LABELS else "upper right")
    _ticks(ax, groups, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)  # a window without bars (rejected) keeps its slot
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def tok_s_chart(view: RunView, path: Path) -> Path | None:
    """Aggregate tok/s per window and class, one panel per load (concurrency, or open-loop rate),
    the rep range as whiskers."""
    concs, classes = view.loads(), view.classes()
    if not view.rows:
        return None
    by = {(f"{r.session}-{r.window}", r.cls, (r.concurrency, r.rate)): r for r in view.rows}
    # Windows without rows (rejected at boot, failed) keep their place, labelled: a gap that says why.
    status = {ws.key: ws.status for ws in view.windows()}
    measured = {(g, c) for g, _, c in by}
    with_rows = {g for g, _ in measured}
    groups = list(dict.fromkeys([k for k in status if k in with_rows
                                 or status[k] in (WindowStatus.REJECTED, WindowStatus.FAILED)]
                                + [g for g, _, _ in by]))
    fig, axes = _figure(_width(len(groups), 0.9, 6.0), 3.6 * len(concs), len(concs), 1, len(groups))
    for ax, c in zip(axes[:, 0], concs, strict=True):
        def value(g: str, cls: str, c: tuple[int, float | None] = c) -> Bar | None:
            r = by.get((g, cls, c))
            return None if r is None else (*_range(r), not r.usable)
        _grouped(ax, groups, classes, value, f"{load_text(*c)}: aggregate tok/s (median rep, rep "
                 "range; hatched = void/failed)", "tok/s")
        for i, g in enumerate(groups if len(groups) <= MAX_LABELS else ()):  # a slot a label names
            if (g, c) not in measured:
                ax.text(i, 0, f" {status.get(g, 'no row')}", rotation=90, ha="center",
                        va="bottom", fontsize=8, color="0.35")
    return _save(fig, path)


def acceptance_chart(view: RunView, path: Path) -> Path | None:
    """Acceptance length and rate per class at each concurrency; rows without drafting are left out."""
    rows = [r for r in view.rows if r.accept_len is not None or r.accept_rate is not None]
    if not rows:
        return None
    concs = [load for load in view.loads() if any((r.concurrency, r.rate) == load for r in rows)]
    classes = list(dict.fromkeys(r.cls for r in rows))
    groups = list(dict.fromkeys(f"{r.session}-{r.window}" for r in rows))
    by = {(f"{r.session}-{r.window}", r.cls, (r.concurrency, r.rate)): r for r in rows}
    fig, axes = _figure(_width(len(groups), 1.6, 10.0), 3.4 * len(concs), len(concs), 2, len(groups))
    for i, c in enumerate(concs):
        for k, (attr, label) in enumerate((("accept_len", "acceptance length"),
                                           ("accept_rate", "acceptance rate"))):
            def value(g: str, cls: str, c: tuple[int, float | None] = c,
                      attr: str = attr) -> Bar | None:
                r = by.get((g, cls, c))
                v = getattr(r, attr) if r else None
                return None if v is None else (v, 0.0, 0.0, not r.usable)
            _grouped(axes[i, k], groups, classes, value, f"{load_text(*c)}: {label} per class", label)
    return _save(fig, path)


def drift_chart(view: RunView, path: Path) -> Path | None:
    """Each control row across sessions: boot-to-boot drift, measured rather than assumed."""
    ctl = [r for r in view.rows if r.window == CONTROL and r.agg_tok_s]
    sessions = list(dict.fromkeys(r.session for r in ctl))
    if len(sessions) < 2:  # one boot of the control has no drift to show
        return None
    fig, axes = _figure(_width(len(sessions), 1.2, 5.0) + 1, 4.0, groups=len(sessions))
    ax = axes[0, 0]
    at = {s: i for i, s in enumerate(sessions)}
    for j, shape in enumerate(dict.fromkeys(r.shape for r in ctl)):
        pts = sorted((r for r in ctl if r.shape == shape), key=lambda r: at[r.session])
        xs = [at[r.session] for r in pts]
        mids, los, his = zip(*(_range(r) for r in pts), strict=True)
        void = [i for i, r in enumerate(pts) if not r.usable]
        ax.errorbar(xs, mids, yerr=[los, his], marker="o", capsize=3, color=f"C{j}",
                    label=f"{shape[0]} {load_text(shape[1], shape[2])}" + (" (hollow: void)" if void else ""))
        # A void row is drawn (it was measured) but hollow: it is not a figure to compare.
        ax.plot([xs[i] for i in void], [mids[i] for i in void], "o", color=f"C{j}", mfc="white",
                zorder=3)
    _ticks(ax, sessions)
    ax.set_title("Control across sessions: aggregate tok/s (median rep, rep range)", fontsize=10)
    ax.set_ylabel("tok/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


CHARTS: dict[str, Callable[[RunView, Path], Path | None]] = {
    "tok-s": tok_s_chart, "acceptance": acceptance_chart, "control-drift": drift_chart}


def render_all(view: RunView) -> list[Path]:
    """Every chart that has data, written beside report.md. Raises ImportError without matplotlib."""
    import matplotlib  # noqa: F401 - fail before writing anything when the extra is missing

    out = [draw(view, view.dir / f"report-{name}.png") for name, draw in CHARTS.items()]
    return [p for p in out if p is not None]
