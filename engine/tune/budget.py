"""The tune's budget: before each round its boots (each session's control and each window) are
counted against ``budget.windows``, and their time against ``budget.minutes``, estimated from the
seconds a window took (boot to end) in the ``--baseline`` run, else in the rounds done so far."""

from __future__ import annotations

from pathlib import Path

from engine.record import results
from engine.record.snapshot import fold_journal
from engine.tune.rounds import Round, RoundPlan
from engine.tune.spec import Tune


def seconds_per_boot(run_dir: Path) -> float | None:
    """A baseline run's (or a round's) mean seconds a window took, boot to end."""
    state = fold_journal(run_dir / results.JOURNAL)
    spans = [ws.ended_ts - ws.started_ts for ws in state.windows.values()
             if ws.started_ts and ws.ended_ts]
    return sum(spans) / len(spans) if spans else None


def over_budget(tune: Tune, plan: RoundPlan, spent: int, per_boot: float | None, done: list[Round]) -> str:
    """Why the next round cannot be paid for ("" when it can)."""
    budget = tune.spec.budget
    if budget.windows is not None and spent + plan.boots > budget.windows:
        return (f"budget: round {plan.number} needs {plan.boots} boots, {budget.windows - spent} of "
                f"{budget.windows} left")
    if budget.minutes is not None:
        if per_boot is None:
            return "" if not done else "budget: no window's time to estimate from"
        used = sum(r.seconds for r in done) / 60
        need = plan.boots * per_boot / 60
        if used + need > budget.minutes:
            return (f"budget: round {plan.number} needs about {need:.0f} min ({plan.boots} boots at "
                    f"{per_boot:.0f} s), {budget.minutes - used:.0f} of {budget.minutes:g} min left")
    return ""
