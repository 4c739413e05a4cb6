"""The sweep view's text: each sweep's trade table as it stands (engine.record.trade), computed
from the run's state at every redraw, so it fills in while the sweep runs. No Textual here."""

from __future__ import annotations

from engine.method.verdict import Rule
from engine.record.state import RunState
from engine.record.trade import Outcome, Trade, shape_text, trades
from engine.words import CONTROL
from tui.core.fmt import Seg

TAGS = {Outcome.BETTER: "success", Outcome.WORSE: "error", Outcome.EQUIVALENT: "",
        Outcome.UNDETERMINED: "muted", Outcome.NO_FIGURE: "muted"}
MARKS = {Outcome.BETTER: " better", Outcome.WORSE: " worse", Outcome.EQUIVALENT: " equiv",
         Outcome.UNDETERMINED: "", Outcome.NO_FIGURE: ""}


def picked_sweep(state: RunState, wkey: str | None) -> str | None:
    """The sweep of the window under the cursor, if it is one of a sweep's."""
    ws = state.windows.get(wkey or "")
    if ws is None:
        return None
    return next((name for name, spec in state.sweeps.items() if ws.window in (spec.get("windows") or {})),
                None)


def status_of(state: RunState, t: Trade, window: str) -> str:
    ws = state.windows.get(f"{t.session}-{window}")
    return ws.status if ws is not None else "pending"


def trade_lines(state: RunState, t: Trade, width: int = 18) -> list[Seg]:
    """One sweep in one session: a line per value (the control's first), a column per shape."""
    head = f"{'value':<{width}}" + "".join(f"{shape_text(s):>24}" for s in t.shapes)
    out: list[Seg] = [(f"{t.sweep} ({t.axis}), session {t.session}", "bold"), (head, "muted"),
                      (f"{t.label(CONTROL):<{width}}" + "".join(f"{'0 (reference)':>24}" for _ in t.shapes),
                       "")]
    for window, _ in t.values:
        cells = [t.cells[(window, s)] for s in t.shapes]
        best = next((c.outcome for c in cells if c.outcome in (Outcome.BETTER, Outcome.WORSE)),
                    Outcome.UNDETERMINED)
        text = f"{t.label(window):<{width}}" + "".join(
            f"{(c.text() if c.delta is not None else status_of(state, t, window)) + MARKS[c.outcome]:>24}"
            for c in cells)
        out.append((text, TAGS[best]))
    return out + [(f"{t.answer}: {t.words}", "accent"), ("", "")]


def sweep_lines(state: RunState, rule: Rule, sweep: str | None = None) -> list[Seg]:
    """Every sweep's table (or the one named), or why there is none."""
    found = [t for t in trades(state, rule) if sweep is None or t.sweep == sweep]
    if not found:
        return [("no sweep in this campaign" if not state.sweeps else "no value measured yet", "muted")]
    return [line for t in found for line in trade_lines(state, t)]
