"""engine.record.trade: each value of a sweep against the control, per class and load, by the
campaign's verdict (judged), and the answer in words: wins everywhere, a trade, no decision."""

from __future__ import annotations

from engine.method.verdict import Rule
from engine.record.state import RowState, RunState, WindowState
from engine.record.trade import Answer, Outcome, cell_of, trades
from engine.words import CONTROL, RowStatus, row_key

# The campaign's verdict: Holm at 0.05 over the run's window rows, TOST within ±5 %; one control
# boot a session, so the noise between boots is the declared 2 %.
FLOOR = Rule(0.05, "holm", 0.05, 0.02)
# Three reps a side; a value's rows are the control's scaled, so each delta is what it says.
BASE = {"prose": [100.0, 101.0, 99.0], "code": [200.0, 203.0, 198.0]}


def state_of(deltas: dict[str, dict[str, float | None]]) -> RunState:
    """A run of one session: the control and a sweep of ``block`` over the windows given, each
    with its delta per class at C1 (None: its row is void)."""
    st = RunState()
    st.sweeps = {"block": {"axis": "args --spec-draft-n-max", "control": 7,
                           "windows": {w: int(w.split("-")[1]) for w in deltas}}}
    controls: dict[str, float | None] = dict.fromkeys(BASE, 0.0)
    for window, per in [(CONTROL, controls), *deltas.items()]:
        st.windows[f"s1-{window}"] = WindowState("s1", window)
        for cls, d in per.items():
            row = RowState("s1", window, cls, 1)
            if d is None:
                row.status = RowStatus.VOID
            else:
                row.status = RowStatus.OK
                row.row = {"rep_tok_s": [x * (1 + d) for x in BASE[cls]], "status": "ok"}
            st.rows[row_key("s1", window, cls, 1)] = row
    return st


def test_judged_calls_an_effect_better_or_worse_and_shown_none_equivalent() -> None:
    st = state_of({"block-5": {"prose": 0.005, "code": -0.12}})
    assert cell_of(st, Rule(0.05, "holm", 0.05, 0.002),
                  "s1", "block-5", "prose", 1).outcome == Outcome.EQUIVALENT  # +0.5 %, inside ±5 %
    assert cell_of(st, Rule(0.05, "holm", 0.05, 0.002), "s1", "block-5", "code", 1).outcome == Outcome.WORSE


def test_judged_calls_a_delta_past_the_noise_and_leaves_the_rest_undetermined() -> None:
    st = state_of({"block-5": {"prose": 0.12, "code": -0.02}, "block-6": {"prose": None, "code": -0.2}})
    up = cell_of(st, FLOOR, "s1", "block-5", "prose", 1)
    assert up.outcome == Outcome.BETTER and up.delta is not None and abs(up.delta - 0.12) < 1e-9
    assert up.lo is not None and up.hi is not None and up.lo < 0.12 < up.hi
    assert cell_of(st, FLOOR, "s1", "block-5", "code", 1).outcome == Outcome.UNDETERMINED
    assert cell_of(st, FLOOR, "s1", "block-6", "code", 1).outcome == Outcome.WORSE
    void = cell_of(st, FLOOR, "s1", "block-6", "prose", 1)
    assert (void.outcome, void.delta, void.why) == (Outcome.NO_FIGURE, None, "the window's row is void")


def test_one_value_better_at_every_class_wins_everywhere() -> None:
    [t] = trades(state_of({"block-5": {"prose": 0.02, "code": 0.01},
                           "block-8": {"prose": 0.15, "code": 0.10}}), FLOOR)
    assert t.answer == Answer.WINS
    assert t.words.startswith("args --spec-draft-n-max 8 wins everywhere: better than the "
                              "control's 7 at every class and load (+10.0 % to +15.0 %)")


def test_the_seeds_block_size_is_a_trade() -> None:
    # Prose likes short blocks, code likes long: no block wins everywhere.
    [t] = trades(state_of({"block-5": {"prose": 0.10, "code": -0.12},
                           "block-6": {"prose": 0.09, "code": -0.03}}), FLOOR)
    assert t.answer == Answer.TRADE
    assert "prose C1 is best at 5 (+10.0 %" in t.words
    assert "code C1 at the control's 7 (no value better; 5 -12.0 %)" in t.words
    assert [s for s in t.shapes] == [("prose", 1, None), ("code", 1, None)]
    assert t.cells[("block-6", ("prose", 1, None))].outcome == Outcome.BETTER


def test_no_value_separates_from_the_control_is_no_decision() -> None:
    [t] = trades(state_of({"block-5": {"prose": 0.02, "code": -0.01},
                           "block-6": {"prose": -0.03, "code": 0.01}}), FLOOR)
    assert t.answer == Answer.NONE
    assert t.words == ("args --spec-draft-n-max: no value separates from the control's 7 at any "
                       "class and load (the noise cannot tell them apart)")


def test_values_that_only_lose_leave_the_control() -> None:
    [t] = trades(state_of({"block-5": {"prose": -0.2, "code": 0.0}}), FLOOR)
    assert t.answer == Answer.CONTROL
    assert "5 -20.0 % at prose C1" in t.words


def test_a_sweep_with_no_row_yet() -> None:
    st = state_of({})
    st.sweeps["block"]["windows"] = {"block-5": 5}
    st.windows["s1-block-5"] = WindowState("s1", "block-5")
    [t] = trades(st, FLOOR)
    assert t.answer == Answer.NOT_YET
