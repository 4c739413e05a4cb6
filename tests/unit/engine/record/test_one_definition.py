"""One definition per figure on every surface: the reps a row lists are the reps its median is
over (its basis, steady window or whole reps), and its per user is that tok/s over its users."""

from __future__ import annotations

import statistics
from typing import Any

from engine.record.fold import fold

SHAPE = {"session": "s1", "window": "control", "class": "prose", "concurrency": 1}


def journal(basis: str) -> list[dict[str, Any]]:
    """A row of three reps whose steady windows read 21.4, 19.9 and 18.3 tok/s over whole reps of
    17.5, 18.1 and 16.9 (the walk's row), finished over ``basis``."""
    events: list[dict[str, Any]] = [
        {"kind": "run_started", "format": 2, "campaign": "c", "run": "r", "runtime": "process",
         "server": "llamacpp", "pid": 1, "sessions": {"s1": ["control"]}, "axes": {}},
        {"kind": "shape_started", **SHAPE, "attempt": 1, "rerun": False}]
    steady, whole = [21.4, 19.9, 18.3], [17.5, 18.1, 16.9]
    for rep, (st, wh) in enumerate(zip(steady, whole, strict=True), 1):
        events.append({"kind": "rep_done", **SHAPE, "attempt": 1, "rep": rep, "requests": 3,
                       "failed": 0, "tokens": 100, "wall_s": 5.0, "agg_tok_s": wh,
                       "per_user_tok_s": wh, "ttft_ms": 10.0, "decode_tok_s": 20.0,
                       "accept_len": None, "accept_rate": None, "client_bound": False,
                       "lag_p99_ms": 1.0, "file": f"r{rep}.jsonl", "steady_tok_s": st})
    reps = steady if basis == "steady" else whole
    events.append({"kind": "row_done", **SHAPE, "axis": "control", "status": "ok", "attempts": 1,
                   "reason": "", "source": "", "reps": 3, "rep_tok_s": reps, "basis": basis,
                   "agg_tok_s": statistics.median(reps), "whole_tok_s": statistics.median(whole),
                   "per_user_tok_s": statistics.median(reps)})
    return [{"seq": i, "ts": 1.0 + i, **e} for i, e in enumerate(events, 1)]


def test_the_reps_a_finished_row_lists_are_those_its_median_is_over() -> None:
    for basis in ("steady", "whole"):
        row = fold(journal(basis)).rows["s1-control/prose/c1"]
        listed = [row.reps[row.attempt][n] for n in sorted(row.reps[row.attempt])]
        assert listed == row.row["rep_tok_s"], basis
        assert min(listed) <= row.row["agg_tok_s"] <= max(listed), basis
        assert row.row["agg_tok_s"] == statistics.median(listed)
