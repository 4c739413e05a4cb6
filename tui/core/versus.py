"""A window against its control: the deltas per shape, the headline, its cells and its bars."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from engine.method.delta import Interval, observable, pair_delta, stage_of
from engine.record.state import RowState, RunState, WindowState
from engine.words import CONTROL, LIVE_ROWS, USABLE_ROWS, RowStatus, WindowStatus, row_key
from tui.core.fmt import Seg, fmt_ci, fmt_pct, fmt_tok
from tui.core.windows import window_rows


def row_value(r: RowState | None) -> tuple[float, bool] | None:
    """(tok/s, provisional): the final median, or the running median of the attempt in flight."""
    if r is None:
        return None
    if r.status in USABLE_ROWS and r.row.get("agg_tok_s") is not None:
        return float(r.row["agg_tok_s"]), False
    if r.status in LIVE_ROWS:
        reps = list(r.reps.get(r.attempt, {}).values())
        if reps:
            return statistics.median(reps), True
    return None


def reference(state: RunState, wkey: str) -> WindowState | None:
    """What a window is compared with: its session's control; a control, the previous session's
    control (boot-to-boot drift, the reason the control is booted again every session)."""
    ws = state.windows.get(wkey)
    if ws is None:
        return None
    if ws.window != CONTROL:
        return state.windows.get(f"{ws.session}-{CONTROL}")
    controls = [k for k in state.order if state.windows[k].window == CONTROL]
    i = controls.index(wkey)
    return state.windows[controls[i - 1]] if i > 0 else None


def against(state: RunState, wkey: str) -> list[tuple[RowState, RowState | None]]:
    """Each row of a window beside its reference's row of the same shape (None: none there)."""
    ref = reference(state, wkey)
    if ref is None:
        return []
    return [(r, state.rows.get(row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate)))
            for r in window_rows(state, wkey)]


def shape_pairs(state: RunState, wkey: str) -> list[tuple[str, float, float, bool]]:
    """(shape, window tok/s, reference tok/s, provisional) for shapes measured in both."""
    out = []
    for r, theirs in against(state, wkey):
        here, there = row_value(r), row_value(theirs)
        if here and there and there[0] > 0:
            out.append((f"{r.cls} {r.load}", here[0], there[0], here[1] or there[1]))
    return out


def row_reps(r: RowState | None) -> tuple[list[float], bool] | None:
    """(each rep's tok/s, provisional): the final row's, or the attempt in flight's so far."""
    if r is None:
        return None
    if r.status in USABLE_ROWS and r.row.get("rep_tok_s"):
        return [float(x) for x in r.row["rep_tok_s"]], False
    if r.status in LIVE_ROWS and r.reps.get(r.attempt):
        return list(r.reps[r.attempt].values()), True
    return None


@dataclass(frozen=True)
class RowDelta:
    """A row against its reference's row of the same shape: both sides' reps, the first stage whose
    variance the interval takes (reps to a precision), the interval, and whether a side is still
    measuring."""

    row: RowState
    ref: RowState
    here: list[float]
    there: list[float]
    stage: int | None
    interval: Interval
    provisional: bool


def pair(r: RowState, theirs: RowState | None) -> RowDelta | None:
    """The delta of ``r`` against ``theirs``: the same computation as throughput.csv's delta
    columns (engine.method.delta)."""
    here, there = row_reps(r), row_reps(theirs)
    if theirs is None or not here or not there:
        return None
    stage = stage_of(r.row, theirs.row)  # reps to a precision: Stein's
    iv = pair_delta(tuple(here[0]), tuple(there[0]), stage)
    return None if iv is None else RowDelta(r, theirs, here[0], there[0], stage, iv, here[1] or there[1])


def row_delta(state: RunState, r: RowState) -> RowDelta | None:
    """One row's delta against its reference's row of the same shape, or None."""
    ref = reference(state, f"{r.session}-{r.window}")
    if ref is None:
        return None
    return pair(r, state.rows.get(row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate)))


def shape_deltas(state: RunState, wkey: str) -> list[tuple[str, Interval, bool]]:
    """(shape, delta with its interval, provisional) against the reference, per shape measured
    in both."""
    return [(f"{d.row.cls} {d.row.load}", d.interval, d.provisional)
            for r, theirs in against(state, wkey) if (d := pair(r, theirs)) is not None]


def headline(state: RunState, wkey: str) -> tuple[Interval, bool] | None:
    """The median shape's delta and interval: shapes at different concurrency differ by
    multiples, so a delta per shape keeps one fast shape from deciding the headline. It is one
    shape's own, so that its interval goes with it: of an even count's two middle shapes, the one
    nearer 0 (the headline never overstates)."""
    deltas = sorted(shape_deltas(state, wkey), key=lambda d: d[1].delta)
    if not deltas:
        return None
    middle = deltas[(len(deltas) - 1) // 2: len(deltas) // 2 + 1]
    _, iv, _ = min(middle, key=lambda d: abs(d[1].delta))
    return iv, any(p for *_, p in deltas)


def delta_seg(state: RunState, wkey: str, noise: float = 0.0) -> Seg:
    """The headline delta, coloured only when it is beyond the noise (its interval excludes 0 and
    it exceeds ``noise``, the campaign's declared noise): the rule of the report and the no-effect
    check. Its interval is the next column (:func:`ci_seg`), shown where the screen has room."""
    return delta_cells(state, wkey, noise)[0]


def ci_seg(state: RunState, wkey: str) -> Seg:
    """The headline delta's 95 % interval, ``[+8,+17]`` (percent), or nothing."""
    return delta_cells(state, wkey)[1]


def delta_cells(state: RunState, wkey: str, noise: float = 0.0) -> tuple[Seg, Seg]:
    """:func:`delta_seg` and :func:`ci_seg` of one window from one headline: the windows list draws
    them for each of a day-long run's hundreds of windows at every batch."""
    ws = state.windows[wkey]
    if ws.window == CONTROL:
        return ("ctl", "muted"), ("", "")
    h = headline(state, wkey)
    if h is None:
        return no_delta(state, ws), ("", "")
    iv = h[0]
    ci: Seg = ("", "") if iv.lo is None or iv.hi is None else (
        fmt_ci(iv.lo, iv.hi), "muted")
    return interval_seg(*h, noise, with_ci=False), ci


def interval_seg(iv: Interval, provisional: bool, noise: float, beyond: str = "",
                 with_ci: bool = True) -> Seg:
    """A delta (and its interval); coloured (``beyond``, else by its sign) only past the noise."""
    text = ("~" if provisional else "") + fmt_pct(iv.delta, signed=True)
    if with_ci and iv.lo is not None and iv.hi is not None:
        text += " " + fmt_ci(iv.lo, iv.hi)
    if not observable(iv, noise):
        return text, ""
    return text, beyond or ("success" if iv.delta > 0 else "error")


def no_delta(state: RunState, ws: WindowState) -> Seg:
    """Why a window with figures has no Δ: its control has none to compare with (void rows, or a
    control that never served). Blank while there is simply nothing to compare yet."""
    ref = reference(state, ws.key)
    if ref is None:
        return "", ""
    if ref.status in (WindowStatus.REJECTED, WindowStatus.FAILED):
        return f"control {ref.status}", "warning"
    mine = [r for r in window_rows(state, ws.key) if row_value(r) is not None]
    theirs = [state.rows.get(row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate)) for r in mine]
    words = {t.status for t in theirs if t is not None}
    if mine and None not in theirs and words and words <= {RowStatus.VOID, RowStatus.FAILED,
                                                           RowStatus.ABORTED}:
        return "control " + (words.pop() if len(words) == 1 else "unusable"), "warning"
    return "", ""


EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(frac: float, width: int) -> str:
    cells = max(0.0, min(1.0, frac)) * width
    full = int(cells)
    part = EIGHTHS[int((cells - full) * 8)] if full < width else ""
    return ("█" * full + part).ljust(width)


def bars_lines(state: RunState, wkey: str | None, width: int = 10,
               noise: float = 0.0) -> list[list[Seg]]:
    """Window-versus-control bars: the headline first, then one pair of bars per shape."""
    ws = state.windows.get(wkey or "")
    if ws is None:
        return []
    ref = reference(state, ws.key)
    if ref is None:
        return [[(f"{ws.key}: the reference of session {ws.session}", "muted")]]
    what = f"drift vs {ref.session} control" if ws.window == CONTROL else "vs control"
    pairs = shape_pairs(state, ws.key)
    h = headline(state, ws.key)
    if h is None:
        return [[(f"{what}: no shape measured in both yet", "muted")]]
    # A control's delta is drift: past the noise it is a warning, not good or bad news.
    out = [[(f"{what} ", "bold"), interval_seg(*h, noise, "warning" if ws.window == CONTROL else ""),
            (f" (median of {len(pairs)} shapes, [95 % interval]; this │ ref)", "muted")]]
    for shape, here, there, _ in pairs:
        top = max(here, there)
        out.append([(f"{shape:<9} ", ""), (bar(here / top, width), "accent"), (f" {fmt_tok(here):>6}", ""),
                    (" │ ", "muted"), (bar(there / top, width), "muted"), (f" {fmt_tok(there):>6}", "")])
    return out
