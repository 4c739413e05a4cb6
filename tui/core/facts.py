"""The boot facts pane: a window's facts, and how they differ from its session's control's."""

from __future__ import annotations

from typing import Any

from engine.record.state import RunState, WindowState
from engine.servers import BootFacts
from engine.words import CONTROL, WindowStatus
from tui.core.fmt import Seg
from tui.core.logview import overstruck
from tui.core.windows import queued_text

KEY_FACT_PREFIXES = ("kv.", "ctx.", "weights.", "compute.", "spec.", "slots.")


def facts_lines(state: RunState, wkey: str | None) -> list[Seg]:
    ws = state.windows.get(wkey or "")
    if ws is None:
        return [("no window yet", "muted")]
    if ws.status == WindowStatus.PENDING:
        return [(f"{ws.key}: not booted yet", "muted")]
    out: list[Seg] = []
    if ws.status == WindowStatus.REJECTED:
        out.append((f"REJECTED: {overstruck(ws.reason)}", "error"))
        out += [(overstruck(e), "error") for e in ws.errors[:4]]  # the log's lines, as shown there
    boot = (f"ready in {ws.boot_s:.1f} s" if ws.boot_s is not None else
            queued_text(ws) if ws.status == WindowStatus.QUEUED else ws.status)
    out.append((f"{boot} · {len(ws.facts)} facts", "bold"))
    if ws.server.get("job") or ws.node:  # a Slurm job: which one, and the node it runs on
        out.append((f"Slurm job {ws.server.get('job', '?')} · node {ws.node or '-'}", "muted"))
    control = state.windows.get(f"{ws.session}-{CONTROL}")
    if ws.window == CONTROL:
        keys = [k for k in ws.facts if k.startswith(KEY_FACT_PREFIXES)][:12]
        out += [(f"  {k} {_short(ws.facts[k])}", "") for k in keys]
        return out
    diff = ws.diff if ws.diff is not None else _provisional_diff(ws, control)
    if diff is None:
        out.append(("no control facts to compare with", "muted"))
        return out
    provisional = " (so far)" if ws.diff is None else ""
    changed = diff.get("changed", {})
    out.append((f"vs control{provisional}: {len(changed)} changed", "bold"))
    for k, (here, there) in changed.items():
        out.append((f"≠ {k} {_short(here)} ← {_short(there)}", "warning"))
    for k, v in diff.get("only_here", {}).items():
        out.append((f"+ {k} {_short(v)}", "accent"))
    for k, v in diff.get("only_there", {}).items():
        out.append((f"- {k} {_short(v)}", "muted"))
    out.append((f"= {len(diff.get('equal', []))} equal", "muted"))
    return out


def _short(v: Any, n: int = 24) -> str:
    s = str(v)
    return s if len(s) <= n else "…" + s[-(n - 1):]


def _provisional_diff(ws: WindowState, control: WindowState | None) -> dict[str, Any] | None:
    """The engine's diff (``BootFacts.diff``) of the facts so far, while the window boots."""
    if control is None or not control.facts:
        return None
    diff = BootFacts.of(ws.facts).diff(BootFacts.of(control.facts))
    return {**diff, "only_here": {}, "only_there": {}}  # still booting: absence means nothing yet
