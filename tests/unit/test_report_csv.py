"""The report reads throughput.csv by the column names receipts.CSV_COLUMNS writes, not by position."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from engine.record import receipts
from engine.record.state import RunState
from engine.report.run import Row, read_rows

ROW = {"session": "s1", "window": "w", "axis": "one flag", "class": "prose", "concurrency": 8,
       "reps": 3, "agg_tok_s": 101.5, "per_user_tok_s": 12.7, "ttft_ms": 40.25, "decode_tok_s": 14.0,
       "accept_len": 2.5, "accept_rate": 0.61, "accept_source": "metrics", "spread": 0.031,
       "status": "ok", "attempts": 1, "reason": "", "source": "", "ruler_check": "acts",
       "rep_tok_s": [101.5, 100.0, 103.2]}


def test_every_row_field_is_a_throughput_column_and_reads_back(tmp_path: Path) -> None:
    receipts.write_throughput(tmp_path, [ROW])
    [row] = read_rows(tmp_path, RunState())
    assert row == Row(cls="prose", rep_tok_s=[], **{k: v for k, v in ROW.items()
                                                   if k not in ("class", "ruler_check", "rep_tok_s")})


def test_the_row_is_the_throughput_schema() -> None:
    """Row holds every column receipts.CSV_COLUMNS writes but the window's ruler_check, and no other."""
    fields = {"class" if f.name == "cls" else f.name for f in dataclasses.fields(Row)} - {"rep_tok_s"}
    assert fields == set(receipts.CSV_COLUMNS) - {"ruler_check"}
