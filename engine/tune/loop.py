"""The tune's loop: plan the next round, pay for it from the budget, write its campaign, run it
(or resume it) to its end, judge it, and go on from the incumbent it leaves; then say what it
found (engine.tune.summary).

A round's run is an ordinary run: the loop is handed what starts one (:class:`Launcher`, the
command's ``engine.commands.launch``), so the tuner sits below the commands that start processes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from engine.campaign.yamlmarks import load_marked
from engine.errors import EXIT_OK, EXIT_STOPPED, BadInput
from engine.record import results
from engine.record.liveness import lock_state
from engine.record.snapshot import fold_journal
from engine.sanitize import terminal
from engine.tune import journal
from engine.tune.budget import over_budget, seconds_per_boot
from engine.tune.judge import judge_round
from engine.tune.rounds import Round, after, next_plan, round_campaign
from engine.tune.spec import Tune
from engine.tune.summary import summary, tune_md
from engine.words import RunStatus

SUMMARY_JSON = "tune.json"
SUMMARY_MD = "tune.md"


@dataclass(frozen=True)
class Launcher:
    """What starts a round's run (the command's, from ``engine.commands.launch``)."""

    prepare: Callable[[str, str, str | None], Path]  # (campaign file, results dir, runtime) -> run dir
    refuse_damaged: Callable[[Path], None]  # BadInput for a run whose journal is damaged
    run_engine: Callable[[Path, bool], int]  # (run dir, echo): runs or resumes it to its end
    ruler: str = "ruler"  # how to name ruler in a command printed for the operator


def run_tune(tune: Tune, tune_dir: Path, baseline: str | None, runtime: str | None,
             launch: Launcher) -> int:
    """Every round from the journal's last, to the tune's end; the exit code."""
    events = journal.read(tune_dir)
    started = {e["round"]: e for e in events if e["kind"] == "round_started"}
    finished = {e["round"] for e in events if e["kind"] == "round_done"}
    raw = load_marked(tune.base.source_text).data
    incumbent: dict[str, Any] = dict(raw["control"].get("args") or {})
    start = dict(incumbent)
    per_boot = seconds_per_boot(Path(baseline)) if baseline else None
    if per_boot is not None:
        print(f"tune: {per_boot:.0f} s a window in {baseline} (boot to end): the estimate of each round")
    done: list[Round] = []
    spent = 0
    stop = ""
    while True:
        # An axes round that kept nothing ends the tune by its own answer, whatever round it was.
        plan = next_plan(tune, incumbent, done)
        if plan is None:
            stop = ("nothing separates from the incumbent" if done else "the space has no candidate")
            break
        if len(done) >= tune.spec.max_rounds:
            stop = f"max_rounds {tune.spec.max_rounds} reached"
            break
        ev = started.get(plan.number)
        if ev is None:
            over = over_budget(tune, plan, spent, per_boot, done)
            if over:
                stop = over
                break
            campaign = round_campaign(tune, plan.number, plan.control, plan.windows, plan.sessions)
            file = tune_dir / f"round-{plan.number}.yaml"
            results.write_atomic(file, yaml.safe_dump(campaign, sort_keys=False, width=100))
            run_dir = launch.prepare(str(file), str(tune_dir / journal.RUNS), runtime)
            journal.append(tune_dir, "round_started", round=plan.number, round_kind=plan.kind,
                           run=journal.run_name(run_dir), control=plan.control,
                           candidates=[asdict(c) for c in plan.candidates])
            print(f"tune: round {plan.number} ({plan.kind}, {plan.boots} boots): {run_dir}; "
                  f"attach: {launch.ruler} attach {run_dir}", flush=True)
        else:
            run_dir = journal.run_dir(tune_dir, ev["run"])
            planned = [(c["session"], c["window"]) for c in ev["candidates"]]
            now = [(c.session, c.window) for c in plan.candidates]
            if ev["round_kind"] != plan.kind or planned != now:
                raise BadInput(f"{tune_dir / journal.TUNE_JOURNAL}: round {plan.number} was started as "
                               f"{ev['round_kind']} with {planned}, but the rounds before it now "
                               f"lead to {plan.kind} with {now}: the tune cannot be resumed by this ruler")
        code = run_round(run_dir, tune_dir, launch)
        if code is not None:
            return code
        rnd = Round(plan.number, plan.kind, str(run_dir), plan.control)
        judge_round(tune, rnd, run_dir, plan.candidates)
        if plan.number not in finished:
            journal.append(tune_dir, "round_done", round=plan.number,
                           candidates=[asdict(c) for c in rnd.candidates])
        for c in rnd.candidates:
            print(terminal(f"tune: round {c.round} {c.window} {json.dumps(c.change)}: {c.why}"), flush=True)
        spent += rnd.boots
        done.append(rnd)
        incumbent = after(rnd, incumbent)
        if per_boot is None and rnd.boots:
            per_boot = rnd.seconds / rnd.boots
    out = summary(tune, tune_dir, done, start, incumbent, stop)
    results.write_json(tune_dir / SUMMARY_JSON, out)
    results.write_atomic(tune_dir / SUMMARY_MD, tune_md(out))
    if not any(e["kind"] == "tune_done" for e in events):
        journal.append(tune_dir, "tune_done", stop=stop, recommended=incumbent, command=out["command"])
    print(terminal(f"tune: {stop}; recommended: {out['command']}"))
    print(f"tune: {tune_dir / SUMMARY_MD}")
    return EXIT_OK


def run_round(run_dir: Path, tune_dir: Path, launch: Launcher) -> int | None:
    """Run (or resume) a round's run to its end; an exit code when the tune must stop there. A
    resumed round stops the servers its killed engine left first (the runner does, as ``ruler
    run --resume`` does)."""
    state = fold_journal(run_dir / results.JOURNAL) if (run_dir / results.JOURNAL).exists() else None
    if state is not None and state.status == RunStatus.FINISHED:
        return None
    live, why = lock_state(run_dir)
    if live:
        raise BadInput(f"an engine is still running {run_dir}: wait for it, or attach to it")
    if live is None:
        raise BadInput(f"whether an engine still runs {run_dir} is unknown: {why}")
    if state is not None:
        launch.refuse_damaged(run_dir)
    launch.run_engine(run_dir, True)
    state = fold_journal(run_dir / results.JOURNAL)
    if state.status == RunStatus.ABORTED:
        print(f"tune: round stopped; continue with: {launch.ruler} tune --resume {tune_dir}", file=sys.stderr)
        return EXIT_STOPPED
    if state.status != RunStatus.FINISHED:
        raise BadInput(f"the round's run {run_dir} ended {state.status}: {state.error}")
    return None
