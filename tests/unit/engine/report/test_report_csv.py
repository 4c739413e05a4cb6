"""The report reads throughput.csv by the column names figures.CSV_COLUMNS writes, not by position."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from engine.record import figures, receipts
from engine.record.state import RunState
from engine.report.run import Row, read_rows

ROW: dict[str, Any] = {"session": "s1", "window": "w", "axis": "one flag", "class": "prose", "concurrency": 8,
       "rate": None, "ttft_p50": 40.0, "ttft_p90": 52.5, "ttft_p99": 61.0, "itl_p50": 12.0,
       "itl_p90": 14.5, "itl_p99": 30.25, "tpot_p50": 12.5, "tpot_p90": 13.0, "tpot_p99": 15.0,
       "achieved_rps": 3.2, "goodput_rps": 2.9, "reps": 3, "agg_tok_s": 101.5, "per_user_tok_s": 12.7,
       "ttft_ms": 40.25, "decode_tok_s": 14.0,
       "accept_len": 2.5, "accept_rate": 0.61, "accept_source": "metrics", "j_per_token": 0.412,
       "power_w": 311.5, "sm_mhz_min": 1980.0, "throttled": "False", "spread": 0.031,
       "delta": 0.12, "delta_lo": 0.05, "delta_hi": 0.2, "boot_noise": 0.03,
       "boot_noise_how": "measured: 4 boots of 1 configuration booted more than once", "p_value": 0.004,
       "p_adjusted": 0.012, "verdict": "observable effect",
       "verdict_why": "p 0.004; holm-adjusted 0.012 over 3 < 0.05",
       "cache": "flush", "cache_hit": 0.0,
       "status": "ok", "attempts": 1, "reason": "", "source": "", "ruler_check": "acts",
       "basis": "steady", "whole_tok_s": 95.25, "ramp_s": 0.125, "steady_s": 3.5, "tail_s": 0.25,
       "spread_shape": "", "spread_why": "", "precision": 0.03, "half_width": 0.021,
       "precision_status": "reached", "stage_reps": 3, "accept_len_lo": 2.25, "accept_len_hi": 2.75,
       "accept_rate_lo": 0.5, "accept_rate_hi": 0.75, "accept_per_pos": "0.75 0.5 0.25",
       "rep_tok_s": [101.5, 100.0, 103.2]}


def test_every_row_field_is_a_throughput_column_and_reads_back(tmp_path: Path) -> None:
    receipts.write_throughput(tmp_path, [ROW])
    [row] = read_rows(tmp_path, RunState())
    assert row == Row(cls="prose", rep_tok_s=[], rep_whole_tok_s=[], **{k: v for k, v in ROW.items()
                                                   if k not in ("class", "ruler_check", "rep_tok_s")})


def test_the_row_is_the_throughput_schema() -> None:
    """Row holds every column figures.CSV_COLUMNS writes but the window's ruler_check, and no other."""
    reps = {"rep_tok_s", "rep_whole_tok_s"}
    fields = {"class" if f.name == "cls" else f.name for f in dataclasses.fields(Row)} - reps
    assert fields == set(figures.CSV_COLUMNS) - {"ruler_check"}


def test_a_file_from_before_the_gpu_columns_reads_them_as_empty(tmp_path: Path) -> None:
    receipts.write_throughput(tmp_path, [ROW])
    path = tmp_path / "throughput.csv"
    gpu = ("j_per_token", "power_w", "sm_mhz_min", "throttled")
    header, line = path.read_text().splitlines()
    keep = [i for i, col in enumerate(header.split(",")) if col not in gpu]
    path.write_text("\n".join(",".join(x.split(",")[i] for i in keep) for x in (header, line)) + "\n")
    [row] = read_rows(tmp_path, RunState())
    assert (row.j_per_token, row.power_w, row.sm_mhz_min, row.throttled) == (None, None, None, "")
    assert (row.agg_tok_s, row.status) == (101.5, "ok")


def test_a_run_recorded_before_the_delta_and_cache_columns_reads_them_as_empty(tmp_path: Path) -> None:
    old = [c for c in figures.CSV_COLUMNS
           if c not in ("delta", "delta_lo", "delta_hi", "cache", "cache_hit", "rate", "ttft_p50",
                        "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99", "tpot_p50",
                        "tpot_p90", "tpot_p99", "achieved_rps", "goodput_rps")]
    lines = [",".join(old), ",".join(str(ROW.get(c, "")) for c in old)]
    (tmp_path / "throughput.csv").write_text("\n".join(lines) + "\n")
    [row] = read_rows(tmp_path, RunState())
    assert (row.delta, row.cache, row.cache_hit, row.agg_tok_s) == (None, "", None, 101.5)
    assert (row.rate, row.ttft_p99, row.goodput_rps, row.shape) == (None, None, None, ("prose", 8, None))


def test_a_run_recorded_before_the_steady_window_reads_its_columns_as_empty(tmp_path: Path) -> None:
    """A row from before the steady window and the precision: its tok/s are the whole reps'."""
    new = ("basis", "whole_tok_s", "ramp_s", "steady_s", "tail_s", "spread_shape", "spread_why",
           "precision", "half_width", "precision_status", "stage_reps")
    old = [c for c in figures.CSV_COLUMNS if c not in new]
    lines = [",".join(old), ",".join("" if ROW.get(c) is None else str(ROW[c]) for c in old)]
    (tmp_path / "throughput.csv").write_text("\n".join(lines) + "\n")
    [row] = read_rows(tmp_path, RunState())
    assert (row.basis, row.whole_tok_s, row.steady_s, row.stage_reps) == ("", None, None, 0)
    assert (row.precision_status, row.agg_tok_s, row.status) == ("", 101.5, "ok")
