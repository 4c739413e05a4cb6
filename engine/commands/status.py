"""``ruler status`` and ``ruler ctl``: where a campaign stands, and one command to its engine."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from engine.commands.eta import elapsed, eta, load_plan
from engine.commands.invocation import ruler_command
from engine.record import results
from engine.record.journal import Damage, damage_report
from engine.record.liveness import lock_state, read_pid
from engine.record.snapshot import Folded, read_folded
from engine.record.state import RowState, RunState
from engine.sanitize import terminal
from engine.words import CONTROL, LIVE_ROWS, RowStatus, RunStatus, WindowStatus


def summary(run_dir: Path, folded: Folded | None = None) -> dict[str, Any]:
    st = (folded or read_folded(run_dir / results.JOURNAL)).state
    rows = list(st.rows.values())
    # In flight: a row begun and not complete while the engine runs (after a kill: where it stopped).
    live = [r for r in rows if not r.complete and r.attempt]
    shape = live[-1] if live else None
    last_rep = None
    for r in reversed(rows):  # the last rep folded: of the last row with one, its last attempt's
        landed = [(attempt, reps) for attempt, reps in r.reps.items() if reps]
        if landed:
            attempt, reps = landed[-1]
            rep, tok = next(reversed(reps.items()))
            last_rep = {"row": r.key, "attempt": attempt, "rep": rep, "agg_tok_s": tok}
            break
    counts = Counter(r.status for r in rows)
    held, why = lock_state(run_dir)  # None: cannot tell (a lock it cannot open, or not a file)
    alive = held is True
    plan = load_plan(st)
    left = eta(st, plan, time.time()) if alive and st.status == RunStatus.RUNNING else None
    return {
        "run_dir": str(run_dir),
        "campaign": st.campaign,
        "status": st.status if alive or st.status != RunStatus.RUNNING else
        "engine not running (resume it)" if held is False else "engine unknown",
        "paused": st.paused,
        "engine": {"alive": alive, "pid": read_pid(run_dir) if alive else None,
                   **({"unknown": why} if held is None else {})},
        "current": {
            "window": st.up_now,  # never a window that has ended
            "shape": shape.key if shape else None,
            "attempt": shape.attempt if shape else None,
            "reps_done": len(shape.reps.get(shape.attempt, {})) if shape else None,
        },
        # As row_done left them; "total": the rows begun so far, "planned": every window's shapes.
        "rows": {str(s): counts[s] for s in RowStatus
                 if s not in LIVE_ROWS and s != RowStatus.PENDING} | {"total": len(rows)},
        "planned_rows": len(st.windows) * plan.shapes if plan.shapes is not None else None,
        "elapsed_s": elapsed(st, time.time()),
        "eta_s": left,
        "sessions": running_sessions(st, rows),
        "windows": {k: w.status for k, w in st.windows.items()},
        # A batch job waiting in its scheduler's queue: its job and Slurm's reason ("" for none yet).
        "queued": {k: {"job": str(w.server.get("job", "")), "reason": w.queue}
                   for k, w in st.windows.items() if w.status == WindowStatus.QUEUED},
        # Each session's node: where its control ran, and so every window of it (runtime slurm).
        "nodes": {w.session: w.node for w in st.windows.values() if w.window == CONTROL and w.node},
        "ruler_suspect": [k for k, w in st.windows.items() if w.ruler_suspect],
        "last_rep": last_rep,
        "journal_damage": [d.as_json() for d in st.damage],
    }


def running_sessions(st: RunState, rows: list[RowState]) -> list[dict[str, Any]]:
    """Each session with a window up now (one per place when sessions run in parallel): its place,
    that window and its shape in flight."""
    out = []
    for ws in st.live:
        live = [r for r in rows if r.session == ws.session and r.window == ws.window
                and not r.complete and r.attempt]
        shape = live[-1] if live else None
        out.append({"session": ws.session, "place": st.session_places.get(ws.session, ""),
                    "window": ws.key, "status": ws.status, "shape": shape.key if shape else None,
                    "reps_done": len(shape.reps.get(shape.attempt, {})) if shape else None})
    return out


SAID = 8  # windows a line names before it counts the rest (a day-long run has hundreds)


def fmt_secs(s: float) -> str:
    s = max(0, int(s))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"


def format_summary(s: dict[str, Any]) -> str:
    cur, rows = s["current"], s["rows"]
    alive = s["engine"]["alive"]
    unknown = s["engine"].get("unknown")
    engine = (f"alive (pid {s['engine']['pid']})" if alive else
              f"unknown: {terminal(unknown)}" if unknown else "not running")
    timing = ""
    if s["elapsed_s"] is not None and s["status"] in set(RunStatus):  # not an engine gone mid-run
        took = fmt_secs(s["elapsed_s"])
        timing = (f"  took {took}" if s["status"] != RunStatus.RUNNING else f"  {took} so far"
                  + (f", ~{fmt_secs(s['eta_s'])} left" if s["eta_s"] is not None else ""))
    counts = {k: v for k, v in rows.items() if k != "total"}
    planned = f" of {s['planned_rows']} planned" if s["planned_rows"] else ""
    lines = [
        f"{s['campaign']}  {s['status']}{'  PAUSED' if s['paused'] else ''}  engine {engine}{timing}",
        f"  run     {s['run_dir']}",
    ]
    if alive or cur["window"] or cur["shape"]:  # a run that is over has nothing in flight: no line
        lines.append(f"  {'now  ' if alive else 'at   '}   window {cur['window'] or '-'}  shape "
                     f"{cur['shape'] or '-'}"
                     + (f"  attempt {cur['attempt']} reps done {cur['reps_done']}" if cur["shape"] else ""))
    lines.append(f"  rows    {rows['total']} begun{planned}: "
                 + "  ".join(f"{k} {v}" for k, v in counts.items() if v))
    if not alive and not unknown and s["status"] != RunStatus.FINISHED:  # stopped short: how it goes on
        lines.append(f"  resume  {ruler_command()} run --resume {s['run_dir']}  (goes on at the "
                     "first unfinished rep)")
    if any(x["place"] for x in s["sessions"]) or len(s["sessions"]) > 1:
        for x in s["sessions"]:
            lines.append(f"  session {x['session']}" + (f" on {x['place']}" if x["place"] else "")
                         + f": window {x['window']} {x['status']}"
                         + (f"  shape {x['shape']} reps done {x['reps_done']}" if x["shape"] else ""))
    for key, q in s["queued"].items():
        lines.append(f"  queued  {key}: Slurm job {q['job']} queued"
                     + (f" ({q['reason']})" if q["reason"] else ""))
    if s["nodes"]:
        lines.append("  nodes   " + "  ".join(f"{sess} on {node}" for sess, node in s["nodes"].items()))
    if suspect := s["ruler_suspect"]:
        more = f", and {len(suspect) - SAID} more (--json lists them)" if len(suspect) > SAID else ""
        lines.append(f"  RULER SUSPECT (a request knob is inert): {', '.join(suspect[:SAID])}{more}")
    if s["journal_damage"]:
        damage = [Damage(**d) for d in s["journal_damage"]]
        path = f"{s['run_dir']}/{results.JOURNAL}"
        lines.append(f"  JOURNAL DAMAGED at {len(damage)} line(s): not an event, or out of sequence")
        lines += ["    " + x for x in damage_report(path, damage).split("\n")]
        lines.append("    `ruler run --resume` refuses until they are moved out of the journal")
    if s["last_rep"]:
        r = s["last_rep"]
        lines.append(f"  last    {r['row']} attempt {r['attempt']} rep {r['rep']}: "
                     f"{r['agg_tok_s']:.1f} tok/s")
    # Each line may quote the run (its directory's name, a Slurm reason, the journal's damage):
    # shown on a terminal, never acted on.
    return "\n".join(map(terminal, lines))


def print_status(run_dir: Path, as_json: bool) -> Folded:
    """The run's status printed; the fold it was read from, its snapshot not yet kept (the
    caller's to keep: said first, the snapshot for the next reader after)."""
    folded = read_folded(run_dir / results.JOURNAL, keep=False)
    s = summary(run_dir, folded)
    # Its lines quote the journal (a server's errors, an operator's arguments): shown, not acted on.
    print(json.dumps(s, indent=2) if as_json else format_summary(s))
    return folded
