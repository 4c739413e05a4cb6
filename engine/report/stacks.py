"""The report's section on windows on another stack: per class, whether both stacks were sent the
same token ids (the parity event, engine.quality.stacks), the delta against the control or why it
is withheld, and the quality across stacks (greedy agreement, KL against the control)."""

from __future__ import annotations

from engine.report.run import RunView
from engine.report.text import table, verdict
from engine.words import Check, load_text


def section(view: RunView) -> list[str]:
    stacked = [ws for ws in view.windows() if ws.stack]
    if not stacked:
        return []
    rows = []
    for ws in stacked:
        greedy = ws.verdicts.get(Check.GREEDY, {}).get("summary", "-")
        kl = ws.verdicts.get(Check.KL, {}).get("summary", "-")
        for r in view.rows_of(ws.session, ws.window).values():
            said = ws.parity.get(r.cls, {}).get("verdict", "not compared")
            rows.append([f"{ws.session}-{ws.window}", ws.stack, r.cls,
                         load_text(r.concurrency, r.rate), said, verdict(view, r).text(), greedy, kl])
    return ["## Across stacks", "",
            "Windows on another stack than the control's (`server:` in the campaign). Before "
            "measuring, each stack rendered and tokenized every prompt of every class itself and "
            "the ids were compared (`parity.json` in the window's directory); a delta across a "
            "class that is not token-identical is withheld unless `verdict.allow_different`. "
            "Greedy agreement is a figure, not a verdict; KL is against the control's stack.", ""
            ] + table(["window", "stack", "class", "load", "parity", "Δ tok/s [95 %]",
                       "greedy", "KL"], rows)
