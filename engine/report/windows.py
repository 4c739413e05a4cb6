"""Per window: what changed, its rows against the session's control, verdicts, rejection, history."""

from __future__ import annotations

from typing import Any

from engine import files
from engine.quality import IGNORED_FACT
from engine.record.events import EventKind
from engine.record.state import WindowState
from engine.report.run import RunView, read_json
from engine.report.text import (
    acceptance_text,
    cache_text,
    cell,
    head,
    latency_table,
    link,
    load_cell,
    reps_text,
    slo_text,
    table,
    tok,
    verdict,
    when,
)
from engine.report.turns import turns_table
from engine.report.verdicts import verdict_lines
from engine.sanitize import Md, code, markdown, terminal
from engine.words import CONTROL, USABLE_ROWS, WindowStatus, load_text


def window_status(view: RunView, ws: WindowState) -> list[str]:
    parts = [f"status **{markdown(ws.status)}**"]
    if ws.boot_s is not None:
        parts.append(f"ready in {ws.boot_s:.1f} s")
    if ws.server.get("image_id"):
        parts.append(f"image {code(str(ws.server['image_id'])[:19])}")
    change = change_text(view, ws.window)
    if change:
        parts.append(f"change: {change}" + (" **not applied**" if unapplied(view) else ""))
    lines = [" · ".join(parts), ""]
    if change and unapplied(view):
        lines += [f"Runtime attach: ruler did not start the server, so this change was not "
                  f"applied: the window measured the same server as its control again, and its "
                  f"Δ below is a repeat's (the run's noise), not an effect of {markdown(ws.axis or 'it')}.",
                  ""]
    finished = view.of(EventKind.WINDOW_FINISHED, ws.session, ws.window)
    if finished and finished[-1].get("reason"):
        lines += [f"Window ended: {markdown(finished[-1]['reason'])} "
                  f"{link(view, f'windows/{ws.key}/failure.txt')}".rstrip(), ""]
        if ws.status == WindowStatus.FAILED:
            lines += slurm_lines(view, ws)
    return lines


def slurm_record(view: RunView, ws: WindowState) -> dict[str, Any]:
    """Slurm's record of the window's last batch job, as server_stopped carried it ({} if none)."""
    stopped = [e for e in view.of(EventKind.SERVER_STOPPED, ws.session, ws.window) if e.get("record")]
    return dict(stopped[-1]["record"]) if stopped else {}


def slurm_lines(view: RunView, ws: WindowState) -> list[str]:
    """A rejected or failed window's batch job as Slurm recorded its end, with the receipt."""
    rec = slurm_record(view, ws)
    if not rec:
        return []
    keys = ("JobState", "Reason", "ExitCode", "NodeList", "Partition", "SubmitTime", "StartTime",
            "EndTime")
    said = ", ".join(f"{k} {code(rec[k])}" for k in keys if rec.get(k) not in (None, ""))
    receipt = link(view, f"windows/{ws.key}/job.record.txt")
    return [f"Slurm's record of job {markdown(rec.get('JobId', '?'))}: {said}"
            + (f" ({receipt})" if receipt else "") + ".", ""]


def _flag(flag: str, value: Any) -> str:
    if value is True:
        return flag
    if isinstance(value, list | tuple):
        return " ".join(f"{flag} {v}" for v in value)
    return f"{flag} {value}"


def unapplied(view: RunView) -> bool:
    """No change of a window reached its server: an attached one runs as someone started it."""
    return view.state.runtime == "attach"


def change_text(view: RunView, window: str) -> Md:
    """The window's one axis (or several, with multi_axis), with the control's value beside it:
    markdown, each of the campaign's values in a code span of its own."""
    c = view.campaign
    if c is None or window == CONTROL:
        return Md("")
    try:
        w = c.window(window)
    except KeyError:
        return Md("")
    ch, ctl = w.change, c.control
    parts = []
    for k, v in ch.args.items():
        old = ctl.args.get(k)
        now = f"{code(k)} removed" if v is None or v is False else code(_flag(k, v))
        was = f" (control {code(_flag(k, old))})" if old not in (None, False) else ""
        parts.append(now + was)
    for k, v in ch.env.items():
        parts.append(f"env {code(f'{k}={v}')}" if v is not None else f"env {code(k)} removed")
    for key in ("image", "model", "command"):
        v = getattr(ch, key)
        if v is not None:
            old = getattr(ctl, key, None) if key == "model" else (
                c.docker.image if key == "image" else None)
            parts.append(f"{key} {code(v)}" + (f" (control {code(old)})" if old else ""))
    parts += [f"artifact {code(k)} {code(v)}" for k, v in ch.artifacts.items()]
    return Md("; ".join(parts) + (" (multi-axis)" if w.multi_axis else ""))


def rejection(view: RunView, ws: WindowState) -> list[str]:
    path = view.window_file(ws, "rejection.txt")
    lines = ws.errors
    if path.exists():
        text = files.read_text(path, errors="replace")
        block = text.split("error lines (verbatim):\n", 1)[-1].split("\n\n", 1)[0]
        lines = [x for x in block.splitlines() if x.strip()] or lines
    out = [f"**Rejected at boot**: {markdown(ws.reason)}", ""]
    if lines:
        # Inside the fence, shown as text: no backtick to close it early, no escape to act on.
        out += ["Verbatim from the server:", "", "```",
                *(terminal(x).replace("`", "'") for x in lines), "```", ""]
    out += slurm_lines(view, ws)
    receipt = link(view, f"windows/{ws.key}/rejection.txt")
    return out + ([f"Receipt: {receipt}", ""] if receipt else [])


def history(view: RunView, ws: WindowState) -> list[str]:
    """Flagged reps, void attempts, reruns and rows that are not ok, in the order they happened:
    the audit trail behind the window's numbers."""
    out: list[str] = []
    flagged: set[tuple[Any, ...]] = set()  # a rep can be flagged again as later reps land
    for e in view.window_events(ws.session, ws.window):
        shape = markdown(f"{e.get('class')} {load_text(e.get('concurrency') or 0, e.get('rate'))}")
        if e["kind"] == EventKind.LEAK_SUSPECTED:
            key = (e["class"], e["concurrency"], e.get("rate"), e["attempt"], e["rep"])
            if key not in flagged:
                flagged.add(key)
                out.append(f"- {shape}: attempt {markdown(e['attempt'])} rep {markdown(e['rep'])} "
                           f"flagged as it landed: {tok(e['agg_tok_s'])} tok/s against a median of "
                           f"{tok(e['median'])}")
        elif e["kind"] == EventKind.ROW_VOID:
            reps = ", ".join(tok(v) for v in e.get("rep_tok_s", []))
            gone = e.get("condemned") or []
            again = (f"rewarmed, rep {markdown(', '.join(map(str, gone)))} measured again and the rest kept"
                     if gone and len(gone) < len(e.get("rep_tok_s", [])) else
                     "rewarmed and measured again")
            out.append(f"- {shape}: attempt {markdown(e['attempt'])} **void** ({markdown(e['reason'])}; "
                       f"reps {reps} tok/s): {again}")
        elif e["kind"] == EventKind.RERUN_ABORTED:
            out.append(f"- {shape}: rerun attempt {markdown(e['attempt'])} cut short "
                       f"({markdown(e['reason'])}); the row stands as it was")
        elif e["kind"] == EventKind.WINDOW_REBOOT:
            out.append(f"- window booted again ({markdown(e['reason'])}) for {markdown(e['row'])}")
    for cmd in view.state.commands:
        if cmd.get("cmd") == "rerun" and any(str(a).startswith(f"{ws.key}/")
                                              for a in cmd.get("args", [])):
            args = markdown(" ".join(map(str, cmd["args"])))
            out.append(f"- operator: rerun {args} at {when(cmd.get('ts'))}")
    for r in view.rows_of(ws.session, ws.window).values():
        if r.status not in USABLE_ROWS:
            out.append(f"- {markdown(f'{r.cls} {r.load}')}: row **{markdown(r.status)}** after {r.attempts} "
                       f"attempt{'s' if r.attempts != 1 else ''}: {markdown(r.reason) or '-'}")
    return (["Void rows, reruns and flagged reps:", ""] + out + [""]) if out else []


def windows(view: RunView) -> list[str]:
    lines = ["## Windows", ""]
    for ws in view.windows():
        if ws.window == CONTROL:
            continue
        lines += [f"### {markdown(ws.key)}: {markdown(ws.axis)}", ""] + window_status(view, ws)
        if ws.status == WindowStatus.REJECTED:
            lines += rejection(view, ws)
            continue
        diff = read_json(view.window_file(ws, "boot-facts.json")).get("diff_vs_control") or {}
        # Per-boot facts (paths, the listening URL, request timings) differ on every boot.
        changed = {k: v for k, v in (diff.get("changed") or {}).items()
                   if not IGNORED_FACT.search(k)}
        if changed:
            # Keys and values as the server's log printed them: inert text.
            shown = [f"{code(k)} {markdown(v[0])} vs {markdown(v[1])}"
                     for k, v in list(changed.items())[:10]]
            more = f" and {len(changed) - 10} more" if len(changed) > 10 else ""
            lines += [f"Boot facts that differ from the control: {', '.join(shown)}{more} "
                      f"({len(diff.get('equal', []))} equal; "
                      f"{link(view, f'windows/{ws.key}/boot-facts.json')}).", ""]
        elif diff and not diff.get("equal"):
            lines += ["Boot facts: none in this window's log, so none compared with the control's.",
                      ""]
        elif diff:
            lines += [f"Boot facts: none differs from the control's ({len(diff.get('equal', []))} "
                      "equal; paths, the URL and request timings differ on every boot and are "
                      "left out).", ""]
        ctl = view.rows_of(ws.session, CONTROL)
        rows = view.rows_of(ws.session, ws.window)
        if rows:
            lines += table(
                ["class", "C", head("agg_tok_s"), CONTROL,
                 "Δ tok/s [95 % CI], call" + (" (change not applied)" if unapplied(view) else ""),
                 head("per_user_tok_s"),
                 f"{head('spread')} (window / control)", "reps tok/s", "accept len / rate", "control accept",
                 "prefix cache (window / control)", "status", "attempts"],
                [[r.cls, load_cell(r), cell(r, "agg_tok_s"), cell(c, "agg_tok_s") if c else "-",
                  verdict(view, r).text(), cell(r, "per_user_tok_s"),
                  f"{cell(r, 'spread')} / {cell(c, 'spread') if c else '-'}", reps_text(r),
                  acceptance_text(r), acceptance_text(c) if c else "-",
                  f"{cache_text(r)} / {cache_text(c)}", r.status, r.attempts]
                 for r in rows.values() for c in [ctl.get(r.shape)]])
            lines += latency_table(rows.values(), slo_text(view))
            lines += turns_table(view, rows.values())
        else:
            lines += ["No throughput rows.", ""]
        lines += verdict_lines(view, ws) + [""] + history(view, ws)
    return lines

