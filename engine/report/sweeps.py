"""The report's "Trade tables" section: per sweep (engine.record.trade), each value's delta
against its session's control at every class and load, with its interval and the campaign's call,
each value's quality verdicts, and the answer in words."""

from __future__ import annotations

from engine.record.trade import SEPARATES, Outcome, Trade, shape_text, trades
from engine.report.run import RunView
from engine.report.text import rule_of, table
from engine.sanitize import Md, markdown
from engine.words import Check

MARK = {Outcome.BETTER: " **better**", Outcome.WORSE: " **worse**", Outcome.EQUIVALENT: " equivalent",
        Outcome.UNDETERMINED: "", Outcome.NO_FIGURE: ""}


def quality_text(view: RunView, session: str, window: str) -> str:
    """A value's quality, as its window's verdicts say it (greedy; teacher-forced or KL)."""
    ws = view.state.windows.get(f"{session}-{window}")
    if ws is None:
        return "-"
    said = [f"{check} {v['verdict']}" for check in (Check.GREEDY, Check.TEACHER_FORCED, Check.KL)
            if (v := ws.verdicts.get(check))]
    return "; ".join(said) or "not measured"


def trade_lines(view: RunView, t: Trade) -> list[str]:
    rows: list[list[str | Md]] = [[f"{t.label('control')}", *(["0 (the reference)"] * len(t.shapes)),
                                   "reference"]]
    for window, _ in t.values:
        # A cell: its figures (ruler's), the call in words, bold where it separates.
        rows.append([f"{t.label(window)} ({window})",
                     *[Md(markdown(t.cells[(window, s)].text()) + MARK[t.cells[(window, s)].outcome])
                       for s in t.shapes],
                     quality_text(view, t.session, window)])
    return [f"### {markdown(t.sweep)} ({markdown(t.axis)}), session {markdown(t.session)}", "",
            f"**{markdown(t.answer)}**: {markdown(t.words)}.", ""] + table(
        ["value", *[shape_text(s) for s in t.shapes], "quality"], rows)


def section(view: RunView) -> list[str]:
    found = trades(view.state, rule_of(view))
    if not found:
        return []
    out = ["## Trade tables", "",
           "Each swept value against its session's control, per class and load: the delta of the "
           "reps' tok/s with its 95 % interval (the noise between boots counted), **better** or "
           "**worse** where the campaign calls an effect, **equivalent** where it shows none "
           f"({rule_of(view).text()}). The answer: one value wins "
           "everywhere, a trade (which class is best at which value), or no value separates.", ""]
    for t in found:
        out += trade_lines(view, t)
        calls = sum(j.outcome in SEPARATES for j in t.cells.values())
        out += [f"{calls} of {len(t.cells)} cells separate from the control.", ""]
    return out
