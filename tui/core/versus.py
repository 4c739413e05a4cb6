"""A window against its control: the deltas per shape, the headline, its cells and its bars."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from engine.method import acceptance
from engine.method.verdict import Call, Rule, Versus, judge_one, versus
from engine.record.judgement import Judgement, judgement
from engine.record.state import RowState, RunState, WindowState
from engine.words import CONTROL, LIVE_ROWS, USABLE_ROWS, RowStatus, WindowStatus, is_control, row_key
from tui.core.fmt import Seg, fmt_ci, fmt_pct, fmt_tok
from tui.core.windows import window_rows


class Judged:
    """The run's judgement (engine.record.judgement) as the console asks it, once per change of the
    fold: judgement() keys its own cache on every usable row's reps, a scan of a day-long run's
    2,800 rows at each call, and the windows list asks for every window's every shape (11 million
    rows read a frame, seconds of CPU a key). The fold only changes by an event, each with the next
    seq, so the state's last seq (and its size, for a state built by hand) says when to ask again."""

    def __init__(self) -> None:
        self._state: RunState | None = None
        self._key: tuple[object, ...] = ()
        self._found: Judgement | None = None

    def __call__(self, state: RunState, rule: Rule) -> Judgement:
        key = (state.last_seq, len(state.rows), len(state.windows), len(state.looks), rule)
        if self._found is None or self._state is not state or self._key != key:
            self._found = judgement(state, rule)
            self._state, self._key = state, key
        return self._found


judged = Judged()


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
    """A row against its reference's row of the same shape: both sides' reps, the interval (the
    noise between boots counted), the call (the run's own, engine.record.judgement; none while a side
    is still measuring) and whether a side is still measuring."""

    row: RowState
    ref: RowState
    here: list[float]
    there: list[float]
    versus: Versus
    call: str  # an engine.method.verdict.Call; "" while provisional
    provisional: bool

    @property
    def interval(self) -> tuple[float, float] | None:
        return self.versus.interval()

    @property
    def delta(self) -> float:
        return self.versus.delta


def pair(state: RunState, r: RowState, theirs: RowState | None, rule: Rule) -> RowDelta | None:
    """The delta of ``r`` against ``theirs``: a finished window row's is throughput.csv's (against
    its session's control boots, with the run's call); a row still measuring, or a control
    against an earlier session's, is this pair alone with the noise between boots at its load
    (a control's call: its p-value alone, no family)."""
    here, there = row_reps(r), row_reps(theirs)
    if theirs is None or not here or not there:
        return None
    provisional = here[1] or there[1]
    j = judged(state, rule)
    if r.key in j.refused or simulated(state, r) != simulated(state, theirs):
        return None  # withheld, as the engine withholds it (its why: the row's verdict_why)
    call, mine = j.rows.get(r.key), j.versus(r.key)
    if call is not None and mine is not None and not provisional:
        return RowDelta(r, theirs, here[0], there[0], mine, call.call.value, False)
    v = versus(here[0], [there[0]], j.noise_or_declared(r.cls, r.concurrency, r.rate))
    if v is None:
        return None
    word = "" if provisional or r.window != CONTROL else judge_one(v, rule).call.value
    return RowDelta(r, theirs, here[0], there[0], v, word, provisional)


def simulated(state: RunState, r: RowState) -> bool:
    """Whether the row's window was told to simulate acceptance: its tok/s is of draft tokens
    nobody checked, so it has no delta against a measured one (engine.method.acceptance.unlike),
    finished or still measuring."""
    ws = state.windows.get(f"{r.session}-{r.window}")
    return bool(ws is not None and ws.simulated)


def withheld(state: RunState, wkey: str, rule: Rule) -> str:
    """Why a window's deltas are withheld, in the engine's words (a row it refused: another
    basis, a simulated acceptance, a stack not token-identical), or a simulated acceptance against
    a measured one while its rows still measure; "" when they are not."""
    why = next((w for k, w in judged(state, rule).refused.items() if k.startswith(f"{wkey}/")), "")
    ws, ref = state.windows.get(wkey), reference(state, wkey)
    if why or ws is None or ref is None:
        return why
    rows = [{"acceptance": acceptance.simulated_text(w.simulated)} if w.simulated else {} for w in (ws, ref)]
    return acceptance.unlike(*rows) or ""


def row_delta(state: RunState, r: RowState, rule: Rule) -> RowDelta | None:
    """One row's delta against its reference's row of the same shape, or None."""
    ref = reference(state, f"{r.session}-{r.window}")
    if ref is None:
        return None
    return pair(state, r, state.rows.get(row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate)),
                rule)


def shape_deltas(state: RunState, wkey: str, rule: Rule) -> list[RowDelta]:
    """The deltas against the reference, per shape measured in both."""
    return [d for r, theirs in against(state, wkey) if (d := pair(state, r, theirs, rule)) is not None]


def headline(state: RunState, wkey: str, rule: Rule) -> RowDelta | None:
    """The median shape's delta: shapes at different concurrency differ by multiples, so a delta
    per shape keeps one fast shape from deciding the headline. It is one shape's own, so that its
    interval and call go with it: of an even count's two middle shapes, the one nearer 0 (the
    headline never overstates)."""
    deltas = sorted(shape_deltas(state, wkey, rule), key=lambda d: d.delta)
    if not deltas:
        return None
    middle = deltas[(len(deltas) - 1) // 2: len(deltas) // 2 + 1]
    return min(middle, key=lambda d: abs(d.delta))


def delta_cells(state: RunState, wkey: str, rule: Rule) -> tuple[Seg, Seg]:
    """The headline delta, coloured only when the run calls it an effect, and its 95 % interval
    (``[+8,+17]``, percent) as the next column, shown where the screen has room: the windows list
    draws them for each of a day-long run's hundreds of windows at every batch."""
    ws = state.windows[wkey]
    if ws.window == CONTROL:
        return ("ctl", "muted"), ("", "")
    h = headline(state, wkey, rule)
    if h is None:
        if withheld(state, wkey, rule):
            return ("withheld", "warning"), ("", "")  # the window's detail says why
        return no_delta(state, ws), ("", "")
    iv = h.interval
    ci: Seg = ("", "") if iv is None else (fmt_ci(*iv), "muted")
    return interval_seg(h, with_ci=False), ci


CALL_TAGS = {Call.EFFECT: "bold", Call.NONE: "", Call.UNDETERMINED: "muted"}


def window_call(state: RunState, wkey: str, rule: Rule) -> Seg:
    """The window's call: its one question (does it change tok/s at any of its shapes?) asked once
    over its sessions, in the report's words (the glance table's "the window's call"); blank on a
    control, and while none of its rows has landed."""
    ws = state.windows[wkey]
    asked = judged(state, rule).windows.get(ws.window)
    if asked is None or is_control(ws.window):
        return "", ""
    return asked.text(), CALL_TAGS.get(asked.call, "")


def interval_seg(d: RowDelta, beyond: str = "", with_ci: bool = True) -> Seg:
    """A delta (and its interval); coloured (``beyond``, else by its sign) only when called an
    effect; ``~`` while a side is still measuring."""
    text = ("~" if d.provisional else "") + fmt_pct(d.delta, signed=True)
    iv = d.interval
    if with_ci and iv is not None:
        text += " " + fmt_ci(*iv)
    if d.call != Call.EFFECT:
        return text, ""
    return text, beyond or ("success" if d.delta > 0 else "error")


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


def bars_lines(state: RunState, wkey: str | None, rule: Rule | None, width: int = 10) -> list[list[Seg]]:
    """Window-versus-control bars: the headline first, then one pair of bars per shape (``rule``
    None: the run not judged yet, the headline to come)."""
    ws = state.windows.get(wkey or "")
    if ws is None:
        return []
    ref = reference(state, ws.key)
    if ref is None:
        return [[(f"{ws.key}: the reference of session {ws.session}", "muted")]]
    what = f"drift vs {ref.session} control" if ws.window == CONTROL else "vs control"
    if rule is None:
        return [[(f"{what}: …", "muted")]]
    pairs = shape_pairs(state, ws.key)
    h = headline(state, ws.key, rule)
    if h is None:
        why = withheld(state, ws.key, rule)
        return [[(f"{what}: {why or 'no shape measured in both yet'}", "warning" if why else "muted")]]
    # A control's delta is drift: past the noise it is a warning, not good or bad news.
    out = [[(f"{what} ", "bold"), interval_seg(h, "warning" if ws.window == CONTROL else ""),
            (f" (median of {len(pairs)} shapes, [95 % interval]; this │ ref)", "muted")]]
    for shape, here, there, _ in pairs:
        top = max(here, there)
        out.append([(f"{shape:<9} ", ""), (bar(here / top, width), "accent"), (f" {fmt_tok(here):>6}", ""),
                    (" │ ", "muted"), (bar(there / top, width), "muted"), (f" {fmt_tok(there):>6}", "")])
    return out
