"""The report's "Capacity at an SLA" section: each window's capacity per class (the band its
probes showed), against its session's control's (engine.method.capacity.versus), and every probe
with its verdict and the row that holds its receipts."""

from __future__ import annotations

from typing import Any

from engine.method.capacity import Answer, Found, versus
from engine.record.state import capacity_key
from engine.report.run import RunView
from engine.report.text import table
from engine.sanitize import markdown
from engine.words import CONTROL, load_label


def answer_of(event: dict[str, Any]) -> Answer | None:
    """A journaled capacity answer as the search's own; None for an event that holds no answer
    this ruler knows (a damaged or hand-edited journal): its row says so, the report goes on."""
    try:
        return Answer(Found(event["found"]), event.get("lo"), event.get("hi"),
                      tuple(event.get("mixed") or ()), None, len(event.get("probes") or ()))
    except (KeyError, ValueError, TypeError):
        return None


def unit(over: str) -> str:
    return "req/s" if over == "rate" else "concurrent"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def probe_text(over: str, probe: Any) -> str:
    try:
        load = probe["load"]
        label = load_label(0, float(load)) if over == "rate" else load_label(int(load))
        return f"{label} {probe['probe']} ({probe['held']}/{probe['reps']})"
    except (KeyError, ValueError, TypeError):
        return "a probe this ruler cannot read"


def section(view: RunView) -> list[str]:
    caps = view.state.capacity
    if not caps:
        return []
    first = next(iter(caps.values()))
    out = ["## Capacity at an SLA", "",
           f"The highest {'rate' if first['over'] == 'rate' else 'concurrency'} at which "
           f"{markdown(first['criteria'])} held in every rep of a probe, by a bracketing search "
           "(each probe an ordinary row, its receipts under reps/). The band: the highest load shown to hold "
           "(the capacity) and the lowest shown to fail; a probe whose reps disagreed is *mixed* "
           "and stays inside it. Against the control: the capacities' ratio, the range the two "
           "bands allow, and higher or lower only where the bands do not overlap.", ""]
    rows = []
    for e in caps.values():
        mine = answer_of(e)
        probes: list[Any] = e["probes"] if isinstance(e.get("probes"), list) else []
        if mine is None:
            rows.append([e["session"], e["window"], e["class"], "-", "-",
                         "unreadable: the journal's capacity event holds no search answer", "-",
                         ", ".join(probe_text(e["over"], p) for p in probes)])
            continue
        ctl_event = caps.get(capacity_key(e["session"], CONTROL, e["class"]))
        ctl = answer_of(ctl_event) if ctl_event is not None else None
        vs = "control" if e["window"] == CONTROL else "no control capacity"
        if e["window"] != CONTROL and ctl is not None:
            v = versus(mine, ctl)
            vs = (f"{_pct(v.delta)} [{_pct(v.lo)}, {_pct(v.hi)}]: {v.call}" if v.delta is not None
                  else v.call)
        rows.append([e["session"], e["window"], e["class"],
                     "-" if mine.lo is None else f"{mine.lo:g}",
                     mine.band_text(), str(mine.found), vs,
                     ", ".join(probe_text(e["over"], p) for p in probes)])
    return out + table(["session", "window", "class", f"capacity ({unit(first['over'])})", "band",
                        "search", "vs control", "probes (reps that held)"], rows) + [""]
