"""The report's PNG charts, drawn with matplotlib (the optional extra ``ruler[report]``).

matplotlib is imported inside each function, so ``engine.report`` imports this module freely and
a missing extra surfaces as an ImportError the report turns into "charts skipped". Only the
object API (``Figure`` on the Agg canvas) is used: no pyplot, no global backend, no display.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.record.events import CONTROL, WindowStatus
from engine.report.run import Row, RunView

DPI = 110
Bar = tuple[float, float, float, bool]  # height, whisker below, whisker above, void
VOID_ALPHA = 0.4  # a void/failed row is drawn faded and hatched: present, not comparable


def _figure(width: float, height: float, rows: int = 1, cols: int = 1) -> tuple[Any, Any]:
    from matplotlib.figure import Figure  # the ImportError the report catches

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


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
    """Bars: one group per window, one bar per series (class); value(g, s) -> (h, lo, hi, void)."""
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
        whiskers = [los, his] if any(los) or any(his) else None  # no caps on single values
        bars = ax.bar(xs, hs, width, color=f"C{j}", yerr=whiskers, capsize=3,
                      error_kw={"elinewidth": 1})
        for bar, void in zip(bars, voids, strict=True):
            if void:  # present but not comparable: faded and hatched, still in its class colour
                bar.set_alpha(VOID_ALPHA)
                bar.set_hatch("//")
    if series:  # proxies: the legend must not take a faded void bar as the class's swatch
        ax.legend(handles=[Patch(color=f"C{j}", label=s) for j, s in enumerate(series)],
                  fontsize=8)
    ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)  # a window without bars (rejected) keeps its slot
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def tok_s_chart(view: RunView, path: Path) -> Path | None:
    """Aggregate tok/s per window and class, one panel per concurrency, the rep range as whiskers."""
    concs, classes = view.concurrencies(), view.classes()
    if not view.rows:
        return None
    by = {(f"{r.session}-{r.window}", r.cls, r.concurrency): r for r in view.rows}
    # Windows without rows (rejected at boot, failed) keep their place, labelled: a gap that says why.
    status = {ws.key: ws.status for ws in view.windows()}
    groups = list(dict.fromkeys([k for k in status if any(g == k for g, _, _ in by)
                                 or status[k] in (WindowStatus.REJECTED, WindowStatus.FAILED)]
                                + [g for g, _, _ in by]))
    fig, axes = _figure(max(6.0, 0.9 * len(groups) + 2), 3.6 * len(concs), len(concs), 1)
    for ax, c in zip(axes[:, 0], concs, strict=True):
        def value(g: str, cls: str, c: int = c) -> Bar | None:
            r = by.get((g, cls, c))
            return None if r is None else (*_range(r), not r.usable)
        _grouped(ax, groups, classes, value, f"C{c}: aggregate tok/s (median rep, rep range; "
                 "hatched = void/failed)", "tok/s")
        for i, g in enumerate(groups):
            if not any(k[0] == g and k[2] == c for k in by):
                ax.text(i, 0, f" {status.get(g, 'no row')}", rotation=90, ha="center",
                        va="bottom", fontsize=8, color="0.35")
    return _save(fig, path)


def acceptance_chart(view: RunView, path: Path) -> Path | None:
    """Acceptance length and rate per class at each concurrency; rows without drafting are left out."""
    rows = [r for r in view.rows if r.accept_len is not None or r.accept_rate is not None]
    if not rows:
        return None
    concs = sorted({r.concurrency for r in rows})
    classes = list(dict.fromkeys(r.cls for r in rows))
    groups = list(dict.fromkeys(f"{r.session}-{r.window}" for r in rows))
    by = {(f"{r.session}-{r.window}", r.cls, r.concurrency): r for r in rows}
    fig, axes = _figure(max(10.0, 1.6 * len(groups) + 2), 3.4 * len(concs), len(concs), 2)
    for i, c in enumerate(concs):
        for k, (attr, label) in enumerate((("accept_len", "acceptance length"),
                                           ("accept_rate", "acceptance rate"))):
            def value(g: str, cls: str, c: int = c,
                      attr: str = attr) -> Bar | None:
                r = by.get((g, cls, c))
                v = getattr(r, attr) if r else None
                return None if v is None else (v, 0.0, 0.0, not r.usable)
            _grouped(axes[i, k], groups, classes, value, f"C{c}: {label} per class", label)
    return _save(fig, path)


def drift_chart(view: RunView, path: Path) -> Path | None:
    """Each control row across sessions: boot-to-boot drift, measured rather than assumed."""
    ctl = [r for r in view.rows if r.window == CONTROL and r.agg_tok_s]
    sessions = list(dict.fromkeys(r.session for r in ctl))
    if len(sessions) < 2:  # one boot of the control has no drift to show
        return None
    fig, axes = _figure(max(6.0, 1.2 * len(sessions) + 3), 4.0)
    ax = axes[0, 0]
    for j, shape in enumerate(dict.fromkeys(r.shape for r in ctl)):
        pts = [r for s in sessions for r in ctl if r.session == s and r.shape == shape]
        xs = [sessions.index(r.session) for r in pts]
        mids, los, his = zip(*(_range(r) for r in pts), strict=True)
        void = [i for i, r in enumerate(pts) if not r.usable]
        ax.errorbar(xs, mids, yerr=[los, his], marker="o", capsize=3, color=f"C{j}",
                    label=f"{shape[0]} C{shape[1]}" + (" (hollow: void)" if void else ""))
        # A void row is drawn (it was measured) but hollow: it is not a figure to compare.
        ax.plot([xs[i] for i in void], [mids[i] for i in void], "o", color=f"C{j}", mfc="white",
                zorder=3)
    ax.set_xticks(range(len(sessions)), sessions)
    ax.set_title("Control across sessions: aggregate tok/s (median rep, rep range)", fontsize=10)
    ax.set_ylabel("tok/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def render_all(view: RunView) -> list[Path]:
    """Every chart that has data, written beside report.md. Raises ImportError without matplotlib."""
    import matplotlib  # noqa: F401 - fail before writing anything when the extra is missing

    out = [tok_s_chart(view, view.dir / "report-tok-s.png"),
           acceptance_chart(view, view.dir / "report-acceptance.png"),
           drift_chart(view, view.dir / "report-control-drift.png")]
    return [p for p in out if p is not None]
