"""Figures per turn index of a multi-turn class (engine.method.stats.turn_figures), from request records."""

from __future__ import annotations

from typing import Any

from engine.method.stats import LeakPolicy, row_figures, turn_figures


def rec(turn: int | None, prompt: int, cached: int | None, ttft: float, error: str | None = None
        ) -> dict[str, Any]:
    return {"turn": turn, "start": 10.0, "first_token": 10.0 + ttft, "end": 10.0 + ttft + 0.4,
            "completion_tokens": 5, "prompt_tokens": prompt, "cached_tokens": cached, "error": error}


def test_per_turn_cache_hits_and_ttft() -> None:
    records = [rec(0, 100, 0, 0.05), rec(0, 100, 0, 0.07), rec(1, 200, 150, 0.02),
               rec(1, 200, 170, 0.04, error="cut"), rec(None, 50, 0, 0.01)]
    t0, t1 = turn_figures(records)
    assert (t0["turn"], t0["requests"], t0["failed"], t0["cache_hit"]) == (0, 2, 0, 0.0)
    assert (t1["requests"], t1["failed"], t1["prompt_tokens"], t1["cached_tokens"]) == (2, 1, 200, 150)
    assert t1["cache_hit"] == 0.75  # the failed request's usage left out
    assert t0["ttft_p50"] == 60.0 and t1["ttft_p50"] == 20.0
    assert t1["tpot_p50"] == 100.0  # 0.4 s over the 4 tokens after the first


def test_a_row_has_turns_only_with_turns() -> None:
    reps = [({"rep": 1}, [rec(0, 100, 0, 0.05), rec(1, 200, 100, 0.02)]),
            ({"rep": 2}, [rec(0, 100, 0, 0.05), rec(1, 200, 120, 0.03)])]
    row = row_figures(reps, 1, LeakPolicy())
    assert [t["cache_hit"] for t in row["turns"]] == [0.0, 0.55]  # the reps' requests pooled
    assert "turns" not in row_figures([({"rep": 1}, [rec(None, 10, 0, 0.01)])], 1, LeakPolicy())


def test_unknown_usage_is_no_hit_and_no_turns_is_empty() -> None:
    (t,) = turn_figures([rec(0, 100, None, 0.05)])
    assert t["cache_hit"] is None and t["prompt_tokens"] is None
    assert turn_figures([rec(None, 10, 1, 0.1)]) == []


def test_the_console_reads_a_rows_turns_in_its_why() -> None:
    from engine.record.state import RowState
    from tui.core.fmt import fmt_turns
    from tui.core.reps import row_cells

    turns = turn_figures([rec(0, 100, 0, 0.06), rec(1, 200, 150, 0.02)])
    assert fmt_turns(turns) == "t0 0% 60ms, t1 75% 20ms"
    r = RowState("s1", "control", "chat", 2, None)
    r.row = {"turns": turns, "reason": "", "status": "ok"}
    assert row_cells(r, 2)["why"][0][0] == "turns t0 0% 60ms, t1 75% 20ms"


def test_the_console_counts_a_trace_s_one_row_and_a_multi_turn_class_s_closed_loop() -> None:
    from tui.core.plan import LoadPlan

    wl = {"classes": {"p": {"prompts": ["a"]}, "t": {"trace": {"file": "t.jsonl"}},
                      "chat": {"conversations": {"file": "c.jsonl"}}},
          "concurrency": [1, 2], "rate": [4.0], "reps": 2}
    assert LoadPlan.of(wl).shapes == 3 + 1 + 2
