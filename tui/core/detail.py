"""Everything about one window or one row, for the detail view (enter on a row): what the tables cut
short, whole. A window: its status and reason, its delta against the control per shape with the
interval and how it was formed, its verdicts, its boot facts against the control's, the server's
exact command, its receipts. A row: why it stands as it does, every rep of every attempt (steady and
whole), what became of each attempt, its delta against the control's row and how it was formed,
its receipts.

The delta, its interval and its call are the engine's (``engine.record.judgement``, the same as
throughput.csv's delta and verdict columns and the windows list), and so is its method's
wording: when the rule changes there, this view follows.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.method.acceptance import is_simulated
from engine.method.verdict import Call, Rule
from engine.record.state import RowState, RunState, WindowState
from engine.words import CONTROL, LIVE_ROWS, USABLE_ROWS, RowStatus, WindowStatus, row_key
from tui.core.fmt import Seg, fmt_curve, fmt_pct, fmt_tok
from tui.core.logview import overstruck
from tui.core.reps import STATUS_WORD, leak_marks, why_text
from tui.core.rules import LeakRule
from tui.core.verdicts import verdict_seg
from tui.core.versus import RowDelta, headline, judged, reference, row_delta, window_call, withheld
from tui.core.windows import window_rows, window_status

Line = list[Seg]


@dataclass(frozen=True)
class Detail:
    """The detail of one window or row: its lines, the server command a key copies, the log a key
    opens in the pager (relative to the run directory)."""

    title: str
    lines: list[Line]
    command: str | None = None
    log: str | None = None


def detail(state: RunState, key: str, leak: LeakRule, rule: Rule,
           files: list[str] | None = None) -> Detail | None:
    """The detail of the window or row named ``key`` (``s1-ngram`` or ``s1-ngram/prose/c4``);
    ``files``: the window's receipts as listed in its directory (relative to the run)."""
    if key in state.rows:
        return row_detail(state, state.rows[key], leak, rule)
    if key in state.windows:
        return window_detail(state, state.windows[key], rule, files or [])
    return None


def receipts(run_dir: Path, wkey: str) -> list[str]:
    """A window's receipts as its directory holds them (its reps' count, not each), relative to
    the run directory."""
    d = run_dir / "windows" / wkey
    try:
        entries = sorted(d.iterdir())
    except OSError:
        return []
    return [f"{p.relative_to(run_dir)}" + (f"/ ({sum(1 for _ in p.iterdir())} files)" if p.is_dir()
                                            else "") for p in entries]


def pager_argv(path: Path, environ: Mapping[str, str]) -> list[str]:
    """The command that shows ``path`` in the operator's pager: $PAGER with its words, else less."""
    return [*shlex.split(environ.get("PAGER") or "less"), str(path)]


def heading(text: str) -> Line:
    return [(text, "bold")]


def server_command(ws: WindowState) -> str | None:
    """The server's command as ruler ran it (the plan the journal recorded, secrets by name only):
    its environment and argv, as a shell would take them; a container's image before it."""
    plan = ws.plan
    argv = plan.get("argv") or []
    if not argv and not plan.get("image"):
        return None
    env = [f"{k}={v}" for k, v in (plan.get("env") or {}).items()]
    words = " ".join(shlex.quote(w) for w in [*env, *argv])
    if plan.get("image"):
        return f"docker run {shlex.quote(str(plan['image']))} {words}".rstrip()
    return words


def window_detail(state: RunState, ws: WindowState, rule: Rule, files: list[str]) -> Detail:
    word, tag = window_status(state, ws.key)
    out: list[Line] = [[(f"window {ws.key}", "bold"), ("·", "muted"), (word, tag),
                        ("·", "muted"), (f"session {ws.session}", "")],
                       [("axis:", "muted"), (ws.axis or "-", "")]]
    # The reason and the errors quote the server's log: shown as its terminal would show them.
    if ws.reason:
        out.append([("reason:", "muted"), (overstruck(ws.reason), "error" if ws.status in (
            WindowStatus.FAILED, WindowStatus.REJECTED) else "")])
    out += [[(f"  {overstruck(e)}", "error")] for e in ws.errors]
    out += [[], *window_deltas(state, ws, rule)]
    if ws.verdicts:
        out += [[], heading("Verdicts")]
        for v in ws.verdicts.values():
            _, tag = verdict_seg(v)
            out.append([(f"  {v.get('check', '')}:", "muted"), (str(v.get("verdict", "")), tag),
                        ("·", "muted"), (str(v.get("summary") or ""), "")])
            if v.get("file"):
                out.append([(f"    {v['file']}", "muted")])
    out += parity_lines(ws)
    out += [[], *boot_lines(state, ws)]
    command = server_command(ws)
    out += [[], heading("Server command (c copies it)")]
    out.append([(command, "")] if command else [("not recorded in the journal", "muted")])
    rows = window_rows(state, ws.key)
    if rows:
        out += [[], heading("Rows (enter on a row of the reps table: its detail)")]
        for r in rows:
            w, t = STATUS_WORD.get(r.status, (r.status, ""))
            med = r.row.get("agg_tok_s")
            out.append([(f"  {r.cls} {r.load}", "bold"), (w, t),
                        (f"{fmt_tok(med)} tok/s" if med is not None else "", ""),
                        (f"attempt {r.attempt}" if r.attempt > 1 else "", "warning")])
    out += [[], heading("Receipts")]
    out += [[(f"  {f}", "")] for f in files] or [[("  none yet", "muted")]]
    if ws.log:
        out.append([("  l opens", "muted"), (ws.log, ""), ("in $PAGER", "muted")])
    return Detail(f"window {ws.key}", out, command, ws.log or None)


def parity_lines(ws: WindowState) -> list[Line]:
    """A window on another stack: per class, whether the two stacks sent the same token ids (the
    parity event's verdict); without it, its deltas are withheld (engine.record.judgement)."""
    if not ws.stack:
        return []
    out = [[], heading(f"Parity: {ws.stack} against the control's stack (the token ids of every "
                       "prompt, each through its own template and tokenizer)")]
    if not ws.parity:
        out.append([("  not shown yet: this window's deltas are withheld until it is "
                     "(verdict.allow_different gives them)", "muted")])
    for cls, p in sorted(ws.parity.items()):
        out.append([(f"  {cls}:", "bold"), (str(p.get("verdict") or "-"),
                                            "success" if p.get("identical") else "warning")])
    return out


def window_deltas(state: RunState, ws: WindowState, rule: Rule) -> list[Line]:
    """The window's delta against its reference per shape, the headline, and how each was formed."""
    ref = reference(state, ws.key)
    if ref is None:
        return [heading("Against the control"),
                [(f"  {ws.key} is the reference of session {ws.session}", "muted")]]
    what = f"drift against {ref.key}" if ws.window == CONTROL else f"against the control {ref.key}"
    out = [heading(f"Delta {what}")]
    call = window_call(state, ws.key, rule)
    if call[0]:
        out.append([("  the window's call:", "muted"), call])
    pairs = [d for r in window_rows(state, ws.key) if (d := row_delta(state, r, rule)) is not None]
    if not pairs:
        why = withheld(state, ws.key, rule)
        return [*out, [(f"  {why or 'no shape measured in both yet'}", "warning" if why else "muted")]]
    h = headline(state, ws.key, rule)
    if h is not None:
        out.append([("  headline:", "muted"), interval_seg(h),
                    (f"the median shape's of {len(pairs)} (of an even count, the one nearer 0)", "muted")])
    for d in pairs:
        out.append([(f"  {d.row.cls} {d.row.load}", "bold"), interval_seg(d)])
    out += formed(state, pairs[0], rule)
    return out


def interval_seg(d: RowDelta) -> Seg:
    text = ("~" if d.provisional else "") + fmt_delta(d)
    return text, "warning" if d.call == Call.EFFECT else ""


def fmt_delta(d: RowDelta) -> str:
    iv = d.interval
    out = f"{d.delta * 100:+.1f} %" + ("" if iv is None else f" [{iv[0] * 100:+.1f}, {iv[1] * 100:+.1f}]")
    return out + (f" {d.call}" if d.call else "")


def formed(state: RunState, d: RowDelta, rule: Rule) -> list[Line]:
    """How an interval was formed: the method as the engine words it, the noise between boots,
    the call's rule and figures."""
    how = [d.versus.method(), f"noise between boots: {d.versus.noise.how()}", rule.text()]
    call = judged(state, rule).rows.get(d.row.key)
    if call is not None and not d.provisional:
        how.append(f"{call.call}: {call.why()}")
    if d.provisional:
        how.append("~: a side is still measuring: its reps so far, no call yet")
    return [[("  how:" if i == 0 else "      ", "muted"), (text, "")] for i, text in enumerate(how)]


def row_detail(state: RunState, r: RowState, leak: LeakRule, rule: Rule) -> Detail:
    word, tag = STATUS_WORD.get(r.status, (r.status, ""))
    final = r.row
    out: list[Line] = [[(f"row {r.key}", "bold"), ("·", "muted"), (word, tag),
                        ("·", "muted"), (f"attempt {r.attempt}", "warning" if r.attempt > 1 else "")]]
    if r.key in state.reruns_waiting:
        out.append([("rerun:", "muted"), (f"queued, waiting on {state.reruns_waiting[r.key]}", "warning")])
    why = why_text(r, leak)
    if why:
        out.append([("why:", "muted"), (why, "error" if r.status == RowStatus.VOID else "")])
    for name, label in (("error", "commonest request error"), ("void_reps", "reps voided"),
                        ("metrics_rejected", "metrics rejected")):
        if final.get(name):
            out.append([(f"{label}:", "muted"), (str(final[name]), "")])
    if final:
        spread = final.get("spread")
        spread_text = ("- (one rep)" if (final.get("reps") or 0) < 2
                       else "- (no rep moved a token)" if spread is None else fmt_pct(spread))
        out.append([("median", "muted"), (f"{fmt_tok(final.get('agg_tok_s'))} tok/s", "bold"),
                    ("spread", "muted"), (spread_text, ""),
                    ("basis", "muted"), (str(final.get("basis") or "whole"), "")])
    out += acceptance_lines(state, r)
    out += [[], *rep_lines(r), [], *attempt_lines(r)]
    d = row_delta(state, r, rule)
    out.append([])
    if d is None:
        ref = reference(state, f"{r.session}-{r.window}")
        theirs = None if ref is None else state.rows.get(
            row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate))
        why = (f"{r.key} is in the reference window" if ref is None else
               f"no delta: this row is {r.status}" if r.status not in USABLE_ROWS | LIVE_ROWS else
               f"no delta: {ref.key} has no row of this shape" if theirs is None else
               f"no delta: the control's row is {theirs.status}")
        out += [heading("Against the control"), [("  " + why, "muted")]]
    else:
        out += [heading(f"Delta against {d.ref.key}"),
                [("  Δ", "muted"), interval_seg(d)],
                [("  this row's reps", "muted"), (" ".join(fmt_tok(v) for v in d.here), "")],
                [("  the control's reps", "muted"), (" ".join(fmt_tok(v) for v in d.there), "")],
                *formed(state, d, rule)]
    out += [[], heading("Receipts")]
    for a in sorted(r.files):
        out += [[(f"  a{a} rep {n}:", "muted"), (path, "")] for n, path in sorted(r.files[a].items())]
    if final.get("source"):
        out.append([("  the row's figures from:", "muted"), (str(final["source"]), "")])
    ws = state.windows.get(f"{r.session}-{r.window}")
    log = ws.log if ws and ws.log else None
    if log:
        out.append([("  l opens", "muted"), (log, ""), ("in $PAGER", "muted")])
    return Detail(f"row {r.key}", out, server_command(ws) if ws else None, log)


def acceptance_lines(state: RunState, r: RowState) -> list[Line]:
    """Acceptance (engine.method.acceptance): length and rate with their interval across the
    reps, the per-position curve beside the control's, each rep's figures; none without drafts."""
    final = r.row
    if final.get("accept_len") is None and final.get("accept_rate") is None:
        return []

    def figure(name: str, spec: str) -> str:
        v, lo, hi = final.get(name), final.get(f"{name}_lo"), final.get(f"{name}_hi")
        text = "-" if v is None else format(v, spec)
        return text + (f" [{lo:{spec}}, {hi:{spec}}]" if lo is not None and hi is not None else "")

    def curve(row: Mapping[str, Any]) -> str:
        text = row.get("accept_per_pos") or ""
        shares = " ".join(f"{float(x):.2f}" for x in text.split())
        return f"{shares} {fmt_curve(text)}" if text else "none from this server"

    # Simulated: the server was told to accept drafts at a set rate (engine.method.acceptance).
    how: Seg = ((str(final["acceptance"]), "warning") if is_simulated(final)
                else (str(final.get("acceptance") or ""), ""))
    out: list[Line] = [[("acceptance", "muted"), (f"length {figure('accept_len', '.2f')}", "bold"),
                        ("rate", "muted"), (figure("accept_rate", ".3f"), ""),
                        ("from", "muted"), (str(final.get("accept_source") or "-"), ""), how],
                       [("  per draft position", "muted"), (curve(final), "")]]
    ref = reference(state, f"{r.session}-{r.window}")
    # Beside the control's (a control's: the previous session's control, its drift).
    theirs = None if ref is None else state.rows.get(
        row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate))
    if ref is not None and theirs is not None and theirs.row:
        out.append([(f"  {ref.key}", "muted"), (curve(theirs.row), "")])
    lens, rates = final.get("rep_accept_len") or [], final.get("rep_accept_rate") or []
    if lens:
        out.append([("  each rep", "muted"), (" ".join(
            f"{'-' if n is None else f'{n:.2f}'}/{'-' if a is None else f'{a:.3f}'}"
            for n, a in zip(lens, rates, strict=False)), "")])
    return out


def rep_lines(r: RowState) -> list[Line]:
    """Every rep of every attempt: its steady figure (the headline) and its whole-rep one."""
    out = [heading("Reps (tok/s: steady window, whole rep; ! a suspected leak)")]
    marked = leak_marks(r)
    for a in sorted(r.reps):
        for n, v in sorted(r.reps[a].items()):
            whole = r.whole.get(a, {}).get(n)
            mark = "!" if a == r.attempt and n in marked else ""
            g = (r.gpu.get(a) or {}).get(n) or {}
            power = f"{g['power_w']:.0f} W" if g.get("power_w") is not None else ""
            figures: list[Seg] = ([(f"steady {fmt_tok(v)}{mark}", "warning" if mark else ""),
                                   (f"whole {fmt_tok(whole)}", "muted")]
                                  if whole is not None and whole != v else
                                  [(f"{fmt_tok(v)}{mark}", "warning" if mark else ""),
                                   ("(whole rep: no steady window)", "muted")])
            out.append([(f"  a{a} rep {n}", "bold"), *figures, (power, "muted")])
    if r.status in LIVE_ROWS:
        out.append([("  …", "muted")])
    if len(out) == 1:
        out.append([("  none yet", "muted")])
    return out


def attempt_lines(r: RowState) -> list[Line]:
    """What became of each attempt: voided and rerun (the rule's reason), taken (the row's status),
    in flight, or rerun by the operator."""
    out = [heading("Attempts")]
    for i, a in enumerate(sorted(r.reps)):
        n = len(r.reps[a])
        if a == r.attempt:
            fate = "measuring" if r.status in LIVE_ROWS else f"{r.status}: the row's figures"
        elif i < len(r.voids):
            fate = f"void, rerun: {r.voids[i]}"
        else:
            fate = "rerun by the operator"
        out.append([(f"  attempt {a}", "bold"), (f"{n} rep{'' if n == 1 else 's'}", "muted"), (fate, "")])
    if len(out) == 1:
        out.append([("  none yet" if r.status != RowStatus.FAILED else
                     "  none: the window failed before this shape ran", "muted")])
    return out


def boot_lines(state: RunState, ws: WindowState) -> list[Line]:
    """The boot and every fact that differs from the control's (the diff the engine recorded)."""
    ready = f"ready in {ws.boot_s:.1f} s" if ws.boot_s is not None else ws.status
    out = [heading("Boot"), [("  " + ready, ""), (f"· {len(ws.facts)} facts", "muted")]]
    if ws.window == CONTROL:
        return [*out, [("  the control: the facts its session's windows are compared with", "muted")]]
    diff: dict[str, Any] | None = ws.diff
    if diff is None:
        return [*out, [("  no diff against the control recorded (yet)", "muted")]]
    changed = diff.get("changed", {})
    out.append([(f"  against {ws.session}-{CONTROL}: {len(changed)} changed, "
                 f"{len(diff.get('equal', []))} equal", "bold")])
    out += [[(f"  ≠ {k}", "warning"), (f"{here} (control {there})", "")]
            for k, (here, there) in changed.items()]
    out += [[(f"  + {k}", "accent"), (str(v), "")] for k, v in diff.get("only_here", {}).items()]
    out += [[(f"  - {k}", "muted"), (str(v), "muted")] for k, v in diff.get("only_there", {}).items()]
    if diff.get("flagged"):
        out.append([("  flagged:", "error"), (", ".join(map(str, diff["flagged"])), "")])
    return out
