"""The end of a run, as the console says it: the outcome in a line and the commands that come next
(the report, a comparison, ``--resume`` when the run stopped short)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from engine.commands.eta import elapsed
from engine.record.state import RunState
from engine.words import OVER_RUNS, RunStatus, WindowStatus, plural
from tui.core.fmt import Seg, fmt_secs


def is_over(state: RunState, engine_gone: bool, reading: bool = False) -> bool:
    """The run ended, or its engine is gone before the end (killed, the machine rebooted): either
    way nothing the console sends can act any more. While the journal's history is still being
    read (``reading``), a gone engine says nothing yet: its end may say the run finished."""
    return state.status in OVER_RUNS or (state.status == RunStatus.RUNNING and engine_gone
                                         and not reading)


def counted(words: list[str]) -> str:
    return ", ".join(f"{n} {w}" for w, n in Counter(words).most_common())


def outcome(state: RunState, engine_gone: bool, now: float) -> Seg:
    """The run's outcome in one line, coloured by how it ended."""
    windows = [w.status for w in state.windows.values()]
    rows = [r.status for r in state.rows.values()]
    took = fmt_secs(elapsed(state, now))
    counts = (f"{plural(len(windows), 'window')}: {counted(windows) or 'none'} · "
              f"{plural(len(rows), 'row')}: {counted(rows) or 'none'}")
    if state.status == RunStatus.FINISHED:
        bad = any(w in (WindowStatus.FAILED, WindowStatus.REJECTED) for w in windows)
        tag = "success" if state.measured and not bad else "warning"
        return f"■ campaign finished in {took} · {counts}", tag
    if state.status == RunStatus.ABORTED:
        return f"■ campaign stopped by the operator after {took} · {counts}", "warning"
    if state.status == RunStatus.ERROR:
        return f"■ the engine stopped on an error after {took}: {state.error} · {counts}", "error"
    if engine_gone:
        return f"■ the engine is gone and the campaign is not finished · {counts}", "error"
    return f"campaign {state.status}", "muted"


def ended() -> list[Seg]:
    """The status line's word as the run ends while watched: the banner says how it ended (said
    twice, on the banner and here, it read as two ends), this what it means for the keys."""
    return [("run over:", "bold"), ("the engine's keys are greyed; the banner says what to type "
                                    "next", "muted")]


def next_commands(state: RunState, run_dir: Path, ruler: str, other: Path | None,
                  console: bool = True) -> list[Seg]:
    """What to type next: resume a run that stopped short, write the report, compare it with the
    latest earlier run of the same campaign (``other``) or any other. ``console``: said on the
    console's screen, where ``:report`` writes the report too (not in the terminal it leaves)."""
    out: list[Seg] = [("next:", "bold")]
    if state.status != RunStatus.FINISHED:
        out += [(f"{ruler} run --resume {run_dir}", "accent"), ("·", "muted")]
    out += [(f"{ruler} report {run_dir}", "accent"), *([("(:report here)", "muted")] if console else []),
            ("·", "muted"), (f"{ruler} compare {other or 'OTHER_RUN'} {run_dir}", "accent")]
    return out


def earlier_run(run_dir: Path, campaign: str) -> Path | None:
    """The latest other run of the same campaign beside this one (``results/<date>-<campaign>...``)
    with rows to compare, or None."""
    try:
        siblings = [p for p in run_dir.parent.iterdir() if p != run_dir and p.is_dir()
                    and campaign and campaign in p.name and (p / "throughput.csv").is_file()]
    except OSError:
        return None
    return max(siblings, key=lambda p: p.stat().st_mtime, default=None)
