"""Quality verdicts of a window, from the journal's ``verdict`` events, with their receipts."""

from __future__ import annotations

from typing import Any

from engine.record.state import WindowState
from engine.report.run import RunView
from engine.report.text import link
from engine.sanitize import Md, markdown
from engine.words import CONTROL, Check, WindowStatus

# Keyed by str: a journal's verdicts are keyed by the check's name (a Check is its name).
CHECK_LABELS: dict[str, str] = {
    Check.KNOBS: "ruler check", Check.GREEDY: "greedy", Check.TEACHER_FORCED: "teacher-forced |Δlogp|",
    Check.SELF_SCORE: "self-score", Check.KL: "KL", Check.NO_EFFECT: "no observable effect",
    Check.TOOL_PROBE: "tool calls", Check.DRIFT: "control drift", Check.REFERENCE: "reference",
}


def expected_checks(view: RunView, ws: WindowState) -> list[Check]:
    """The checks a window of this campaign should carry: missing ones read "not measured"."""
    c = view.campaign
    if c is not None and not c.quality.enabled:
        return []
    checks = ([Check.GREEDY, Check.SELF_SCORE] if ws.window == CONTROL
              else [Check.GREEDY, Check.TEACHER_FORCED, Check.NO_EFFECT])
    if view.lossy(ws.window):
        checks.append(Check.KL)
    if c is None or (view.knobs(ws.window) and c.quality.knobs_check):
        checks.insert(0, Check.KNOBS)
    return checks


def figure(ws: WindowState, check: str, key: str) -> Any:
    return (ws.verdicts.get(check, {}).get("figures") or {}).get(key)


def verdict_cell(view: RunView, ws: WindowState, check: str) -> str:
    """The summary table's short form of one check."""
    if ws.status == WindowStatus.REJECTED:
        return WindowStatus.REJECTED
    v = ws.verdicts.get(check)
    c = view.campaign
    if v is None and check == Check.KNOBS and c is not None and c.quality.enabled \
            and not view.knobs(ws.window):
        return "no knobs"  # nothing to check, rather than a check that did not happen
    if v is None:
        return "not measured"
    if check == Check.GREEDY and figure(ws, check, "n") is not None:
        return f"{figure(ws, check, 'identical')}/{figure(ws, check, 'n')}"
    if check == Check.TEACHER_FORCED and figure(ws, check, "p99") is not None:
        return f"{figure(ws, check, 'p99'):.3g}"
    if check == Check.KL and figure(ws, check, "mean") is not None:
        return f"{figure(ws, check, 'mean'):.4g} ({v['verdict']})"
    return str(v["verdict"])


def verdict_lines(view: RunView, ws: WindowState) -> list[str]:
    expected = expected_checks(view, ws)
    if not ws.verdicts:
        why = "quality checks off in the campaign" if not expected else "no verdict in the journal"
        return [f"- quality checks: not measured ({why})"]
    order = [c for c in CHECK_LABELS if c in ws.verdicts] + [c for c in ws.verdicts
                                                             if c not in CHECK_LABELS]
    out = []
    for check in order:
        v = ws.verdicts[check]
        receipt = link(view, v.get("file"))
        said = str(v.get("summary") or "")
        said = said if said.lower().startswith(str(v["verdict"]).lower()) else (
            f"{v['verdict']}: {said}" if said else str(v["verdict"]))
        # A summary may quote what the server said or generated: inert in the document.
        label = Md(CHECK_LABELS[check]) if check in CHECK_LABELS else markdown(check)
        out.append(f"- **{label}**: {markdown(said)}"
                   + (f" ({receipt})" if receipt else ""))
    out += [f"- **{CHECK_LABELS[c]}**: not measured" for c in expected if c not in ws.verdicts]
    return out

