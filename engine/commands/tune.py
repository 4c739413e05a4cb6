"""``ruler tune TUNE.yaml``: a search for the best launch flags, anchored to the control.

Each round is an ordinary run (its own run directory under the tune's ``runs/``, its journal, the
console by ``ruler attach``, ``--resume``, the campaign's places), whose control is the incumbent:

- an *axes* round: every flag of the space alone, each candidate value a window of a sweep, each
  sweep in a session of its own with the incumbent booted again as its control. A value is kept
  when the campaign's verdict (engine.record.trade.judged) calls it better on the objective and its
  quality holds (lossless: greedy identical and teacher-forced |dlogp| exact or close; lossy: KL
  mean at most ``kl_max``); the best kept value of each flag is its winner.
- a *combine* round, when two flags or more have winners: the best single change is the control,
  the others' winners on top of it the one window. The combination becomes the incumbent only
  when it is better than the best single change by the same verdict, and its quality holds; else
  the best single change does.

It stops when an axes round finds nothing better than the incumbent, when the budget (boots, or
minutes estimated from ``--baseline``'s windows or the rounds so far) cannot pay for the next
round, or after ``max_rounds``. ``tune.md`` and ``tune.json`` hold the recommended launch command,
every candidate's evidence (its delta and interval on the objective, the call, its quality
verdicts, its run, window and rows), and what was ruled out and why, "no decision" included.

The tune's own journal (``tune.jsonl``) records each round's run directory; everything decided is
derived again from the rounds' runs, so ``ruler tune --resume TUNE_DIR`` after a kill -9 resumes
the round in flight at its exact rep and goes on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine import files
from engine.campaign.load import SpecError
from engine.campaign.yamlmarks import load_marked
from engine.commands.invocation import ruler_command
from engine.commands.launch import prepare, refuse_damaged, run_engine
from engine.commands.tunespec import Tune, load_tune, round_campaign, slug
from engine.errors import EXIT_OK, EXIT_STOPPED, BadInput
from engine.method.capacity import versus
from engine.record import results
from engine.record.events import EventKind
from engine.record.journal import read_kinds
from engine.record.liveness import engine_alive
from engine.record.snapshot import fold_journal
from engine.record.state import RunState, WindowState, capacity_key
from engine.record.trade import Call, Judged, judged, value_text
from engine.report.capacity import answer_of
from engine.sanitize import markdown, terminal
from engine.words import CONTROL, Check, RunStatus, Verdict, WindowStatus

JOURNAL = "tune.jsonl"
FROZEN = "tune.yaml"
LOSSLESS_OK = {Verdict.EXACT, Verdict.CLOSE}


@dataclass
class Candidate:
    """One window of a round and what was decided of it."""

    round: int
    kind: str  # axes | combine
    session: str
    window: str
    change: dict[str, Any]  # flag -> value, over the round's control
    lossy: bool
    delta: float | None = None
    lo: float | None = None
    hi: float | None = None
    call: str = Call.NO_FIGURE
    quality: dict[str, str] = field(default_factory=dict)  # check -> verdict (and KL mean)
    quality_holds: bool = False
    kept: bool = False
    why: str = ""
    run: str = ""
    receipts: list[str] = field(default_factory=list)


@dataclass
class Round:
    number: int
    kind: str
    run: str
    control: dict[str, Any]  # the round's control args (the incumbent, or the best single change)
    candidates: list[Candidate] = field(default_factory=list)
    boots: int = 0
    seconds: float = 0.0  # from the first window's start to the last one's end
    argv: dict[str, list[str]] = field(default_factory=dict)  # window (and control) -> its argv


# --- the tune's own journal ------------------------------------------------------------------

def _append(tune_dir: Path, event: str, **data: Any) -> None:
    assert "kind" not in data, "a field named kind would hide the event's kind"
    with open(tune_dir / JOURNAL, "a") as f:
        line = {"kind": event, "ts": dt.datetime.now().timestamp(), **data}
        f.write(json.dumps(line, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _events(tune_dir: Path) -> list[dict[str, Any]]:
    path = tune_dir / JOURNAL
    if not path.exists():
        return []
    try:
        lines = files.read_text(path).splitlines()
    except files.Unreadable as exc:  # a FIFO, a device, a sparse file: never waited on or read
        raise BadInput(f"{path}: {exc}") from None
    out = []
    for i, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines):  # only the last line may be torn (a kill mid-write): it is left out
                raise BadInput(f"{path}:{i}: not a JSON line; ruler will not resume a damaged tune "
                               "journal") from None
    return out


# --- judging a round from its run ------------------------------------------------------------

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


def objective_of(tune: Tune, state: RunState, session: str, window: str) -> Judged:
    """The campaign's verdict on the window against its session's control, on the objective."""
    cls = tune.goal_class()
    goal = tune.spec.objective.tok_s
    if goal is not None:
        c, rate = next((c, r) for c, r in tune.base.workload.loads()
                       if (f"r{r:g}" if r else f"c{c}") == goal.load)
        return judged(state, tune.base.verdict.rule(), session, window, cls, c, rate)
    mine = state.capacity.get(capacity_key(session, window, cls))
    ctl = state.capacity.get(capacity_key(session, CONTROL, cls))
    if mine is None or ctl is None:
        return Judged(None, None, None, Call.NO_FIGURE, "no capacity answer")
    v = versus(answer_of(mine), answer_of(ctl))
    call = (Call.BETTER if v.call.startswith("higher") else Call.WORSE if v.call.startswith("lower")
            else Call.UNDETERMINED if v.delta is not None else Call.NO_FIGURE)
    return Judged(v.delta, v.lo, v.hi, call, "" if v.delta is not None else v.call)


def no_figure_why(ws: WindowState | None) -> str:
    """Why a candidate whose window was rejected, failed or not run has no figure. The window's
    reason may quote the server (an error body, a log line): inert in tune.md's table and list."""
    return f"no figure: the window was {ws.status if ws else 'not run'}" + (
        f" ({markdown(ws.reason)})" if ws and ws.reason else "")


def judge_round(tune: Tune, rnd: Round, run_dir: Path, plan: list[Candidate]) -> None:
    state = fold_journal(run_dir / results.JOURNAL)
    goal = tune.spec.objective.tok_s
    goal_row = f"{tune.goal_class()}/{goal.load}" if goal else f"{tune.goal_class()} (capacity)"
    starts = [ws.started_ts for ws in state.windows.values() if ws.started_ts]
    ends = [ws.ended_ts for ws in state.windows.values() if ws.ended_ts]
    rnd.boots = sum(1 for ws in state.windows.values() if ws.started_ts)
    rnd.seconds = (max(ends) - min(starts)) if starts and ends else 0.0
    for e in read_kinds(run_dir / results.JOURNAL, {EventKind.WINDOW_STARTED}):
        argv = (e.get("plan") or {}).get("argv")
        if isinstance(argv, list) and not e.get("tag"):
            rnd.argv[f"{e['session']}-{e['window']}"] = [str(a) for a in argv]
    for cand in plan:
        ws = state.windows.get(f"{cand.session}-{cand.window}")
        cand.run = str(run_dir)
        if ws is None or ws.status in (WindowStatus.REJECTED, WindowStatus.FAILED):
            cand.why = no_figure_why(ws)
            rnd.candidates.append(cand)
            continue
        j = objective_of(tune, state, cand.session, cand.window)
        cand.delta, cand.lo, cand.hi, cand.call = j.delta, j.lo, j.hi, str(j.call)
        cand.quality, cand.quality_holds, bad = quality_of(ws.verdicts, cand.lossy, tune.spec.kl_max)
        cand.receipts = [f"windows/{ws.key}", f"throughput.csv {cand.session}-{cand.window}/{goal_row}"] + [
            v["file"] for c, v in ws.verdicts.items()
            if v.get("file") and c in (Check.GREEDY, Check.TEACHER_FORCED, Check.KL)]
        cand.kept = j.call == Call.BETTER and cand.quality_holds
        cand.why = (f"kept: better on the objective ({j.text()}), quality holds" if cand.kept else
                    f"ruled out: {bad} (better on the objective, {j.text()})" if j.call == Call.BETTER else
                    f"ruled out: worse ({j.text()})" if j.call == Call.WORSE else
                    f"ruled out: no decision, the noise does not separate it ({j.text()})"
                    if j.call == Call.UNDETERMINED else f"ruled out: no figure ({j.why})")
        rnd.candidates.append(cand)


# --- planning rounds -------------------------------------------------------------------------

Windows = list[dict[str, Any]]


def _question(control: dict[str, Any], change: dict[str, Any]) -> str:
    """A candidate as the question it asks: this change over that control."""
    return json.dumps([control, change], sort_keys=True, default=list)


def asked(done: list[Round]) -> dict[str, int]:
    """Every question the rounds done have answered, and the round that answered it."""
    return {_question(r.control, c.change): r.number for r in done for c in r.candidates}


def axes_plan(tune: Tune, incumbent: dict[str, Any], number: int,
              answered: dict[str, int] | None = None) -> tuple[Windows, list[Candidate]]:
    """Each flag's values alone over the incumbent, but for those a round has already judged over
    this same incumbent (a combine round that kept the best single change has judged the others'
    winners over it): asking again would spend boots on a second draw of an answered question."""
    windows, plan = [], []
    for flag, cand in tune.spec.space.items():
        values = [v for v in cand.values if v != incumbent.get(flag)
                  and _question(incumbent, {flag: v}) not in (answered or {})]
        if not values:
            continue
        name = slug(flag)
        windows.append({"name": name, "axis": flag, "lossy": cand.lossy,
                        "sweep": {"args": {flag: [list(v) if isinstance(v, tuple) else v for v in values]}}})
    data = {"windows": windows}
    from engine.campaign.sweep import expand  # the windows and sessions the sweeps become

    expanded = expand({**data, "sessions": {}}).data
    for w in expanded["windows"]:
        session = next(s for s, names in expanded["sessions"].items() if w["name"] in names)
        flag, value = next(iter(w["change"]["args"].items()))
        plan.append(Candidate(number, "axes", session, w["name"], {flag: value},
                              tune.spec.space[flag].lossy))
    return windows, plan


def combine_plan(others: list[Candidate], number: int) -> tuple[Windows, list[Candidate]]:
    change = {k: v for c in others for k, v in c.change.items()}
    lossy = any(c.lossy for c in others)
    window = {"name": "combined", "axis": " + ".join(f"{k} {value_text(v)}" for k, v in change.items()),
              "lossy": lossy, "multi_axis": len(change) > 1, "change": {"args": change}}
    return [window], [Candidate(number, "combine", "s1", "combined", change, lossy)]


@dataclass
class Plan:
    number: int
    kind: str
    control: dict[str, Any]
    windows: list[dict[str, Any]]
    sessions: dict[str, list[str]] | None
    candidates: list[Candidate]
    control_boots: int = 1  # per session: 2 with control_position both (the control again)

    @property
    def boots(self) -> int:
        sessions = self.sessions or {c.session: [] for c in self.candidates}
        return len(self.candidates) + len(sessions) * self.control_boots


def next_plan(tune: Tune, incumbent: dict[str, Any], done: list[Round]) -> Plan | None:
    """The round after those done: axes from the incumbent; combine when the last axes round had
    two winners or more; None when the last axes round kept nothing."""
    n = len(done) + 1
    boots = 2 if tune.base.control_position == "both" else 1
    last = done[-1] if done else None
    if last is not None and last.kind == "axes":
        winners = _winners(last)
        if not winners:
            return None
        if len(winners) >= 2:
            best, *others = winners
            windows, plan = combine_plan(others, n)
            return Plan(n, "combine", {**incumbent, **best.change}, windows, {"s1": ["combined"]}, plan,
                        boots)
    windows, plan = axes_plan(tune, incumbent, n, asked(done))
    return Plan(n, "axes", dict(incumbent), windows, None, plan, boots) if plan else None


def _winners(rnd: Round) -> list[Candidate]:
    """Each flag's best kept value, the best first."""
    best: dict[str, Candidate] = {}
    for c in rnd.candidates:
        flag = next(iter(c.change))
        if c.kept and (flag not in best or (c.delta or 0) > (best[flag].delta or 0)):
            best[flag] = c
    return sorted(best.values(), key=lambda c: -(c.delta or 0))


def after(rnd: Round, incumbent: dict[str, Any]) -> dict[str, Any]:
    """The incumbent a round leaves."""
    if rnd.kind == "combine":
        combined = rnd.candidates[0]
        base = dict(rnd.control)  # the best single change
        return {**base, **combined.change} if combined.kept else base
    winners = _winners(rnd)
    if len(winners) == 1:
        return {**incumbent, **winners[0].change}
    return incumbent  # none: the tune ends; two or more: the combine round decides


# --- the budget ------------------------------------------------------------------------------

def seconds_per_boot(run_dir: Path) -> float | None:
    """A baseline run's (or a round's) mean seconds a window took, boot to end."""
    state = fold_journal(run_dir / results.JOURNAL)
    spans = [ws.ended_ts - ws.started_ts for ws in state.windows.values()
             if ws.started_ts and ws.ended_ts]
    return sum(spans) / len(spans) if spans else None


# --- the loop --------------------------------------------------------------------------------

def tune_dir_for(results_dir: Path, tune: Tune) -> Path:
    return results.new_run_dir(results_dir, f"tune-{tune.name}")


def run_tune(tune: Tune, tune_dir: Path, baseline: str | None, runtime: str | None) -> int:
    events = _events(tune_dir)
    started = {e["round"]: e for e in events if e["kind"] == "round_started"}
    raw = load_marked(tune.base.source_text).data
    incumbent: dict[str, Any] = dict(raw["control"]["args"])
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
            over = _over_budget(tune, plan, spent, per_boot, done)
            if over:
                stop = over
                break
            campaign = round_campaign(tune, plan.number, plan.control, plan.windows, plan.sessions)
            file = tune_dir / f"round-{plan.number}.yaml"
            results.write_atomic(file, yaml.safe_dump(campaign, sort_keys=False, width=100))
            run_dir = prepare(str(file), str(tune_dir / "runs"), runtime)
            _append(tune_dir, "round_started", round=plan.number, round_kind=plan.kind, run=str(run_dir),
                    control=plan.control, candidates=[asdict(c) for c in plan.candidates])
            print(f"tune: round {plan.number} ({plan.kind}, {plan.boots} boots): {run_dir}; "
                  f"attach: {ruler_command()} attach {run_dir}", flush=True)
        else:
            run_dir = Path(ev["run"])
            planned = [(c["session"], c["window"]) for c in ev.get("candidates") or []]
            now = [(c.session, c.window) for c in plan.candidates]
            if ev.get("round_kind") != plan.kind or planned != now:
                raise BadInput(f"{tune_dir / JOURNAL}: round {plan.number} was started as "
                               f"{ev.get('round_kind')} with {planned}, but the rounds before it now "
                               f"lead to {plan.kind} with {now}: the tune cannot be resumed by this ruler")
        code = _run_round(run_dir)
        if code is not None:
            return code
        rnd = Round(plan.number, plan.kind, str(run_dir), plan.control)
        judge_round(tune, rnd, run_dir, plan.candidates)
        if not any(e["kind"] == "round_done" and e["round"] == plan.number for e in events):
            _append(tune_dir, "round_done", round=plan.number,
                    candidates=[asdict(c) for c in rnd.candidates])
        for c in rnd.candidates:
            print(terminal(f"tune: round {c.round} {c.window} {json.dumps(c.change)}: {c.why}"), flush=True)
        spent += rnd.boots
        done.append(rnd)
        incumbent = after(rnd, incumbent)
        if per_boot is None and rnd.boots:
            per_boot = rnd.seconds / rnd.boots
    out = summary(tune, tune_dir, done, start, incumbent, stop)
    results.write_json(tune_dir / "tune.json", out)
    results.write_atomic(tune_dir / "tune.md", tune_md(out))
    if not any(e["kind"] == "tune_done" for e in events):
        _append(tune_dir, "tune_done", stop=stop, recommended=incumbent)
    print(f"tune: {stop}; recommended: {out['command']}")
    print(f"tune: {tune_dir / 'tune.md'}")
    return EXIT_OK


def _over_budget(tune: Tune, plan: Plan, spent: int, per_boot: float | None, done: list[Round]) -> str:
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


def _run_round(run_dir: Path) -> int | None:
    """Run (or resume) a round's run to its end; an exit code when the tune must stop there."""
    state = fold_journal(run_dir / results.JOURNAL) if (run_dir / results.JOURNAL).exists() else None
    if state is not None and state.status == RunStatus.FINISHED:
        return None
    if engine_alive(run_dir):
        raise BadInput(f"an engine is still running {run_dir}: wait for it, or attach to it")
    if state is not None:
        refuse_damaged(run_dir)
    run_engine(run_dir, echo=True)
    state = fold_journal(run_dir / results.JOURNAL)
    if state.status == RunStatus.ABORTED:
        print(f"tune: round stopped; continue with: {ruler_command()} tune --resume {run_dir.parent.parent}",
              file=sys.stderr)
        return EXIT_STOPPED
    if state.status != RunStatus.FINISHED:
        raise BadInput(f"the round's run {run_dir} ended {state.status}: {state.error}")
    return None


# --- what it says ----------------------------------------------------------------------------

def _argv_of(done: list[Round], config: dict[str, Any]) -> list[str] | None:
    """The argv ruler booted the recommended configuration with: a control or a window of a round
    whose args were those."""
    for rnd in reversed(done):
        if rnd.control == config:
            found = next((a for k, a in rnd.argv.items() if k.endswith(f"-{CONTROL}")), None)
            if found:
                return found
        for c in rnd.candidates:
            if {**rnd.control, **c.change} == config:
                found = rnd.argv.get(f"{c.session}-{c.window}")
                if found:
                    return found
    return None


LISTEN = ("--host", "--port")  # where ruler had the server listen: each run picks its own


def without_listen(argv: list[str]) -> list[str]:
    """The argv without the listening address ruler gave the server."""
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


def flags_text(args: dict[str, Any]) -> str:
    """Flags as a command line says them: a bare flag alone, a value after its flag."""
    return " ".join(k if v is True else f"{k} {value_text(v)}" for k, v in args.items()
                    if v is not None and v is not False)


def summary(tune: Tune, tune_dir: Path, done: list[Round], start: dict[str, Any],
            incumbent: dict[str, Any], stop: str) -> dict[str, Any]:
    argv = _argv_of(done, incumbent)
    changed = {k: v for k, v in incumbent.items() if start.get(k) != v}
    return {
        "tune": str(tune.path), "campaign": str(tune.base.source_path), "directory": str(tune_dir),
        "objective": tune.objective_text(), "kl_max": tune.spec.kl_max,
        "verdict_rule": ("engine.record.trade.judged: the delta against the session's control "
                         "boots with the noise between boots counted; "
                         + tune.base.verdict.rule().text() + "; otherwise no decision"),
        "space": {k: {"values": list(v.values), "lossy": v.lossy} for k, v in tune.spec.space.items()},
        "stop": stop, "start": start, "recommended": incumbent, "changed": changed,
        # Paths shown relative: the same command on another box with the same layout.
        "command": " ".join(without_listen(argv)) if argv else "(not booted as such: see recommended)",
        "rounds": [{**{k: v for k, v in asdict(r).items() if k != "argv"}} for r in done],
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def tune_md(out: dict[str, Any]) -> str:
    lines = [f"# ruler tune: {Path(out['campaign']).name}", "",
             f"Objective: {out['objective']}. Verdict: {out['verdict_rule']}. Lossless values keep "
             "greedy identical and teacher-forced |dlogp| exact or close; lossy ones a KL mean at most "
             f"{out['kl_max']:g}.", "",
             "## Recommended", "",
             f"Stopped: {out['stop']}.", "",
             "Changed from the control: " + (", ".join(f"`{flags_text({k: v})}`"
                                                       for k, v in out["changed"].items())
                                             or "nothing (the control stays)") + ".", "",
             "The command ruler booted the recommended flags with (its listening address left out):", "",
             "```", out["command"], "```", ""]
    ruled: list[str] = []
    for r in out["rounds"]:
        lines += [f"## Round {r['number']} ({r['kind']})", "",
                  f"Control: `{flags_text(r['control'])}`; "
                  f"run `{r['run']}` ({r['boots']} boots, {r['seconds'] / 60:.1f} min).", "",
                  "| window | change | delta | 95 % interval | call | quality | decision | receipts |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in r["candidates"]:
            change = flags_text(c["change"])
            quality = "; ".join(f"{k} {v}" for k, v in c["quality"].items()) or "-"
            iv = f"[{_pct(c['lo'])}, {_pct(c['hi'])}]" if c["lo"] is not None else "-"
            lines.append(f"| {c['session']}-{c['window']} | {change} | {_pct(c['delta'])} | {iv} | "
                         f"{c['call']} | {quality} | {c['why']} | {', '.join(c['receipts'])} |")
            if not c["kept"]:
                ruled.append(f"- round {r['number']}: {change}: {c['why'].removeprefix('ruled out: ')}")
        lines.append("")
    lines += ["## Ruled out", "", *(ruled or ["- nothing"]), ""]
    return "\n".join(lines)


# --- the command -----------------------------------------------------------------------------

def cmd_tune(args: argparse.Namespace) -> int:
    if args.resume:
        tune_dir = Path(args.resume)
        if not (tune_dir / FROZEN).exists():
            raise BadInput(f"{tune_dir} is not a ruler tune directory (no {FROZEN})")
        first = next((e for e in _events(tune_dir) if e["kind"] == "tune_started"), None)
        if first is None:
            raise BadInput(f"{tune_dir / JOURNAL}: no tune_started: nothing to resume")
        tune = _load(first["tune"])
        if tune.text != files.read_text(tune_dir / FROZEN):
            raise BadInput(f"{first['tune']} changed since the tune started; its frozen copy is "
                           f"{tune_dir / FROZEN}: restore it to resume")
        baseline, runtime = first.get("baseline"), first.get("runtime")
    else:
        if not args.file:
            raise BadInput("ruler tune: give a tune FILE or --resume TUNE_DIR")
        tune = _load(args.file)
        baseline = str(Path(args.baseline).resolve()) if args.baseline else None
        if baseline and not (Path(baseline) / results.JOURNAL).exists():
            raise BadInput(f"--baseline {args.baseline}: not a ruler run directory")
        runtime = args.runtime
        results.writable_dir(Path(args.results_dir), "--results-dir")
        tune_dir = tune_dir_for(Path(args.results_dir), tune)
        results.write_atomic(tune_dir / FROZEN, tune.text)
        _append(tune_dir, "tune_started", tune=str(tune.path), baseline=baseline, runtime=runtime)
    print(f"tune directory: {tune_dir}", flush=True)
    return run_tune(tune, tune_dir, baseline, runtime)


def _load(path: str) -> Tune:
    try:
        return load_tune(path)
    except SpecError as e:
        raise BadInput("\n".join(str(p) for p in e.problems)) from e
