"""The reps table's figure columns: their names and formats from engine.record.figures."""

from __future__ import annotations

from engine.record.figures import FIGURES
from engine.record.state import RowState
from tui.core.fmt import fmt_ci
from tui.core.reps import FIGURE_COLUMNS, REP_COLUMNS, row_cells
from tui.core.rules import LeakRule


def test_the_console_names_its_columns_and_formats_its_cells_by_the_declaration() -> None:
    assert all(FIGURES[n].column in REP_COLUMNS for n in FIGURE_COLUMNS)
    r = RowState("s1", "control", "prose", 4)
    r.row = {"per_user_tok_s": 1234.5, "accept_rate": 0.25, "goodput_rps": 1.5, "ttft_ms": None}
    cells = row_cells(r, None)
    assert cells[FIGURES["per_user_tok_s"].column][0][0] == "1234"  # compact: no places from 1000
    assert cells[FIGURES["accept_rate"].column][0][0] == "25.0%"
    assert cells[FIGURES["goodput_rps"].column][0][0] == "1.50"
    assert cells[FIGURES["ttft_ms"].column][0][0] == "-"


def done_row(reps: list[float], concurrency: int = 8, **row: object) -> RowState:
    """A finished row of one attempt whose reps landed as ``reps``, each suspected as it landed
    where the running rule said so (as the engine journals leak_suspected)."""
    r = RowState("s1", "ngram", "prose", concurrency, attempt=1, status=str(row.get("status", "ok")))
    r.reps = {1: {i + 1: v for i, v in enumerate(reps)}}
    r.row = {"attempts": 1, "reps": len(reps), "rep_tok_s": reps, "agg_tok_s": sorted(reps)[len(reps) // 2],
             "spread": (max(reps) - min(reps)) / (sum(reps) / len(reps)), **row}
    return r


def test_a_rep_suspected_as_it_landed_loses_its_mark_when_the_row_is_not_leak_shaped() -> None:
    """37.3 landed first, below the 40.1 before it; the final median is 37.3 and the row is noise:
    "37.3!" beside a median of 37.3 said a leak where the final reading sees none."""
    r = done_row([40.1, 37.3, 36.2], status="noisy", spread_shape="noise", spread_why="noise: ...")
    r.suspects = {(1, 2)}
    assert [t for t, _ in row_cells(r, 3)["reps tok/s"]] == ["40.1", "37.3", "36.2"]
    leak = done_row([135.0, 700.0, 700.0], status="void", spread_shape="leak")
    leak.suspects = {(1, 1)}
    assert [t for t, _ in row_cells(leak, 3)["reps tok/s"]] == ["135.0!", "700.0", "700.0"]
    live = done_row([135.0, 700.0], status="measuring")
    live.row, live.suspects = {}, {(1, 1)}  # still measuring: marked as it landed
    assert [t for t, _ in row_cells(live, 3)["reps tok/s"]][:2] == ["135.0!", "700.0"]


def test_one_rep_has_no_spread_and_a_leak_shaped_row_below_the_rule_says_why_it_is_noisy() -> None:
    one = done_row([28.0])
    assert row_cells(one, 1)[FIGURES["spread"].column][0][0] == "-"
    c1 = done_row([20.0, 40.0, 41.0], concurrency=1, status="noisy", spread_shape="leak",
                  spread_why="leak-shaped: rep 1 at 20.0 tok/s is 51% below ...")
    why = row_cells(c1, 3, LeakRule(0.1, 8))["why"][0][0]
    assert why.startswith("below leak.min_concurrency (8) a leak-shaped row is noisy, not void: "
                          "leak-shaped: rep 1")


def test_an_interval_end_is_a_figure_never_a_bare_sign() -> None:
    """An interval printed "[-0,+28]": an end under half a percent keeps a decimal, one that
    rounds to nothing either way is 0, and past +999 % the column keeps its width."""
    assert fmt_ci(-0.003, 0.28) == "[-0.3,+28]"
    assert fmt_ci(-0.0001, 0.28) == "[0,+28]"
    assert fmt_ci(-0.991, 129.2) == "[-99,>+999]"
    assert fmt_ci(0.05, 0.124) == "[+5,+12]"


def test_the_per_position_acceptance_is_a_block_a_position() -> None:
    """The reps table's compact curve (engine.method.acceptance): a block per draft position, its
    height the share of verify steps that accepted it; "-" where the server gives none."""
    r = done_row([40.0, 41.0, 40.5], accept_len=2.5, accept_rate=0.5, accept_per_pos="1.00 0.50 0.00")
    assert row_cells(r, 3)["acc pos"] == [("█▅▁", "")]
    assert row_cells(done_row([40.0]), 3)["acc pos"] == [("-", "")]


def test_a_rows_detail_shows_acceptance_beside_the_controls() -> None:
    from engine.record.state import RunState, WindowState
    from tui.core.detail import acceptance_lines

    state = RunState()
    for w in ("control", "ngram"):
        state.windows[f"s1-{w}"] = WindowState("s1", w)
        state.order.append(f"s1-{w}")
    window = done_row([40.0, 41.0], accept_len=2.5, accept_len_lo=2.2, accept_len_hi=2.8, accept_rate=0.5,
                      accept_per_pos="0.80 0.50 0.20", accept_source="metrics",
                      rep_accept_len=[2.4, 2.6], rep_accept_rate=[0.47, 0.53])
    control = RowState("s1", "control", "prose", 8)
    control.row = {"accept_len": 2.0, "accept_rate": 0.3, "accept_per_pos": "0.60 0.30 0.10"}
    state.rows[window.key], state.rows[control.key] = window, control
    text = ["".join(t for t, _ in line) for line in acceptance_lines(state, window)]
    assert text[0] == "acceptancelength 2.50 [2.20, 2.80]rate0.500from" + "metrics"
    assert text[1:] == ["  per draft position0.80 0.50 0.20 ▇▅▂", "  s1-control0.60 0.30 0.10 ▅▃▂",
                        "  each rep2.40/0.470 2.60/0.530"]
    assert acceptance_lines(state, control)[1][1][0] == "0.60 0.30 0.10 ▅▃▂"
