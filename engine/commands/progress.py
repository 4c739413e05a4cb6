"""Plain progress lines: one per notable journal event, for headless runs and logs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from engine.method import steady
from engine.method.capacity import Found
from engine.quality.effect import IGNORED_FACT
from engine.record.events import ENVELOPE, EventKind
from engine.record.journal import Event
from engine.sanitize import terminal
from engine.words import CONTROL, WindowStatus, load_text, plural


def _diff_summary(diff: dict[str, Any] | None) -> str:
    if not diff:
        return ""
    flagged = "".join(f" | FLAGGED {why}" for why in (diff.get("flagged") or {}).values())
    return _changed(diff) + flagged


def _changed(diff: dict[str, Any]) -> str:
    # Facts that differ at every boot (a port, a job id, request timings) say nothing of the axis.
    changed = {k: v for k, v in diff.get("changed", {}).items() if not IGNORED_FACT.search(k)}
    if not changed and not [k for k in diff.get("equal", []) if not IGNORED_FACT.search(k)]:
        return " | no boot facts to compare with the control"  # the window's log gave none
    if not changed:
        return " | boot facts equal to the control"
    # BootFacts.diff lists [this window's value, the control's]; the line reads control -> window.
    items = [f"{k} {control}->{window}" for k, (window, control) in list(changed.items())[:4]]
    more = f" (+{len(changed) - 4})" if len(changed) > 4 else ""
    return " | vs control: " + ", ".join(items) + more


def _where(e: Event) -> str:
    return f"{e.get('session', '')}/{e.get('window', '')}"


def _shape(e: Event) -> str:
    return f"{_where(e)} {e.get('class', '')} {load_text(e.get('concurrency') or 0, e.get('rate'))}"


def _rep_done(e: Event) -> str:
    acc = f" accept {e['accept_len']}/{e['accept_rate']}" if e.get("accept_rate") else ""
    if e.get("accept_per_pos"):  # per draft position (engine.method.acceptance)
        acc += " pos " + "/".join(f"{x:.2f}" for x in e["accept_per_pos"])
    if acc and e.get("acceptance"):  # set by the server, not measured (docs/acceptance.md)
        acc += f" {e['acceptance']}"
    flag = " CLIENT-BOUND?" if e.get("client_bound") else ""
    fail = f" {e['failed']} failed" if e.get("failed") else ""
    return (f"{_shape(e)} attempt {e['attempt']} rep {e['rep']}: {e['agg_tok_s']:.1f} tok/s"
            f"{_gpu(e.get('gpu'))}{acc}{fail}{flag}{_steady(e)}")


def _steady(e: Event) -> str:
    """A rep's steady window beside its whole-rep tok/s, and where the precision rule stands."""
    out = ""
    if e.get("steady_tok_s") is not None:
        out += f" | steady {e['steady_tok_s']:.1f} tok/s over {e['steady_s']:.2f} s"
    elif "steady_tok_s" in e:
        out += " | no steady window"
    # Said on the control's first rep of a shape, when it can still be acted on: every later rep
    # of the campaign at this shape is as short.
    why = steady.why_short(e.get("steady_s"), e.get("ramp_s"), e.get("tail_s"), e.get("steady_cycles"))
    first = e.get("window") == CONTROL and e.get("attempt") == 1 and e.get("rep") == 1
    if "steady_tok_s" in e and first and why:
        out += (f" | TOO SHORT for a steady window (ramp {e.get('ramp_s') or 0:.2f} s, tail "
                f"{e.get('tail_s') or 0:.2f} s): {why}; the row is over the whole reps: give more "
                "requests_per_rep or rep_seconds")
    if e.get("precision_status"):
        half = e.get("half_width")
        out += f" | half-width {'-' if half is None else f'+-{half:.1%}'}: {e['precision_status']}"
    return out


def _gpu(g: dict[str, Any] | None) -> str:
    """A rep's GPU figures beside its tok/s (nothing without telemetry)."""
    if not g:
        return ""
    bits = [f"{g['power_w']:.0f} W" if g.get("power_w") is not None else "",
            f"SM min {g['sm_mhz_min']:.0f} MHz" if g.get("sm_mhz_min") is not None else "",
            f"{g['j_per_token']:.3g} J/tok" if g.get("j_per_token") is not None else "",
            f"THROTTLE {', '.join(g['throttle'])}" if g.get("throttle") else ""]
    return " | " + ", ".join(b for b in bits if b)


def _leak(e: Event) -> str:
    word = "THROTTLED" if e.get("cause") else "LEAK SUSPECTED"
    why = f" ({e['detail']})" if e.get("detail") else ""
    return (f"{_shape(e)} {word} on attempt {e['attempt']} rep {e['rep']}: "
            f"{e['agg_tok_s']:.1f} tok/s vs median {e['median']:.1f}{why}")


def _gpu_memory(e: Event) -> str | None:
    """Said only when the wait mattered: it took a while, or the memory did not come back."""
    if e["settled"] and e["waited_s"] < 1:
        return None
    if e["settled"]:
        return f"{_where(e)} GPU memory back to the session's level after {e['waited_s']:.0f} s"
    held = "; ".join(f"pid {p['pid']} ({p.get('name', '?')}) {p.get('used_mib') or '?'} MiB on GPU "
                     f"{p['gpu']}" for p in e.get("holders", [])[:4]) or "no process listed"
    return (f"{_where(e)} GPU memory NOT back after {e['waited_s']:.0f} s: used "
            f"{e['used_mib']} MiB vs {e['baseline_mib']} MiB before the session; held by {held}")


def _row_done(e: Event) -> str:
    if "agg_tok_s" not in e:  # no rep was measured: the row has no figures
        return f"{_shape(e)} row {e['status']}: {e.get('reason', '')}"
    why = f" ({e['reason']})" if e.get("reason") else ""
    basis = f" over {e['basis']} (whole rep {e['whole_tok_s']:.1f})" if e.get("basis") else ""
    shape = f" {e['spread_why']}" if e.get("spread_shape") == "noise" else ""
    spread = ("- (one rep)" if len(e.get("rep_tok_s") or ()) < 2
              else "- (no rep moved a token)" if e.get("spread") is None else f"{e['spread']:.1%}")
    return (f"{_shape(e)} row {e['status']}: {e['agg_tok_s']:.1f} tok/s{basis} "
            f"({e['per_user_tok_s']:.1f}/user) spread {spread} "
            f"reps {e['rep_tok_s']} attempts {e['attempts']}{why}{shape}"
            + (f" acceptance {e['acceptance']}" if str(e.get("acceptance", "")).startswith("simulated")
               else ""))


def _verdict(e: Event) -> str:
    said = e.get("summary") or e["verdict"]
    if not said.lower().startswith(e["verdict"].lower()):
        said = f"{e['verdict']}: {said}"
    return f"{_where(e)} {e['check']}: {said}"


def _parity(e: Event) -> str:
    said = ", ".join(f"{cls} {c['verdict']}" for cls, c in e["classes"].items())
    withheld = [cls for cls, c in e["classes"].items() if not c.get("identical")]
    note = f" (deltas of {', '.join(withheld)} withheld unless allowed)" if withheld else ""
    return f"{_where(e)} parity {e['stack']} vs control's {e['reference']}: {said}{note}"


def _window_rejected(e: Event) -> str:
    first = (e.get("errors") or [""])[0]
    return f"{_where(e)} REJECTED: {e['reason']}" + (f" | {first}" if first else "")


def _window_queued(e: Event) -> str:
    # Slurm says "None" (ruler records "") before its scheduler has looked at the job.
    why = f" ({e['reason']})" if e.get("reason") else ""
    return f"{_where(e)} queued: Slurm job {e['job']} {e['state']}{why}"


def _window_placed(e: Event) -> str:
    return (f"{_where(e)} runs on node {e['node']} (job {e['job']}, {e['queued_s']:.1f} s in the "
            f"queue) {e['url']}")


def _session_started(e: Event) -> str:
    """With places: where the session runs, and the machine there (or why it did not answer)."""
    if not e.get("place"):
        return f"session {e['session']}"
    where = e.get("where") or {}
    bits = [f"cpus {where['cpus']}" if where.get("cpus") else "",
            str(where.get("docker_host") or where.get("node") or "")]
    host = e.get("host") or {}
    machine = (f"did not answer: {host['error']}" if host.get("error") else
               f"{host.get('name', '?')}, {host.get('cpus', '?')} CPUs" if host else "")
    said = ", ".join(b for b in bits if b)
    return f"session {e['session']} on {e['place']}" + (f" ({said})" if said else "") + (
        f": {machine}" if machine else "")


def _verdict_look(e: Event) -> str:
    decided = len(e.get("rows") or {})
    head = (f"look {e['look']} at the evidence (level {e['level']:.3g}, {e['boots']} boots, "
            f"{e['minutes']:.0f} min): {plural(decided, 'row')} decided")
    return f"{head}; {e['why']}" + ("" if not e["final"] else "; the last look")


def _capacity(e: Event) -> str:
    unit = "req/s" if e["over"] == "rate" else "concurrent"
    lo = ("no answer: no probe held or failed" if e.get("found") == Found.NONE else
          "below the range" if e.get("lo") is None else f"{e['lo']:g} {unit}")
    hi = f", fails at {e['hi']:g}" if e.get("hi") is not None else ""
    mixed = f", reps disagree at {', '.join(f'{m:g}' for m in e['mixed'])}" if e.get("mixed") else ""
    return (f"{_where(e)} {e['class']} capacity at {e['criteria']}: {lo}{hi}{mixed} "
            f"({e['found']}, {len(e.get('probes') or [])} probes)")


def _as_is(e: Event) -> str:
    detail = {x: v for x, v in e.items() if x not in ENVELOPE}
    return f"{e['kind'].replace('_', ' ')}: {detail}"


K = EventKind
# One line per kind worth a line; a kind missing here (boot facts, warm passes...) prints nothing.
def _again(e: Event) -> str:
    """What a void row measures again: the reps its verdict condemned, or all of them."""
    gone, reps = e.get("condemned"), len(e.get("rep_tok_s", []))
    if not gone or len(gone) >= reps:
        return "rerunning"
    return f"measuring {plural(len(gone), 'rep')} again ({', '.join(map(str, gone))}; the rest kept)"


LINES: dict[str, Callable[[Event], str | None]] = {
    K.RUN_STARTED: lambda e: f"run {e['run']}: campaign {e['campaign']} on {e['server']} ({e['runtime']})",
    K.SESSION_STARTED: _session_started,
    K.WINDOW_STARTED: lambda e: (f"{_where(e)} booting [{e.get('axis', '')}] {e['plan'].get('name', '')}"
                                 + (f" | SIMULATED acceptance: {e['simulated']}" if e.get("simulated")
                                    else "")),
    K.WINDOW_QUEUED: _window_queued,
    K.WINDOW_PLACED: _window_placed,
    K.WINDOW_READY: lambda e: f"{_where(e)} ready in {e['boot_s']:.1f} s{_diff_summary(e.get('diff'))}",
    K.WINDOW_REJECTED: _window_rejected,
    K.WINDOW_FINISHED: lambda e: (f"{_where(e)} {e.get('status', WindowStatus.DONE)}"
                                  + (f": {e['reason']}" if e.get("reason") else "")),
    K.REP_DONE: _rep_done,
    K.LEAK_SUSPECTED: _leak,
    K.GPU_MEMORY: _gpu_memory,
    K.ROW_VOID: lambda e: (f"{_shape(e)} VOID ({e['reason']}): rewarming and {_again(e)}"
                           + (f"; {e['spread_why']}" if e.get("spread_why") else "")),
    K.ROW_DONE: _row_done,
    K.CAPACITY: _capacity,
    K.VERDICT_LOOK: _verdict_look,
    K.SESSION_ADDED: lambda e: f"session {e['session']} added: {' '.join(e['windows'])}",
    K.QUALITY_STARTED: lambda e: f"{_where(e)} quality checks",
    K.VERDICT: _verdict,
    K.PARITY: _parity,
    K.QUALITY_DONE: lambda e: (f"{_where(e)} quality {e['status']} in {e['seconds']:.0f} s "
                               f"({e['requests']} requests)"),
    K.PAUSED: lambda e: (f"{_shape(e)} paused before rep {e['rep']} (attempt {e['attempt']}); "
                         "resume to go on"),
    K.RERUN_ABORTED: lambda e: f"{_shape(e)} rerun cut short ({e['reason']}); the void row stands",
    K.COMMAND: lambda e: f"operator: {e['cmd']} {' '.join(e.get('args', []))} -> {e['reply']}",
    K.WINDOW_REBOOT: lambda e: f"{_where(e)} booting again for a rerun of {e['row']}",
    K.SERVER_STOPPING: lambda e: (f"{_where(e)} stopping its server"
                                  + ("" if e["alive"] else " (it had exited already)")),
    K.RERUN_WAITING: lambda e: f"{_where(e)} rerun of {', '.join(e['rows'])} waits for {e['waiting']}",
    K.RUN_RESUMED: _as_is,
    K.STRAY_STOPPED: _as_is,
    K.SHAPE_RESUMED: _as_is,
    K.SIGNAL: _as_is,
    K.ENGINE_ERROR: lambda e: f"ENGINE ERROR: {e['error']}",
    K.RUN_FINISHED: lambda e: f"run {e['status']}",
}


def format_event(e: Event) -> str | None:
    """The event's line, terminal-safe: it quotes server text (errors, log lines) and operator
    arguments, which reach a terminal or a log read on one."""
    line = LINES.get(e["kind"])
    return terminal(line(e)) if line else None


def printer(stream: Any = None) -> Any:
    out = stream or sys.stdout

    def emit(e: Event) -> None:
        line = format_event(e)
        if line:
            stamp = time.strftime("%H:%M:%S", time.localtime(e["ts"]))
            print(f"{stamp} {line}", file=out, flush=True)

    return emit
