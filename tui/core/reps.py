"""The reps table: a row per shape of the window shown, its reps as they land; and the reps'
series for the sparkline."""

from __future__ import annotations

import statistics
from typing import Any

from engine.method.acceptance import is_simulated
from engine.method.leak import spread_figure
from engine.record.figures import FIGURES
from engine.record.state import RowState, RunState
from engine.words import LIVE_ROWS, RowStatus
from tui.core.columns import Col
from tui.core.fmt import Seg, fmt_curve, fmt_tok, fmt_turns
from tui.core.rules import DECLARED, LeakRule
from tui.core.windows import window_rows

# The row figures shown after the row's status, in this order (their columns, formats:
# engine.record.figures).
FIGURE_COLUMNS = ("per_user_tok_s", "accept_len", "accept_rate", "achieved_rps", "goodput_rps",
                  "ttft_ms")
MEDIAN, SPREAD = FIGURES["agg_tok_s"].column, FIGURES["spread"].column
CURVE = "acc pos"  # the per-position acceptance, a block a draft position (fmt_curve)
REP_COLUMNS = ["shape", "reps tok/s", MEDIAN, SPREAD, "status", "att",
               *(FIGURES[n].column for n in FIGURE_COLUMNS), CURVE, "why"]


# Always the shape, its reps (with their leak marks; cut on a narrow screen), its median tok/s,
# spread and status: what ruler is read by. Then a row's reason (its start: the figure against
# the limit; the detail view has it whole), acceptance (what speculative windows differ in), the
# rest; the finished request rate and goodput next (what a rate sweep is read by, where a
# closed-loop row's req/s says little its tok/s does not); the attempt, bookkeeping, goes first.
_REP_RANKS = {"shape": 0, "reps tok/s": 0, MEDIAN: 0, SPREAD: 0, "status": 0, "why": 1,
              **{FIGURES[n].column: rank for n, rank in (
                  ("accept_rate", 2), ("accept_len", 3), ("per_user_tok_s", 4), ("ttft_ms", 5),
                  ("achieved_rps", 6), ("goodput_rps", 7))}, CURVE: 3, "att": 8}
_CUTS = {"why": 16, "reps tok/s": 10}


REP_COLS = [Col(name, _REP_RANKS[name], cut=_CUTS.get(name, 0)) for name in REP_COLUMNS]


STATUS_WORD: dict[str, Seg] = {
    RowStatus.OK: ("ok", "success"), RowStatus.NOISY: ("noisy", "warning"),
    RowStatus.VOID: ("VOID", "error"), RowStatus.WARM: ("warm", "accent"),
    RowStatus.MEASURING: ("meas", "accent"), RowStatus.PENDING: ("pending", "muted"),
    RowStatus.FAILED: ("FAILED", "error"), RowStatus.ABORTED: ("aborted", "warning")}


def leak_marks(r: RowState) -> set[int]:
    """The reps of the row's attempt marked "!": while it measures, each the leak rule condemned on
    the reps so far as one landed; once done, the final reading's only: the low rep of a
    leak-shaped row. A rep once condemned that later reps put back within the noise is not a leak.
    (A row from before the leak's shape was recorded keeps the marks as they landed.)"""
    final = r.row and r.row.get("attempts", r.attempt) == r.attempt
    if not final or "spread_shape" not in r.row:
        return {rep for a, rep in r.suspects if a == r.attempt}
    if r.row.get("spread_shape") != "leak":
        return set()
    reps = r.reps.get(r.attempt, {})
    return {min(reps, key=lambda n: reps[n])} if reps else set()


def rep_segs(r: RowState, expected: int | None) -> list[Seg]:
    """The attempt's reps as they land; a suspected leak carries "!" on its rep."""
    reps, gpus = r.reps.get(r.attempt, {}), r.gpu.get(r.attempt, {})
    marked = leak_marks(r)
    segs: list[Seg] = []
    for rep in sorted(reps):
        suspect = rep in marked
        segs.append((fmt_tok(reps[rep]) + ("!" if suspect else "") + gpu_text(gpus.get(rep)),
                     "warning" if suspect or (gpus.get(rep) or {}).get("throttle") else ""))
    if r.status in LIVE_ROWS and (expected is None or len(reps) < expected):
        segs.append(("…", "muted"))
    return segs


def gpu_text(g: dict[str, Any] | None) -> str:
    """A rep's mean power and lowest SM clock beside its tok/s (nothing without telemetry)."""
    if not g or g.get("power_w") is None:
        return ""
    clock = f"/{g['sm_mhz_min']:.0f}MHz" if g.get("sm_mhz_min") is not None else ""
    return f" {g['power_w']:.0f}W{clock}"


def why_text(r: RowState, leak: LeakRule) -> str:
    """Why a row stands as it does, whole: a void row's reason, what a noisy row's spread is made
    of (and, leak-shaped below the leak rule's concurrency, why it is noisy and not void), a
    multi-turn row's cache hit per turn, the void attempts before this one."""
    final = r.row
    why = str(final.get("reason") or "")
    if r.status == RowStatus.NOISY and final.get("spread_why"):  # noise, not a leak: why, first
        spread_why = str(final["spread_why"])
        if final.get("spread_shape") == "leak":
            spread_why = (f"below leak.min_concurrency ({leak.min_concurrency}) a leak-shaped row "
                          f"is noisy, not void: {spread_why}")
        why = "; ".join(x for x in (spread_why, why) if x)
    if final.get("turns"):  # a multi-turn row: the cache hit per turn leads
        why = "; ".join(x for x in (f"turns {fmt_turns(final['turns'])}", why) if x)
    earlier = [f"a{i + 1} void: {v}" for i, v in enumerate(r.voids)]
    if not why and earlier:
        why = "; ".join(earlier)
    return why


SIMULATED_FIGURES = ("accept_len", "accept_rate")  # what a server told to accept drafts sets


def figure_cell(r: RowState, name: str) -> list[Seg]:
    """A row figure's cell; an acceptance the server was told to simulate says so beside it
    (engine.method.acceptance: its tok/s is of draft tokens nobody checked)."""
    value = r.row.get(name)
    cell: list[Seg] = [(FIGURES[name].short(value), "")]
    if name in SIMULATED_FIGURES and value is not None and is_simulated(r.row):
        cell.append(("sim", "warning"))
    return cell


def row_cells(r: RowState, expected_reps: int | None, leak: LeakRule = DECLARED,
              waiting: str = "") -> dict[str, list[Seg]]:
    """Cells per column, each a list of segments; a void row is all error colour. ``waiting``: what
    the operator's rerun of this row waits on (the window's server to stop, the window up on its
    place to end): the row says so rather than the figures of the attempt it reruns."""
    final = r.row
    live_reps = list(r.reps.get(r.attempt, {}).values())
    if final:
        med, sp, prov = final.get("agg_tok_s"), final.get("spread"), False
        if (final.get("reps") or 0) < 2:
            sp = None  # one rep has no spread: "-", never 0.0 %
    else:
        med = statistics.median(live_reps) if live_reps else None
        sp, prov = (spread_figure(live_reps) if len(live_reps) > 1 else None), True
    word, style = STATUS_WORD.get(r.status, (r.status, ""))
    cells: dict[str, list[Seg]] = {
        "shape": [(f"{r.cls} {r.load}", "bold")],
        "reps tok/s": rep_segs(r, expected_reps),
        MEDIAN: [(("~" if prov and med is not None else "") + FIGURES["agg_tok_s"].short(med),
                  "muted" if prov else "")],
        SPREAD: [(FIGURES["spread"].short(sp), "muted" if prov else "")],
        "status": [(word, style)],
        "att": [(str(r.attempt or "-"), "warning" if r.attempt > 1 else "")],
        # A figure the row lacks is "-": no SLO set (goodput), no speculation, or an older row.
        **{FIGURES[n].column: figure_cell(r, n) for n in FIGURE_COLUMNS},
        CURVE: [(fmt_curve(final.get("accept_per_pos")), "")],
        "why": [(why_text(r, leak), "error" if r.status == RowStatus.VOID else "muted")],
    }
    if r.status == RowStatus.VOID:
        cells = {k: [(t, "error" if s in ("", "muted", "bold") else s) for t, s in v]
                 for k, v in cells.items()}
    if waiting:
        cells["status"] = [("rerun", "warning")]
        after = [seg for seg in cells["why"] if seg[0]]
        cells["why"] = [(f"rerun queued, waits on {waiting}" + (";" if after else ""), "warning"), *after]
    return cells


def rep_series(r: RowState | None) -> list[float]:
    """Every rep of every attempt in landing order: a void attempt then its rerun, side by side."""
    if r is None:
        return []
    return [r.reps[a][n] for a in sorted(r.reps) for n in sorted(r.reps[a])]


def window_series(state: RunState, wkey: str | None) -> list[float]:
    """Every rep of a window in landing order, each as a fraction of its own shape's median.

    Shapes differ by orders of magnitude (C1 against C8), so raw tok/s side by side would hide a
    leak in the small ones; against its own shape's median every sound rep stands near 1 and a
    leaked one is a stub.
    """
    out: list[float] = []
    for r in window_rows(state, wkey) if wkey else []:
        reps = rep_series(r)
        mid = statistics.median(reps) if reps else 0.0
        out += [v / mid if mid > 0 else 0.0 for v in reps]
    return out
