"""engine.quality's maths, effects, drift, verdicts and reference on known numbers (the checks
against the real testbed server: tests/integration/test_quality.py)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from engine.commands.progress import format_event
from engine.method.boots import declared
from engine.method.verdict import Rule
from engine.quality.drift import _drift_row, control_drift
from engine.quality.effect import fact_diff, no_effect_verdict, rows_called
from engine.quality.maths import (
    abs_stats,
    first_divergence,
    forced_logprob,
    greedy_compare,
    kl_topk,
    spread_positions,
    topk_distribution,
)
from engine.quality.reference import Item, Reference, compare_kl, compare_scores, load_reference
from engine.quality.verdicts import verdict_row, write_verdicts
from engine.record.judgement import judgement
from engine.record.state import RowState, RunState
from engine.servers.client import chat_reply, tool_arguments

# ------------------------------------------------------------------------------ pure maths


def test_first_divergence() -> None:
    assert first_divergence("same", "same") is None
    assert first_divergence("abcd", "abXd") == 2
    assert first_divergence("abc", "abcdef") == 3  # a prefix differs where it ends
    assert first_divergence("", "x") == 0
    assert first_divergence("x", "y") == 0


def test_spread_positions() -> None:
    assert spread_positions(0, 4) == []
    assert spread_positions(3, 4) == [0, 1, 2]
    assert spread_positions(10, 4) == [0, 3, 6, 9]
    assert spread_positions(100, 1) == [0]


def test_abs_stats() -> None:
    st = abs_stats([0.0, -1.0, 2.0, -3.0, 4.0])
    assert st["n"] == 5 and st["p50"] == 2.0 and st["max"] == 4.0
    assert st["p99"] == pytest.approx(3.96)  # linear interpolation between 3 and 4
    assert abs_stats([])["p99"] is None


def test_forced_logprob_floors_outside_top_k() -> None:
    top = [(5, -0.1), (7, -2.5), (9, -4.0)]
    assert forced_logprob(top, 7) == (-2.5, False)
    assert forced_logprob(top, 42) == (-4.0, True)  # the k-th: an upper bound of the truth


def lp(p: float) -> float:
    return math.log(p)


def test_kl_with_tail_bucket_by_hand() -> None:
    oracle = [(1, lp(0.5)), (2, lp(0.3))]  # tail 0.2
    window = [(1, lp(0.4)), (3, lp(0.35))]  # tail 0.25; token 2 is somewhere in it
    # Token 2 gets min(k-th 0.35, tail / (missing + 1) = 0.125); the tail keeps 0.125.
    assert topk_distribution(window, [1, 2]) == pytest.approx([0.4, 0.125, 0.125])
    expected = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.125) + 0.2 * math.log(0.2 / 0.125)
    assert kl_topk(oracle, window) == pytest.approx(expected)


def test_kl_is_zero_for_equal_and_positive_otherwise() -> None:
    a = [(1, lp(0.6)), (2, lp(0.3)), (3, lp(0.05))]
    assert kl_topk(a, a) == 0.0
    b = [(2, lp(0.7)), (1, lp(0.2)), (3, lp(0.05))]
    assert kl_topk(a, b) > 0.1
    assert kl_topk(a, b) != pytest.approx(kl_topk(b, a))  # not symmetric: oracle first


def score(t: int, top: list[tuple[int, float]]) -> dict[str, Any]:
    return {"t": t, "top": [[i, v] for i, v in top]}


def test_compare_scores_dlogp_and_floored() -> None:
    item = Item("x", [1, 2], [10, 11, 12], [0, 2])
    ref = [[score(0, [(10, -0.1), (99, -3.0)]), score(2, [(12, -0.5), (98, -1.5)])]]
    same = compare_scores([item], ref, ref, k=2)
    assert same["identical"] and same["stats"]["max"] == 0 and same["floored"] == 0
    win = [[score(0, [(10, -0.3), (99, -2.0)]), score(2, [(98, -0.2), (97, -0.9)])]]
    cmp = compare_scores([item], ref, win, k=2)
    assert not cmp["identical"]
    assert [r["abs_dlogp"] for r in cmp["positions"]] == pytest.approx([0.2, 0.4])  # |-0.9 - -0.5|
    assert cmp["floored"] == 1 and cmp["worst"][0]["t"] == 2


def test_compare_kl_per_position() -> None:
    a = [[score(0, [(1, lp(0.9))]), score(1, [(1, lp(0.5)), (2, lp(0.4))])]]
    res = compare_kl(a, a, k=10)
    assert res["n"] == 2 and res["mean"] == 0.0 and res["p99"] == 0.0


def test_greedy_compare() -> None:
    ref = [{"prompt": "p", "prompt_ids": [1], "text": "hello world"},
           {"prompt": "q", "prompt_ids": [2], "text": "abc"}]
    mine = [{"prompt": "p", "prompt_ids": [1], "text": "hello world"},
            {"prompt": "q", "prompt_ids": [2], "text": "abd"}]
    cmp = greedy_compare(ref, mine)
    assert (cmp["identical"], cmp["n"], cmp["first_divergence"]) == (1, 2, 2)
    assert cmp["prompts"][1]["same_prompt_ids"]


def test_fact_diff_ignores_per_boot_facts() -> None:
    control = {"model.path": "/a/q8.gguf", "server.url": "http://127.0.0.1:1", "kv.cells": 1024,
               "timing.eval_ms": 3.0, "spec.draft_model": "/a/d.gguf", "spec.accepted": 4}
    window = {"model.path": "/b/q8.gguf", "server.url": "http://127.0.0.1:2", "kv.cells": 1024,
              "timing.eval_ms": 9.0, "spec.draft_model": "/b/d.gguf", "spec.accepted": 7}
    assert fact_diff(window, control) == {}
    assert fact_diff({**window, "kv.cells": 2048}, control) == {"kv.cells": [2048, 1024]}
    assert fact_diff({**window, "spec.n_max": 5}, control) == {"spec.n_max": [5, None]}
    assert fact_diff({"kv.cells": 1024.0}, {"kv.cells": 1024}) != {}  # a type change is a change


def test_rows_called_by_the_campaigns_judgement() -> None:
    """A window's rows with the run's calls on them: shown within the margin, an effect, or not
    judged (void); the no-effect verdict says which row kept it from "no observable effect"."""
    st = RunState()
    ctl = [100.0, 100.5, 99.5]
    for window, reps, status in (("control", ctl, "ok"), ("same", [100.2, 100.6, 99.8], "ok"),
                                 ("fast", [110.0, 110.4, 109.6], "ok"),
                                 ("void", [100.0, 50.0, 100.0], "void")):
        r = RowState("s1", window, "prose", 1, attempt=1, status=status,
                     row={"rep_tok_s": reps, "agg_tok_s": sorted(reps)[1], "status": status})
        st.rows[r.key] = r
    j = judgement(st, Rule(0.05, "holm", 0.05, 0.005))
    same = rows_called(j, [st.rows["s1-same/prose/c1"]])
    assert same["judged"] and same["inside"] and same["rows"][0]["call"] == "no observable effect"
    fast = rows_called(j, [st.rows["s1-fast/prose/c1"]])
    got = fast["rows"][0]
    assert fast["judged"] and not fast["inside"] and got["call"] == "observable effect"
    assert got["delta"] == pytest.approx(0.10, abs=1e-3) and 0 < got["delta_lo"] < 0.10 < got["delta_hi"]
    assert "noise between boots declared 0.5 %" in got["method"]
    assert not rows_called(j, [st.rows["s1-void/prose/c1"]])["judged"]
    verdict, reasons = no_effect_verdict({}, fast, {"identical": 1, "n": 1})
    assert verdict == "observable effect" and reasons[0].startswith("prose/c1 +10.0% [")
    assert no_effect_verdict({}, same, {"identical": 1, "n": 1}) == ("no observable effect", [])


def write_throughput(run_dir: Path, rows: list[tuple[str, str, str, int, float, float]]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "throughput.csv").open("w") as f:
        w = csv.writer(f)
        w.writerow(["session", "window", "class", "concurrency", "agg_tok_s", "spread", "status"])
        for session, window, cls, c, tok, spread in rows:
            w.writerow([session, window, cls, c, tok, spread, "ok"])


def test_control_drift(tmp_path: Path) -> None:
    """Rows without receipts (no source): the medians, no interval, the floor alone decides."""
    run, base = tmp_path / "run", tmp_path / "base"
    write_throughput(run, [("s1", "control", "prose", 1, 100.0, 0.01),
                           ("s1", "control", "prose", 4, 300.0, 0.01),
                           ("s1", "block5", "prose", 1, 120.0, 0.01),
                           ("s2", "control", "prose", 1, 100.1, 0.01),
                           ("s3", "control", "prose", 1, 95.0, 0.01)])
    write_throughput(base, [("s1", "control", "prose", 1, 90.0, 0.02),
                            ("s2", "control", "prose", 1, 110.0, 0.03)])
    order = ["s1", "s2", "s3"]
    rule = Rule(0.05, "holm", 0.05, 0.02)
    drift = control_drift(run, order, {}, rule, {})
    # No receipts, no reps: the medians' delta, and no interval to call a drift on.
    assert [(d["session"], d["against"], d["delta_pct"], d["delta_lo_pct"], d["verdict"])
            for d in drift] == [("s2", "s1-control", 0.1, None, "within noise"),
                                ("s3", "s2-control", -5.09, None, "within noise")]
    assert drift[0]["boot_noise_how"].startswith("declared 2.0 %")
    with_base = control_drift(run, order, {}, rule, {}, base)[2:]
    assert [d["against"] for d in with_base] == ["baseline base"] * 3
    assert with_base[0]["reference_tok_s"] == 100.0  # the median of the baseline's controls
    assert with_base[0]["delta_pct"] == 0.0


def test_a_drift_is_a_control_that_moved_more_than_its_boots_do() -> None:
    row = {"session": "s2", "class": "prose", "concurrency": "1", "agg_tok_s": "95", "spread": "0.01"}
    reps, ref = [95.0, 95.5, 94.5], [100.0, 100.5, 99.5]
    rule = Rule(0.05, "holm", 0.05, 0.02)
    quiet = _drift_row(row, reps, 100.0, ref, 0.01, "s1-control", rule, declared(0.005))
    loud = _drift_row(row, reps, 100.0, ref, 0.01, "s1-control", rule, declared(0.05))
    assert quiet["verdict"] == "drift" and loud["verdict"] == "within noise"
    assert quiet["delta_pct"] == loud["delta_pct"] == pytest.approx(-5.0, abs=0.01)


def test_verdict_row_and_csv(tmp_path: Path) -> None:
    verdicts: dict[str, dict[str, Any]] = {
        "knobs": {"verdict": "ruler suspect", "summary": "RULER SUSPECT: x"},
        "greedy": {"verdict": "diverged", "figures": {"identical": 19, "n": 20,
                                                      "first_divergence": 4,
                                                      "reference": "s1-control"}},
        "teacher_forced": {"verdict": "differs", "figures": {"p50": 0.01, "p99": 0.4,
                                                             "max": 1.2, "floored": 3}},
        "kl": {"verdict": "above floor", "figures": {"mean": 0.05, "p99": 0.3, "floor": 0.0}},
        "tool_probe": {"verdict": "ok", "summary": "10/10 parseable tool calls",
                       "figures": {"ok": 10, "n": 10}},
    }
    row = verdict_row("s1", "w3", "fused verify", True, verdicts)
    assert row["greedy"] == "19/20" and row["first_divergence"] == 4
    assert row["dlogp_p99"] == 0.4 and row["kl_mean"] == 0.05 and row["tool_calls"] == "10/10"
    write_verdicts(tmp_path, [row])
    back = list(csv.DictReader((tmp_path / "verdicts.csv").open()))
    assert back[0]["knobs"] == "ruler suspect" and back[0]["floored"] == "3"


def test_reference_round_trip(tmp_path: Path) -> None:
    items = [Item("greedy-0", [1, 2], [3, 4], [0, 1], "ab")]
    scores = [[score(0, [(3, -0.1)]), score(1, [(4, -0.2)])]]
    ref = Reference("s1", "control", 10, [{"prompt": "p"}], items, scores, scores, items, scores,
                    None, {"run": "r"}, {"repeat": {"mean": 0.0}})
    path = tmp_path / "reference.json"
    path.write_text(json.dumps(ref.to_json()))
    back = load_reference(path)
    assert back == ref and back.kl_floor() == 0.0


def test_tool_arguments_and_chat_reply() -> None:
    ok = {"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert tool_arguments(ok) == {"city": "Paris"}
    assert tool_arguments({"function": {"name": "f", "arguments": "{not json"}}) is None
    assert tool_arguments({"function": {"arguments": "{}"}}) is None  # no name
    reply = chat_reply({"choices": [{"message": {"content": "x", "reasoning_content": "r"},
                                     "finish_reason": "stop"}],
                        "usage": {"completion_tokens": 5,
                                  "completion_tokens_details": {"reasoning_tokens": 3}}})
    assert (reply.reasoning, reply.reasoning_tokens, reply.completion_tokens) == ("r", 3, 5)


def test_verdicts_read_on_the_progress_line() -> None:
    base = {"seq": 9, "ts": 0.0, "session": "s1", "window": "noop"}
    suspect = {**base, "kind": "verdict", "check": "knobs", "verdict": "ruler suspect",
               "summary": "RULER SUSPECT: chat_template_kwargs inert (identical on 3/3 prompts)"}
    assert format_event(suspect) == ("s1/noop knobs: RULER SUSPECT: chat_template_kwargs inert "
                                     "(identical on 3/3 prompts)")
    greedy = {**base, "kind": "verdict", "check": "greedy", "verdict": "diverged",
              "summary": "3/8 identical, first divergence at character 4"}
    assert format_event(greedy) == "s1/noop greedy: diverged: 3/8 identical, first divergence at character 4"
    assert format_event({**base, "kind": "quality_started"}) == "s1/noop quality checks"


def test_greedy_replies_cut_inside_a_character_compare_by_their_token_ids() -> None:
    """Byte-fallback tokens: a reply cut inside an emoji ends in bytes one server drops and
    another shows as U+FFFD; the token ids decide where both sides have them (one stack)."""
    def reply(text: str, ids: list[int]) -> dict[str, Any]:
        return {"prompt": "p", "prompt_ids": [1], "text": text, "token_ids": ids}

    same_ids = greedy_compare([reply("sea 🌊", [5, 10813, 230])], [reply("sea 🌊\ufffd", [5, 10813, 230])])
    assert (same_ids["identical"], same_ids["first_divergence"]) == (1, None)
    hidden = greedy_compare([reply("sea ", [5, 10813, 230])], [reply("sea ", [5, 10813, 231])])
    assert (hidden["identical"], hidden["first_divergence"]) == (0, 4)
    assert hidden["prompts"][0]["first_token_divergence"] == 2
    across = greedy_compare([reply("sea ", [5, 10813, 230])], [reply("sea ", [5, 10813, 231])],
                            by_ids=False)
    assert across["identical"] == 1  # another stack's tokenizer: the text decides


def test_a_position_the_server_could_not_score_is_left_out_and_counted() -> None:
    item = Item("x", [1], [7, 8], [0, 1])
    ref = [[{"t": 0, "top": [[7, -0.1], [9, -2.0]]}, {"t": 1, "top": [[8, -0.2], [3, -1.0]]}]]
    win = [[{"t": 0, "top": [[7, -0.3], [9, -1.5]]},
            {"t": 1, "top": [], "unscored": "llama-server gave no probabilities at this position"}]]
    cmp = compare_scores([item], ref, win, 2)
    assert (cmp["stats"]["n"], cmp["unscored"]) == (1, 1)
    assert cmp["stats"]["max"] == pytest.approx(0.2)
    assert compare_kl(ref, win, 2)["n"] == 1
