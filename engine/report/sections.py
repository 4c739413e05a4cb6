"""The run-level sections: header, windows at a glance, the controls and their drift."""

from __future__ import annotations

import math
from typing import Any

from engine.method.verdict import Call
from engine.record import results
from engine.record.journal import damage_report
from engine.record.state import earlier_sessions
from engine.report.run import Row, RunView, read_json, receipt_damage
from engine.report.text import (
    acceptance_text,
    cache_text,
    cell,
    delta,
    fixed,
    head,
    judgement_of,
    latency_table,
    load_cell,
    pct,
    reps_text,
    rule_of,
    slo_text,
    table,
    tok,
    verdict,
    when,
)
from engine.report.turns import turns_table
from engine.report.verdicts import verdict_cell, verdict_lines
from engine.report.windows import history, window_status
from engine.sanitize import Md, code, markdown
from engine.words import CONTROL, Check, is_control, load_text, plural


def receipts_said(view: RunView) -> str:
    """Where the figures come from: the receipts, unless some the rows name are gone or cut."""
    damaged = receipt_damage(view.dir, view.rows)
    if not damaged:
        return ("Every figure below is read from `throughput.csv`, the per-request receipts it "
                "names and the journal; nothing was measured again.")
    more = f" (+{len(damaged) - 5})" if len(damaged) > 5 else ""
    shown = ", ".join(markdown(d) for d in damaged[:5]) + more
    return ("Every figure below is read from `throughput.csv` and the journal; nothing was measured "
            f"again. **{plural(len(damaged), 'receipt')} it names cannot back them: missing, truncated "
            f"or damaged** ({shown}), so those rows' figures are the journal's alone.")

def header(view: RunView) -> list[str]:
    st = view.state
    desc = view.campaign.description if view.campaign and view.campaign.description else ""
    windows = [w for w in view.windows() if w.window != CONTROL]
    lines = [f"# {markdown(st.campaign or view.raw_campaign.get('name', view.name))}: ruler report", ""]
    if desc:  # the campaign's words, a line of the paragraph each
        lines += [*(markdown(line) for line in str(desc).splitlines()), ""]
    lines += [
        f"Run {code(st.run or view.name)} on {code(st.server or view.raw_campaign.get('server', '?'))} "
        f"({markdown(st.runtime or view.env.get('runtime', '?'))} runtime), "
        f"status **{markdown(st.status)}**: "
        f"{plural(len(windows), 'window')} in {plural(len(view.sessions()), 'session')}, "
        f"{plural(len(view.rows), 'row')} in "
        f"`throughput.csv`. Started {when(st.started_ts)}, finished {when(st.finished_ts)}.", "",
        receipts_said(view) + " A row's tok/s is the median of its reps' tok/s, each over its "
        "steady window when every rep has one (`basis` steady), else over the whole rep; its per "
        "user is that tok/s over its C workers; its spread is (max - min) / mean of the same "
        "reps. A row's delta is window / control - 1 against the same session's control boots, "
        "the ratio of geometric means of the reps' tok/s, with a 95 % interval that counts the "
        "noise between boots at its class and load (`throughput.csv`'s `delta`, `delta_lo`, "
        "`delta_hi`, `boot_noise`; below, *Noise between boots*); a window's call at a shape is on "
        "its boots in every session, the session a block. " + upper_first(rule_of(view).text())
        + ": each window is asked once whether it changes tok/s at any shape, then its shapes are "
        "called, keeping that error rate over every row of the run; *no observable effect* is "
        "shown, not presumed; the rest is *undetermined*, with the sessions it would take "
        "(`verdict`, `verdict_why`).", ""]
    if st.error:
        lines += [f"**Engine error**: {markdown(st.error)}", ""]
    if st.damage:
        lines += [f"**Journal damaged** at {len(st.damage)} line(s): the report folds every valid "
                  "event around them; the lines themselves are not events.", "", "```",
                  damage_report(view.dir / results.JOURNAL, st.damage), "```", ""]
    return lines


def upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def summary(view: RunView) -> list[str]:
    rows = []
    for ws in view.windows():
        if ws.window == CONTROL:
            continue
        deltas = [verdict(view, r) for r in view.rows_of(ws.session, ws.window).values()]
        vals = [d.value for d in deltas if d.value is not None]
        span = (f"{min(vals) * 100:+.1f} % .. {max(vals) * 100:+.1f} %" if len(vals) > 1
                else f"{vals[0] * 100:+.1f} %" if vals else "-")
        asked = judgement_of(view).windows.get(ws.window)
        said = asked.text() if asked is not None and not is_control(ws.window) else "-"
        rows.append([f"{ws.session}-{ws.window}", ws.axis, ws.status, span, said,
                     *(verdict_cell(view, ws, c) if c != Check.KL or view.lossy(ws.window) else "-"
                       for c in (Check.GREEDY, Check.TEACHER_FORCED, Check.KL, Check.NO_EFFECT,
                                 Check.KNOBS))])
    if not rows:
        return []
    return ["## Windows at a glance", ""] + table(
        ["window", "axis", "status", "Δ tok/s (all rows)", "the window's call", "greedy",
         Md("\\|Δlogp\\| p99"), "KL mean", "no observable effect", "ruler check"], rows)


def boot_noise(view: RunView) -> list[str]:
    """The noise between boots per shape, and how it was measured; the windows' one questions."""
    j = judgement_of(view)
    if not j.noise:
        return []
    body = [[cls, load_text(c, rate), f"{n.sd * 100:.1f} %" if n.usable else "-",
             f"{math.sqrt(n.within) * 100:.1f} %", n.how()]
            for (cls, c, rate), n in sorted(j.noise.items(),
                                            key=lambda kv: (kv[0][2] or 0, kv[0][1], kv[0][0]))]
    asked = [w for w in j.windows.values() if w.rows]
    moved = sum(w.call == Call.EFFECT for w in asked)
    return ["### Noise between boots", "",
            "How far the same server moves from one boot to the next at each shape (class and "
            "load): each boot's mean log tok/s fitted as its session's level plus its "
            "configuration's effect, the residuals over the boots beyond what the fit spends "
            "(a control boot twice in a session, a window in two sessions; engine.method.boots). "
            "A shift between sessions is not counted: every delta is within a session. Every "
            "delta's interval counts its shape's noise; where nothing measured it, an earlier "
            "run's (`--baseline`) or a declared value (`verdict.boot_noise`) stands in and says "
            "so, else nothing is called. Within a boot: the reps' own noise.", ""] + table(
        ["class", "load", "a boot's mean (sd)", "within a boot (sd)", "how"], body) + [
        f"{moved} of {plural(len(asked), 'window')} called an *observable effect* at one or more "
        f"shapes ({rule_of(view).text()}).", ""]


Load = tuple[int, float | None]  # (C, None) closed loop, (0, rate) open loop


def control_row_cells(rows: dict[tuple[str, int, float | None], Row], classes: list[str],
                      low: Load, top: Load) -> list[str]:
    """The notes' control line: lowest load per class, highest load aggregate and per user,
    acceptance (the closed-loop concurrencies, or the open-loop rates of a campaign of rates)."""
    cells = []
    for cls in classes:
        r = rows.get((cls, *low))
        cells.append(f"{tok(r.agg_tok_s)} ({pct(r.spread)})" if r else "-")
    for cls in classes if top != low else ():
        r = rows.get((cls, *top))
        cells.append(f"{tok(r.agg_tok_s)} / {tok(r.per_user_tok_s)} ({pct(r.spread)}, {r.status})"
                     if r else "-")
    for cls in classes:
        r = rows.get((cls, *low))
        cells.append(acceptance_text(r) if r else "-")
    return cells


def controls(view: RunView) -> list[str]:
    classes, loads = view.classes(), view.loads()
    if not loads:
        return ["## Controls", "", "No throughput rows.", ""]
    closed = [load for load in loads if not load[1]]
    low, top = (closed[0], closed[-1]) if closed else (loads[0], loads[-1])
    lo, hi = load_text(*low), load_text(*top)
    heads = ([f"{c} {lo} tok/s (spread)" for c in classes]
             + [f"{c} {hi} agg / per user (spread)" for c in classes if top != low]
             + [f"{c} {lo} accept len / rate" for c in classes])
    ctl_windows = [ws for ws in view.windows() if ws.window == CONTROL]
    lines = ["## Controls", "", "Each session boots the control again; its row is the reference of "
             "every window in that session.", ""]
    lines += table(["session", "status", "boot s"] + heads, [
        [ws.session, ws.status, fixed(ws.boot_s, 1)] + control_row_cells(
            view.rows_of(ws.session, CONTROL), classes, low, top) for ws in ctl_windows])
    for ws in ctl_windows:
        lines += [f"### {markdown(ws.session)}: control", ""]
        lines += window_status(view, ws)
        rows = view.rows_of(ws.session, CONTROL)
        if rows:
            figs = ["agg_tok_s", "per_user_tok_s", "ttft_ms", "decode_tok_s"]
            lines += table(["class", "C", *map(head, figs), "accept len / rate", head("spread"),
                            "reps tok/s", "prefix cache", "status", "attempts"],
                           [[r.cls, load_cell(r), *(cell(r, n) for n in figs), acceptance_text(r),
                             cell(r, "spread"), reps_text(r), cache_text(r), r.status, r.attempts]
                            for r in rows.values()])
            lines += latency_table(rows.values(), slo_text(view))
            lines += turns_table(view, rows.values())
        lines += verdict_lines(view, ws) + [""] + history(view, ws)
    return lines + drift(view)


def drift(view: RunView) -> list[str]:
    sessions = [ws.session for ws in view.windows() if ws.window == CONTROL]
    if len(sessions) < 2:
        return boot_noise(view)
    shapes = list(dict.fromkeys(r.shape for r in view.rows if r.window == CONTROL))
    j = judgement_of(view)
    if view.state.session_places:
        return place_drift(view, sessions, shapes) + boot_noise(view) + drift_receipt(view)
    body = []
    for cls, c, rate in shapes:
        cells, prev = [], None
        for s in sessions:
            r = view.rows_of(s, CONTROL).get((cls, c, rate))
            cell = f"{tok(r.agg_tok_s)} ({pct(r.spread)})" if r else "-"
            if r and prev:
                cell += f", {delta(r, prev, j).text()}"
            cells.append(cell)
            prev = r or prev
        body.append([cls, load_text(c, rate) if rate else str(c), *cells])
    lines = ["### Control drift across sessions", "",
             "Each control row against the previous session's control row of the same shape, with "
             "its 95 % interval (the noise between boots counted). The control is the same "
             "configuration every time: a drift called an effect is a server that moved more than "
             "its boots do.", ""]
    lines += table(["class", "C"] + sessions, body)
    return lines + boot_noise(view) + drift_receipt(view)


def place_drift(view: RunView, sessions: list[str], shapes: list[tuple[str, int, float | None]]
                ) -> list[str]:
    """Sessions on places: within a place against the session before it there (what the run's
    drift check compared: that one had ended), and across places after the run."""
    places = view.state.session_places
    j = judgement_of(view)
    first = next((s for s in sessions if s in places), "")
    per, across = [], []
    for cls, c, rate in shapes:
        rows = {s: view.rows_of(s, CONTROL).get((cls, c, rate)) for s in sessions}
        for s in sessions:
            r = rows[s]
            if r is None:
                continue
            cell = f"{tok(r.agg_tok_s)} ({pct(r.spread)})"
            prev = next((p for p in earlier_sessions(sessions, places, s) if rows.get(p)), None)
            per.append([places.get(s, "-"), s, f"{cls} {load_text(c, rate)}", cell,
                        f"{prev}-{CONTROL}" if prev else "- (first on its place)",
                        delta(r, rows[prev], j).text() if prev else "-"])
            if first and places.get(s, places[first]) != places[first]:
                across.append([places[s], s, f"{cls} {load_text(c, rate)}", cell,
                               delta(r, rows[first], j).text()])
    lines = ["### Control drift per place", "",
             "Each control row against the control row of the session that ran before it on the same "
             "place: the comparison the run's drift check made as the control ended (`drift.json`), "
             "when that session had ended; a session on another place may still have been running.",
             ""]
    lines += table(["place", "session", "shape", "tok/s (spread)", "compared with", "Δ"], per)
    if across:
        lines += ["### Control drift across places", "",
                  f"After the run, each control row on another place against {code(f'{first}-{CONTROL}')} "
                  f"(place {code(places[first])}, the first session): the places are compared through "
                  "their controls only.", ""]
        lines += table(["place", "session", "shape", "tok/s (spread)", f"Δ vs {first}-{CONTROL}"],
                       across)
    return lines


def _num(d: object, key: str) -> float | None:
    """A figure of a receipt's row, None where the row has none (or something else there)."""
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def drift_receipt(view: RunView) -> list[str]:
    lines: list[str] = []
    data = read_json(view.dir / "drift.json")
    found = data.get("rows")
    rows: list[Any] = found if isinstance(found, list) else []
    for d in rows:
        at, lo, hi = (_num(d, k) for k in ("delta_pct", "delta_lo_pct", "delta_hi_pct"))
        if at is None:
            lines.append(f"- `drift.json`: {code(d)}")
            continue
        ci = f" [{lo:+.2f}, {hi:+.2f}]" if lo is not None and hi is not None else ""
        lines.append(f"- `drift.json`: {markdown(d.get('session'))} {markdown(d.get('class'))} "
                     f"C{markdown(d.get('concurrency'))} {at:+.2f} %{ci} vs "
                     f"{markdown(d.get('against'))}: {markdown(d.get('verdict'))}")
    return lines + ([""] if rows else [])


