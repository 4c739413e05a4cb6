"""Plain progress lines: one per notable journal event, for headless runs and logs."""

from __future__ import annotations

import sys
import time
from typing import Any

from engine.record.journal import Event


def _diff_summary(diff: dict[str, Any] | None) -> str:
    if not diff:
        return ""
    changed = diff.get("changed", {})
    if not changed:
        return " | boot facts equal to the control"
    # BootFacts.diff lists [this window's value, the control's]; the line reads control -> window.
    items = [f"{k} {control}->{window}" for k, (window, control) in list(changed.items())[:4]]
    more = f" (+{len(changed) - 4})" if len(changed) > 4 else ""
    return " | vs control: " + ", ".join(items) + more


def format_event(e: Event) -> str | None:
    k = e["kind"]
    w = f"{e.get('session', '')}/{e.get('window', '')}"
    if k == "run_started":
        return f"run {e['run']}: campaign {e['campaign']} on {e['server']} ({e['runtime']})"
    if k == "session_started":
        return f"session {e['session']}"
    if k == "window_started":
        return f"{w} booting [{e.get('axis', '')}] {e['plan'].get('name', '')}"
    if k == "window_ready":
        return f"{w} ready in {e['boot_s']:.1f} s{_diff_summary(e.get('diff'))}"
    if k == "window_rejected":
        first = (e.get("errors") or [""])[0]
        return f"{w} REJECTED: {e['reason']}" + (f" | {first}" if first else "")
    if k == "window_finished":
        return f"{w} {e.get('status', 'done')}" + (f": {e['reason']}" if e.get("reason") else "")
    shape = f"{w} {e.get('class', '')} C{e.get('concurrency', '')}"
    if k == "rep_done":
        acc = f" accept {e['accept_len']}/{e['accept_rate']}" if e.get("accept_rate") else ""
        flag = " CLIENT-BOUND?" if e.get("client_bound") else ""
        fail = f" {e['failed']} failed" if e.get("failed") else ""
        return (f"{shape} attempt {e['attempt']} rep {e['rep']}: {e['agg_tok_s']:.1f} tok/s"
                f"{acc}{fail}{flag}")
    if k == "leak_suspected":
        return (f"{shape} LEAK SUSPECTED on attempt {e['attempt']} rep {e['rep']}: "
                f"{e['agg_tok_s']:.1f} tok/s vs median {e['median']:.1f}")
    if k == "row_void":
        return f"{shape} VOID ({e['reason']}): rewarming and rerunning"
    if k == "row_done":
        if "agg_tok_s" not in e:
            return f"{shape} row {e['status']}: {e.get('reason', '')}"
        why = f" ({e['reason']})" if e.get("reason") else ""
        return (f"{shape} row {e['status']}: {e['agg_tok_s']:.1f} tok/s "
                f"({e['per_user_tok_s']:.1f}/user) spread {e['spread']:.1%} "
                f"reps {e['rep_tok_s']} attempts {e['attempts']}{why}")
    if k == "quality_started":
        return f"{w} quality checks"
    if k == "verdict":
        said = e.get("summary") or e["verdict"]
        if not said.lower().startswith(e["verdict"].lower()):
            said = f"{e['verdict']}: {said}"
        return f"{w} {e['check']}: {said}"
    if k == "quality_done":
        return f"{w} quality {e['status']} in {e['seconds']:.0f} s ({e['requests']} requests)"
    if k == "paused":
        return f"{shape} paused before rep {e['rep']} (attempt {e['attempt']}); resume to go on"
    if k == "rerun_aborted":
        return f"{shape} rerun cut short ({e['reason']}); the void row stands"
    if k == "command":
        return f"operator: {e['cmd']} {' '.join(e.get('args', []))} -> {e['reply']}"
    if k == "window_reboot":
        return f"{w} booting again for a rerun of {e['row']}"
    if k in ("run_resumed", "stray_stopped", "shape_resumed", "signal"):
        detail = {x: v for x, v in e.items() if x not in ("seq", "ts", "kind")}
        return f"{k.replace('_', ' ')}: {detail}"
    if k == "engine_error":
        return f"ENGINE ERROR: {e['error']}"
    if k == "run_finished":
        return f"run {e['status']}"
    return None


def printer(stream: Any = None) -> Any:
    out = stream or sys.stdout

    def emit(e: Event) -> None:
        line = format_event(e)
        if line:
            stamp = time.strftime("%H:%M:%S", time.localtime(e["ts"]))
            print(f"{stamp} {line}", file=out, flush=True)

    return emit
