"""The reps table's figure columns: their names and formats from engine.record.figures."""

from __future__ import annotations

from engine.record.figures import FIGURES
from engine.record.state import RowState
from tui.core.reps import FIGURE_COLUMNS, REP_COLUMNS, row_cells


def test_the_console_names_its_columns_and_formats_its_cells_by_the_declaration() -> None:
    assert all(FIGURES[n].column in REP_COLUMNS for n in FIGURE_COLUMNS)
    r = RowState("s1", "control", "prose", 4)
    r.row = {"per_user_tok_s": 1234.5, "accept_rate": 0.25, "goodput_rps": 1.5, "ttft_ms": None}
    cells = row_cells(r, None)
    assert cells[FIGURES["per_user_tok_s"].column][0][0] == "1234"  # compact: no places from 1000
    assert cells[FIGURES["accept_rate"].column][0][0] == "25.0%"
    assert cells[FIGURES["goodput_rps"].column][0][0] == "1.50"
    assert cells[FIGURES["ttft_ms"].column][0][0] == "-"
