"""A campaign read against an earlier run of it (``ruler validate --baseline RUN``): per shape,
how long its reps last and how noisy they were, whether a rep is long enough for a steady window,
and (``--explain``) the reps and wall time the campaign's precision asks for.

Per shape (class x load) of the earlier run: its reps' seconds, ramp, steady window and tail
(the control's first rep of its first session, from its receipt), and the noise of its rows (the
standard deviation of log tok/s over each row's reps, pooled over the control rows and over the
window rows apart). Nothing is measured; the estimate is engine.method.precision's rule applied
to that noise as if it were a first stage's.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from engine.campaign.spec import Campaign
from engine.errors import BadInput
from engine.method import precision, stats, steady
from engine.record import results
from engine.record.journal import damage_report
from engine.record.receipts import ReceiptError, read_rep, source_paths
from engine.record.snapshot import fold_journal
from engine.record.state import RunState
from engine.words import CONTROL, USABLE_ROWS, load_text

Shape = tuple[str, int, float | None]  # class, concurrency, rate


@dataclass
class Seen:
    """One shape as the earlier run measured it."""

    requests: int = 0  # the first control rep's requests, its seconds, ramp, window and tail
    wall_s: float = 0.0
    ramp_s: float | None = None
    steady_s: float | None = None
    tail_s: float | None = None
    steady_cycles: float | None = None  # closed loop: its window's request cycles per worker
    rep_s: list[float] = field(default_factory=list)  # every usable row's reps' seconds
    control_logs: list[list[float]] = field(default_factory=list)  # per row: log tok/s of its reps
    window_logs: list[list[float]] = field(default_factory=list)

    def sd(self, control: bool) -> float | None:
        """Pooled sd of log tok/s over the rows (each row about its own mean)."""
        rows = [r for r in (self.control_logs if control else self.window_logs) if len(r) > 1]
        df = sum(len(r) - 1 for r in rows)
        if not df:
            return None
        ss = sum(sum((x - sum(r) / len(r)) ** 2 for x in r) for r in rows)
        return math.sqrt(ss / df)


def read_baseline(run_dir: Path) -> tuple[dict[Shape, Seen], str | None]:
    """Each shape of an earlier run, from its journal and the receipts its rows name, and what of
    its journal is damaged (None: nothing), which the figures leave out. A receipt that is not
    one, or a row naming a file outside the run, is BadInput."""
    journal = run_dir / results.JOURNAL
    if not journal.is_file():
        raise BadInput(f"--baseline {run_dir}: no {results.JOURNAL} there (not a ruler run)")
    state = fold_journal(journal)
    try:
        seen = _shapes(run_dir, state)
    except ReceiptError as e:
        raise BadInput(f"--baseline {run_dir}: {e}") from None
    damage = (f"--baseline {run_dir}: its journal has {len(state.damage)} damaged line"
              f"{'s' if len(state.damage) > 1 else ''}, left out of its figures:\n"
              + damage_report(journal, state.damage)) if state.damage else None
    return seen, damage


def _shapes(run_dir: Path, state: RunState) -> dict[Shape, Seen]:
    seen: dict[Shape, Seen] = {}
    for row in state.rows.values():
        fig = row.row
        if fig.get("status") not in USABLE_ROWS or not fig.get("rep_tok_s"):
            continue
        s = seen.setdefault((row.cls, row.concurrency, row.rate), Seen())
        logs = [math.log(v) for v in fig["rep_tok_s"] if v > 0]
        (s.control_logs if row.window == CONTROL else s.window_logs).append(logs)
        reps = [read_rep(p) for p in source_paths(run_dir, str(fig.get("source") or "")) if p.is_file()]
        figs = [stats.rep_figures(records, row.concurrency) for h, records in reps if not h.get("void")]
        s.rep_s += [f["wall_s"] for f in figs]
        if row.window == CONTROL and figs and not s.requests:
            first = figs[0]
            s.requests, s.wall_s = first["requests"], first["wall_s"]
            s.ramp_s, s.steady_s, s.tail_s = first["ramp_s"], first["steady_s"], first["tail_s"]
            s.steady_cycles = first["steady_cycles"]
    return seen


def _requests(campaign: Campaign, c: int, rate: float | None) -> int:
    wl = campaign.workload
    return wl.requests_at(rate) if rate else wl.requests_for(c)


def expected_rep(campaign: Campaign, shape: Shape, s: Seen) -> tuple[float, float | None]:
    """A rep's expected seconds at this campaign's size, and its steady window's (None: none)."""
    wl, (_, c, rate) = campaign.workload, shape
    if s.ramp_s is None or s.tail_s is None or not s.requests or s.wall_s <= 0:
        return s.wall_s, None
    if wl.rep_seconds and not wl.requests_per_rep:
        wall = wl.rep_seconds + s.tail_s
    else:
        wall = s.wall_s * _requests(campaign, c, rate) / s.requests
    return wall, wall - s.ramp_s - s.tail_s


def short_rep_warnings(campaign: Campaign, run_dir: Path, seen: dict[Shape, Seen]) -> list[str]:
    """A warning per shape whose reps would be too short for a steady window: none at all, or
    one shorter than the ramp and the tail together."""
    out = []
    for cls in campaign.workload.classes:
        for c, rate in campaign.workload.loads_of(cls):
            s = seen.get((cls, c, rate))
            if s is None or not s.requests:
                continue
            wall, window = expected_rep(campaign, (cls, c, rate), s)
            # A window's cycles grow with its seconds at the shape's pace.
            cycles = (s.steady_cycles * window / s.steady_s if s.steady_cycles is not None
                      and s.steady_s and window is not None else None)
            if steady.too_short(window, s.ramp_s, s.tail_s, cycles):
                said = "no steady window" if window is None or window <= 0 else \
                    f"a steady window of about {window:.2f} s" + (
                        f" and {cycles:.1f} request cycles per worker (under "
                        f"{steady.MIN_CYCLES:g})" if cycles is not None else "")
                out.append(f"workload: {cls} {load_text(c, rate)}: a rep lasts about {wall:.2f} s "
                           f"(the control's first rep in {run_dir}: {s.requests} requests in "
                           f"{s.wall_s:.2f} s, ramp {s.ramp_s or 0:.2f} s, tail {s.tail_s or 0:.2f} s), "
                           f"{said}: too short for a steady window at {load_text(c, rate)}; give more "
                           f"requests_per_rep or rep_seconds")
    return out


def plan_text(campaign: Campaign, run_dir: Path, seen: dict[Shape, Seen]) -> str:
    """Per shape: the earlier run's noise and rep seconds, the reps the precision asks of a
    control row and of a window row, and the wall time of the campaign's reps."""
    wl = campaign.workload
    sessions = len(campaign.sessions)
    windows = sum(len(w) for w in campaign.sessions.values())  # window rows per shape, all sessions
    rule = precision.Rule(wl.precision, wl.max_reps, wl.reps) if wl.precision else None
    head = (f"# reps to precision +-{wl.precision:.1%} (Stein's two-stage rule on {wl.reps} first-stage "
            f"reps, at most {wl.max_reps}), estimated from {run_dir}" if rule else
            f"# reps from {run_dir}: workload.precision is not set, every row takes {wl.reps} reps")
    lines = [head, f"{'shape':<18} {'control sd':>10} {'window sd':>9} {'rep s':>6} "
                   f"{'control reps':>12} {'window reps':>11} {'wall':>9}"]
    total = 0.0
    for cls in wl.classes:
        for c, rate in wl.loads_of(cls):
            name = f"{cls} {load_text(c, rate)}"
            s = seen.get((cls, c, rate))
            if s is None or not s.rep_s:
                lines.append(f"{name:<18} not in the baseline")
                continue
            rep_s = expected_rep(campaign, (cls, c, rate), s)[0] or statistics.median(s.rep_s)
            sd_c, sd_w = s.sd(control=True), s.sd(control=False)
            if sd_w is None:
                sd_w = sd_c
            nc = nw = wl.reps
            if rule and sd_c is not None and sd_w is not None:
                got_c, got_w = precision.reps_needed(sd_w, sd_c, rule)
                nc, nw = got_c or wl.reps, got_w or wl.reps
                said_c = str(got_c) if got_c else f"{wl.reps} (out of reach)"
                said_w = str(got_w) if got_w else f"{wl.reps} (out of reach)"
            else:
                said_c, said_w = str(nc), str(nw)
            # Each rep and each attempt's warm pass: the control once a session, each window once.
            wall = ((nc + 1) * sessions + (nw + 1) * windows) * rep_s
            total += wall
            lines.append(f"{name:<18} {_pct(sd_c):>10} {_pct(sd_w):>9} {rep_s:>6.2f} {said_c:>12} "
                         f"{said_w:>11} {wall:>8.0f}s")
    lines.append(f"measurement wall time, every shape of every session: about {total / 60:.1f} min "
                 "(boots and quality checks not counted)")
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"
