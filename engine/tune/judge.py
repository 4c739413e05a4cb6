"""A round judged from its run: each candidate's delta on the objective and the campaign's call on
it (``engine.record.trade.cell_of``, the one verdict the trade tables use too), its quality
verdicts, and whether it is kept (better, and its quality holds) or ruled out, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any, assert_never

from engine.method.capacity import versus
from engine.record import results
from engine.record.events import EventKind
from engine.record.journal import read_kinds
from engine.record.snapshot import fold_journal
from engine.record.state import RunState, WindowState, capacity_key
from engine.record.trade import Cell, Outcome, cell_of
from engine.report.capacity import answer_of
from engine.sanitize import Md, markdown
from engine.tune.rounds import Candidate, Round
from engine.tune.spec import Tune
from engine.words import CONTROL, Check, Verdict, WindowStatus

LOSSLESS_OK = {Verdict.EXACT, Verdict.CLOSE}


def quality_of(ws_verdicts: dict[str, dict[str, Any]], lossy: bool,
               kl_max: float) -> tuple[dict[str, str], bool, str]:
    """A window's quality verdicts, whether they hold for a value to be kept, and why not."""
    said = {c: str(v.get("verdict")) for c, v in ws_verdicts.items()
            if c in (Check.GREEDY, Check.TEACHER_FORCED, Check.KL)}
    if lossy:
        kl = ws_verdicts.get(Check.KL, {}).get("figures", {}).get("mean")
        if kl is None:
            return said, False, "no KL measured"
        said["kl_mean"] = f"{kl:.4g}"
        return said, kl <= kl_max, "" if kl <= kl_max else f"KL mean {kl:.4g} > kl_max {kl_max:g}"
    greedy, tf = said.get(Check.GREEDY), said.get(Check.TEACHER_FORCED)
    if greedy != Verdict.IDENTICAL:
        return said, False, f"greedy {greedy or 'not measured'}"
    if tf not in LOSSLESS_OK:
        return said, False, f"teacher-forced {tf or 'not measured'}"
    return said, True, ""


def objective_of(tune: Tune, state: RunState, session: str, window: str) -> Cell:
    """The campaign's verdict on the window against its session's control, on the objective."""
    cls = tune.goal_class()
    goal = tune.spec.objective.tok_s
    if goal is not None:
        c, rate = tune.goal_load()
        return cell_of(state, tune.base.verdict.rule(), session, window, cls, c, rate)
    mine_event = state.capacity.get(capacity_key(session, window, cls))
    ctl_event = state.capacity.get(capacity_key(session, CONTROL, cls))
    mine = answer_of(mine_event) if mine_event is not None else None
    ctl = answer_of(ctl_event) if ctl_event is not None else None
    if mine is None or ctl is None:
        return Cell(None, None, None, Outcome.NO_FIGURE, "no capacity answer")
    v = versus(mine, ctl)
    outcome = (Outcome.BETTER if v.call.startswith("higher") else Outcome.WORSE if v.call.startswith("lower")
               else Outcome.UNDETERMINED if v.delta is not None else Outcome.NO_FIGURE)
    return Cell(v.delta, v.lo, v.hi, outcome, "" if v.delta is not None else v.call)


def no_figure_why(ws: WindowState | None) -> Md:
    """Why a candidate whose window was rejected, failed or not run has no figure. The window's
    reason may quote the server (an error body, a log line): inert in tune.md's table and list."""
    return Md(f"no figure: the window was {ws.status if ws else 'not run'}" + (
        f" ({markdown(ws.reason)})" if ws and ws.reason else ""))


def decision(j: Cell, holds: bool, bad: str) -> Md:
    """A candidate's decision in words, for every call the verdict can make: markdown, ruler's
    words and figures, and what a run's record said (a quality verdict, why there is no figure)
    through markdown()."""
    return Md(_decision(j, holds, markdown(bad)))


def _decision(j: Cell, holds: bool, bad: str) -> str:
    figure = j.text()
    match j.outcome:
        case Outcome.BETTER:
            return (f"kept: better on the objective ({figure}), quality holds" if holds else
                    f"ruled out: {bad} (better on the objective, {figure})")
        case Outcome.WORSE:
            return f"ruled out: worse ({figure})"
        case Outcome.EQUIVALENT:
            return f"ruled out: no gain, equivalent to the control within the margin ({figure})"
        case Outcome.UNDETERMINED:  # the campaign's reason: not called, or not shown within the margin
            why = f": {markdown(j.why)}" if j.why else ""
            return f"ruled out: undetermined ({figure}{why})"
        case Outcome.NO_FIGURE:
            return f"ruled out: no figure ({markdown(j.why or 'no row to judge')})"
        case _:
            assert_never(j.outcome)


def judge_round(tune: Tune, rnd: Round, run_dir: Path, plan: list[Candidate]) -> None:
    state = fold_journal(run_dir / results.JOURNAL)
    goal = tune.spec.objective.tok_s
    goal_row = f"{tune.goal_class()}/{goal.load}" if goal else f"{tune.goal_class()} (capacity)"
    starts = [ws.started_ts for ws in state.windows.values() if ws.started_ts]
    ends = [ws.ended_ts for ws in state.windows.values() if ws.ended_ts]
    rnd.boots = sum(1 for ws in state.windows.values() if ws.started_ts)
    rnd.seconds = (max(ends) - min(starts)) if starts and ends else 0.0
    for e in read_kinds(run_dir / results.JOURNAL, {EventKind.WINDOW_STARTED}):
        plan_of = e.get("plan") or {}
        argv = plan_of.get("argv")
        if isinstance(argv, list) and not e.get("tag"):
            rnd.argv[f"{e['session']}-{e['window']}"] = operator_argv(plan_of)
    for cand in plan:
        ws = state.windows.get(f"{cand.session}-{cand.window}")
        cand.run = str(run_dir)
        if ws is None or ws.status in (WindowStatus.REJECTED, WindowStatus.FAILED):
            cand.why = no_figure_why(ws)
            rnd.candidates.append(cand)
            continue
        j = objective_of(tune, state, cand.session, cand.window)
        cand.delta, cand.lo, cand.hi, cand.call = j.delta, j.lo, j.hi, str(j.outcome)
        cand.quality, cand.quality_holds, bad = quality_of(ws.verdicts, cand.lossy, tune.spec.kl_max)
        cand.receipts = [f"windows/{ws.key}", f"throughput.csv {cand.session}-{cand.window}/{goal_row}"] + [
            v["file"] for c, v in ws.verdicts.items()
            if v.get("file") and c in (Check.GREEDY, Check.TEACHER_FORCED, Check.KL)]
        cand.kept = j.outcome == Outcome.BETTER and cand.quality_holds
        cand.why = decision(j, cand.quality_holds, bad)
        rnd.candidates.append(cand)


LISTEN = ("--host", "--port")  # where ruler had the server listen: each run picks its own


def operator_argv(plan: dict[str, Any]) -> list[str]:
    """A window's argv as the operator would run it: without the arguments ruler added (its log
    verbosity, its listening address), which the plan counts (``ruler_args``); a plan of an
    earlier ruler, without that count, loses only its listening address."""
    argv = [str(a) for a in plan.get("argv") or []]
    added = plan.get("ruler_args")
    if isinstance(added, int) and not isinstance(added, bool) and 0 <= added <= len(argv):
        return argv[:len(argv) - added]
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in LISTEN:
            skip = True
        else:
            out.append(arg)
    return out
