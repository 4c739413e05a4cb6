"""The header: where the campaign stands, the engine link, the shape in flight, a line per place."""

from __future__ import annotations

from engine.commands.eta import LoadPlan, elapsed, eta
from engine.record.state import RunState
from engine.words import OVER_RUNS, RunStatus
from tui.core.fmt import Seg, fmt_secs
from tui.core.sessions import on_places, pause_seg, place_lines, sessions_text
from tui.core.windows import live_row, phase, position, shape_segs


class Left:
    """The time left (engine.commands.eta), worked out once per change of the fold and second of
    the clock: it reads every rep of the run (28,000 on a day-long one, tens of ms), and the header
    is drawn at every key and every second; what is left only changes with an event or the clock."""

    def __init__(self) -> None:
        self._state: RunState | None = None
        self._key: tuple[object, ...] = ()
        self._left: float | None = None

    def __call__(self, state: RunState, plan: LoadPlan, now: float) -> float | None:
        key = (state.last_seq, len(state.rows), len(state.windows), state.status, plan, int(now))
        if self._state is not state or self._key != key:
            self._left = eta(state, plan, now)
            self._state, self._key = state, key
        return self._left


left = Left()


def damage_text(state: RunState) -> str:
    """The first damaged journal line, by position, and how many more (``ruler status`` lists them)."""
    first = min(state.damage, key=lambda d: d.line or 0)
    more = f" (+{len(state.damage) - 1} more)" if len(state.damage) > 1 else ""
    return f"journal.jsonl damaged, {first}{more}"


def header_lines(state: RunState, plan: LoadPlan, shown: str | None, link: tuple[bool, str] | None,
                 now: float, gone: bool = False, reading: int | None = None) -> list[list[Seg]]:
    """Two lines: where the campaign stands; then the engine link (first, so it is never cut
    off on a narrow terminal), the axis and the shape in flight. With sessions on places the
    first counts the sessions and a line per place follows (:func:`place_lines`). ``gone``: no
    engine process is left; ``reading``: the journal's events folded so far while its history is
    read (None: read to its end)."""
    places = on_places(state)
    cur = None if places else state.windows.get(state.current or "")
    # Once the run is over the header is its final word, not the window under the cursor.
    where = cur or (state.windows.get(shown or "") if state.status == RunStatus.RUNNING else None)
    line1: list[Seg] = [(state.campaign or "(waiting for the journal)", "bold")]
    if places:
        line1 += [("·", "muted"), (sessions_text(state), "")]
        if state.status != RunStatus.RUNNING:
            line1 += [("·", "muted"), phase(state)]
    else:
        if where:
            n, m = position(state, where.key)
            line1 += [("·", "muted"), (f"{where.session} {n}/{m}", ""), (where.window, "bold")]
        line1 += [("·", "muted"), phase(state), *pause_seg(state)]
    line1 += [("·", "muted"), (fmt_secs(elapsed(state, now)), "")]
    if state.status == RunStatus.RUNNING:
        line1.append(("~" + fmt_secs(left(state, plan, now)) + " left", "muted"))
    line1 += look_segs(state)
    line2: list[Seg] = [*link_segs(state, link, gone, reading)]
    row = live_row(state, cur.key if cur else None)
    if row:
        line2 += [("·", "muted"), *shape_segs(row, plan)]
    waiting = dict.fromkeys(state.reruns_waiting.values())
    if waiting:  # the operator's reruns, queued: what each waits on, said as it changes
        n = len(state.reruns_waiting)
        line2 += [("·", "muted"), (f"{n} rerun{'s' if n > 1 else ''} queued, waiting on", "bold"),
                  (" and ".join(waiting), "warning")]
    if state.error:
        line2 += [("·", "muted"), (f"engine error: {state.error}", "error")]
    if state.damage:
        line2 += [("·", "muted"), (damage_text(state), "error")]
    if where:
        line2 += [("·", "muted"), ("axis:", "muted"), (where.axis or "-", "")]
    return [line1, line2, *(place_lines(state, plan, shown) if places else [])]


def look_segs(state: RunState) -> list[Seg]:
    """Boots added until decided: the last look at the evidence and what came of it (its ``why``:
    what was booted again, or why it was the last)."""
    if not state.looks:
        return []
    last = state.looks[-1]
    n = last.get("look", len(state.looks))
    return [("·", "muted"), (f"look {n}{' (the last)' if last.get('final') else ''}:", "bold"),
            (str(last.get("why") or ""), "")]


def link_segs(state: RunState, link: tuple[bool, str] | None, gone: bool = False,
              reading: int | None = None) -> list[Seg]:
    """The engine link. No engine answering is said as what it is: a run over (its engine exited),
    the journal still being read (its end may say the run is over: a finished run's header never
    says disconnected), the engine's process gone before the run's end, or an engine that runs
    and does not answer (retried)."""
    if link is None:
        return [("engine ?", "muted")]
    connected, _detail = link
    if connected:
        return [("● engine connected", "success")]
    if state.status in OVER_RUNS:
        return [("○ engine exited", "muted")]
    if reading is not None:
        return [(f"○ reading the journal: {reading:,} events so far", "muted")]
    if gone:
        return [("○ engine gone: it stopped before the run's end", "error")]
    return [("○ engine DISCONNECTED (retrying)", "error")]
