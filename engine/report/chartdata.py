"""What each of the report's charts is drawn from (engine.report.charts draws it): plain values
read from the run, JSON that is hashed into the chart's key, no matplotlib. A chart whose values
have not changed is kept, so these are the whole of what a chart shows."""

from __future__ import annotations

import math
from typing import Any

from engine.method import acceptance
from engine.record.trade import SEPARATES, shape_text, trades
from engine.report.run import Row, RunView
from engine.report.text import rule_of, verdict
from engine.words import CONTROL, WindowStatus, load_text

# A day-long campaign has hundreds of windows: past these, a chart keeps every bar in a PNG of a
# width a screen can show and labels every n-th group (its table below names every row). Drawing a
# slot and a label per window took 70 s and 3 MB per PNG for 800 windows.
MAX_WIDTH = 20.0  # inches
MAX_LABELS = 40
MAX_LEGEND = 24  # lines a legend names (the latency chart's windows)
Bar = tuple[int, float, float, float, bool]  # slot, height, whisker below, whisker above, void
Data = dict[str, Any]  # what a chart is drawn from: plain values (JSON), hashed into its KEY


def _width(groups: int, per: float, least: float) -> float:
    return min(MAX_WIDTH, max(least, per * groups + 2))


def _range(row: Row) -> tuple[float, float, float]:
    """Median and the rep range below/above it, as error-bar lengths."""
    mid = row.agg_tok_s or 0.0
    if not row.rep_tok_s:
        return mid, 0.0, 0.0
    return mid, max(0.0, mid - min(row.rep_tok_s)), max(0.0, max(row.rep_tok_s) - mid)


def tok_s_data(view: RunView) -> Data | None:
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
    panels = []
    for c in concs:
        bars = [[(i, *_range(r), not r.usable) for i, g in enumerate(groups)
                 if (r := by.get((g, cls, c))) is not None] for cls in classes]
        gaps = [(i, f"{status.get(g, 'no row')}") for i, g in enumerate(
            groups if len(groups) <= MAX_LABELS else ()) if (g, c) not in measured]
        panels.append({"title": f"{load_text(*c)}: aggregate tok/s (median rep, rep range; "
                                "hatched = void/failed)", "ylabel": "tok/s", "bars": bars,
                       "gaps": gaps})
    return {"groups": groups, "series": classes, "grid": (len(concs), 1),
            "size": (_width(len(groups), 0.9, 6.0), 3.6 * len(concs)), "panels": panels}


def accept_label(r: Row) -> str:
    """A window's name where its acceptance is drawn: "simulated" beside it when its server was
    told the acceptance (engine.method.acceptance), never drawn as if measured."""
    sim = " (simulated)" if acceptance.is_simulated(r.as_json()) else ""
    return f"{r.session}-{r.window}{sim}"


def acceptance_data(view: RunView) -> Data | None:
    """Acceptance length and rate per class at each concurrency; rows without drafting are left out."""
    rows = [r for r in view.rows if r.accept_len is not None or r.accept_rate is not None]
    if not rows:
        return None
    concs = [load for load in view.loads() if any((r.concurrency, r.rate) == load for r in rows)]
    classes = list(dict.fromkeys(r.cls for r in rows))
    groups = list(dict.fromkeys(accept_label(r) for r in rows))
    by = {(accept_label(r), r.cls, (r.concurrency, r.rate)): r for r in rows}
    panels = []
    for c in concs:
        for attr, label in (("accept_len", "acceptance length"), ("accept_rate", "acceptance rate")):
            bars = [[(i, v, 0.0, 0.0, not r.usable) for i, g in enumerate(groups)
                     if (r := by.get((g, cls, c))) is not None and (v := getattr(r, attr)) is not None]
                    for cls in classes]
            panels.append({"title": f"{load_text(*c)}: {label} per class", "ylabel": label,
                           "bars": bars})
    return {"groups": groups, "series": classes, "grid": (len(concs), 2),
            "size": (_width(len(groups), 1.6, 10.0), 3.4 * len(concs)), "panels": panels}


def curve_data(view: RunView) -> Data | None:
    """Acceptance per draft position (engine.method.acceptance): a panel per class and load, a
    line per window, its session's control in black; rows without a curve are left out."""
    rows = [r for r in view.rows if r.curve]
    if not rows:
        return None
    panels = []
    for shape in dict.fromkeys(r.shape for r in rows):
        lines = [{"label": accept_label(r), "ys": r.curve, "control": r.window == CONTROL}
                 for r in rows if r.shape == shape]
        panels.append({"title": f"{shape[0]} {load_text(shape[1], shape[2])}: acceptance per "
                                "draft position", "lines": lines})
    cols = min(2, len(panels))
    return {"panels": panels, "grid": (math.ceil(len(panels) / cols), cols),
            "size": (6.5 * cols, 3.4 * math.ceil(len(panels) / cols))}


def drift_data(view: RunView) -> Data | None:
    """Each control row across sessions: boot-to-boot drift, measured rather than assumed."""
    ctl = [r for r in view.rows if r.window == CONTROL and r.agg_tok_s]
    sessions = list(dict.fromkeys(r.session for r in ctl))
    if len(sessions) < 2:  # one boot of the control has no drift to show
        return None
    at = {s: i for i, s in enumerate(sessions)}
    lines = []
    for shape in dict.fromkeys(r.shape for r in ctl):
        pts = sorted((r for r in ctl if r.shape == shape), key=lambda r: at[r.session])
        mids, los, his = zip(*(_range(r) for r in pts), strict=True)
        void = [i for i, r in enumerate(pts) if not r.usable]
        lines.append({"label": f"{shape[0]} {load_text(shape[1], shape[2])}"
                               + (" (hollow: void)" if void else ""),
                      "xs": [at[r.session] for r in pts], "mids": mids, "los": los, "his": his,
                      "void": void})
    return {"sessions": sessions, "size": (_width(len(sessions), 1.2, 5.0) + 1, 4.0), "lines": lines}


def delta_data(view: RunView) -> Data | None:
    """Each window's delta against its session's control per class and load, with its interval:
    what the report's tables say (engine.report.text.verdict, the campaign's calls), drawn. A
    panel per class, a group per window, a point per load; not an effect, hollow."""
    status = {ws.key: ws.status for ws in view.windows()}
    where = {ws.key: (ws.session, ws.window) for ws in view.windows() if ws.window != CONTROL}
    where.update({f"{r.session}-{r.window}": (r.session, r.window) for r in view.rows
                  if r.window != CONTROL})
    windows = list(where)
    classes, loads = view.classes(), view.loads()
    panels, any_value = [], False
    for cls in classes:
        series = []
        for load in loads:
            points = []
            for i, key in enumerate(windows):
                session, window = where[key]
                row = view.rows_of(session, window).get((cls, *load))
                if row is None:
                    continue
                d = verdict(view, row)
                if d.value is not None:
                    any_value = True
                    points.append([i, d.value, d.lo, d.hi, not d.effect])
            series.append(points)
        shown = {p[0] for points in series for p in points}
        gaps = [[i, s if (s := status.get(key, "")) in (WindowStatus.REJECTED, WindowStatus.FAILED)
                 else "no Δ"] for i, key in enumerate(windows)
                if i not in shown and len(windows) <= MAX_LABELS]
        panels.append({"title": f"{cls}: Δ tok/s against the session's control (95 % interval; "
                                "hollow: not called an effect)", "series": series, "gaps": gaps})
    if not any_value:
        return None
    return {"groups": windows, "loads": [load_text(*c) for c in loads],
            "panels": panels,
            "size": (_width(len(windows), 0.9, 8.0), 3.4 * len(classes))}


LATENCY = (("ttft", "TTFT"), ("tpot", "TPOT"))


def latency_data(view: RunView) -> Data | None:
    """TTFT and TPOT (p50 solid, p99 dashed) against the load, a line per window, a row of panels
    per class: where a change buys throughput with latency."""
    rows = [r for r in view.rows if r.usable and any(getattr(r, f"{m}_p50") is not None
                                                     for m, _ in LATENCY)]
    if not rows:
        return None
    loads = [c for c in view.loads() if any((r.concurrency, r.rate) == c for r in rows)]
    at = {c: i for i, c in enumerate(loads)}
    panels = []
    for cls in dict.fromkeys(r.cls for r in rows):
        for metric, name in LATENCY:
            lines = []
            for key in dict.fromkeys(f"{r.session}-{r.window}" for r in rows):
                pts = sorted((at[(r.concurrency, r.rate)], getattr(r, f"{metric}_p50"),
                              getattr(r, f"{metric}_p99")) for r in rows
                             if r.cls == cls and f"{r.session}-{r.window}" == key
                             and getattr(r, f"{metric}_p50") is not None)
                if pts:
                    lines.append({"label": key, "xs": [p[0] for p in pts], "p50": [p[1] for p in pts],
                                  "p99": [p[2] for p in pts]})
            panels.append({"title": f"{cls}: {name} against the load (p50 solid, p99 dashed)",
                           "ylabel": f"{name} ms", "lines": lines})
    return {"loads": [load_text(*c) for c in loads], "panels": panels,
            "grid": (len(panels) // 2, 2), "size": (13.0, 3.4 * (len(panels) // 2))}


def trade_data(view: RunView) -> Data | None:
    """Per sweep (and session), each value's delta against the control, a line per class and
    load, its interval as bars; the control's value at 0."""
    found = trades(view.state, rule_of(view))
    if not found:
        return None
    panels = []
    for t in found:
        xs = [t.label("control"), *(t.label(w) for w, _ in t.values)]
        lines = []
        for s in t.shapes:
            cells = [t.cells[(w, s)] for w, _ in t.values]
            lines.append({"label": shape_text(s),
                          "ys": [0.0, *((c.delta or 0.0) * 100 if c.delta is not None else math.nan
                                        for c in cells)],
                          "los": [0.0, *(((c.delta or 0) - (c.lo if c.lo is not None else c.delta or 0)) * 100
                                         for c in cells)],
                          "his": [0.0, *(((c.hi if c.hi is not None else c.delta or 0) - (c.delta or 0)) * 100
                                         for c in cells)],
                          "called": [False, *(c.outcome in SEPARATES for c in cells)]})
        panels.append({"title": f"{t.sweep} ({t.axis}), {t.session}: {t.answer}", "xs": xs,
                       "lines": lines})
    return {"panels": panels, "size": (_width(max(len(p["xs"]) for p in panels), 1.3, 6.0),
                                       3.6 * len(panels))}

