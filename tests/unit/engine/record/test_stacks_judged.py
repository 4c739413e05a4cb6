"""A window on another stack's row against its control (engine.record.judgement): its delta only where
the parity event said both stacks were sent the same token ids, else withheld saying why, unless
the campaign allows it (verdict.allow_different); and its progress line."""

from __future__ import annotations

from typing import Any

from engine.commands.progress import format_event
from engine.method.verdict import Rule
from engine.record.fold import apply
from engine.record.judgement import judgement, row_columns
from engine.record.state import RunState

RULE = Rule(0.05, "holm", 0.05, 0.02)
PARITY = {"kind": "parity", "session": "s1", "window": "vllm", "reference": "llamacpp",
          "stack": "vllm", "file": "windows/s1-vllm/parity.json"}


def state(parity: dict[str, Any] | None) -> RunState:
    st = RunState()
    seq = iter(range(1, 100))

    def add(**e: Any) -> None:
        apply(st, {"seq": next(seq), "ts": 1.0, **e})

    add(kind="window_started", session="s1", window="control", axis="control", runtime="process",
        plan={}, tag="", log="")
    add(kind="window_started", session="s1", window="vllm", axis="vLLM", runtime="process", plan={},
        tag="", log="", stack="vllm")
    if parity is not None:
        add(**PARITY, classes=parity)
    for window, reps in (("control", [10.0, 10.2, 9.9]), ("vllm", [12.0, 12.1, 11.8])):
        add(kind="row_done", session="s1", window=window, **{"class": "prose"}, concurrency=1,
            axis=window, attempts=1, reason="", source="", status="ok", reps=3, rep_tok_s=reps,
            agg_tok_s=reps[0], per_user_tok_s=reps[0])
    return st


def columns(st: RunState, rule: Rule = RULE) -> dict[str, Any]:
    return row_columns(judgement(st, rule), st.rows["s1-vllm/prose/c1"])


def test_token_identical_stacks_have_their_delta() -> None:
    cols = columns(state({"prose": {"verdict": "token-identical", "identical": True}}))
    assert cols["delta"] is not None and cols["delta"] > 0


def test_a_difference_withholds_the_delta_and_says_why() -> None:
    cols = columns(state({"prose": {"verdict": "differs on 1 of 4 prompts", "identical": False}}))
    assert "delta" not in cols
    assert cols["verdict_why"] == ("delta withheld: vllm against the control's stack on class prose: "
                                   "differs on 1 of 4 prompts, so the two stacks were not sent the "
                                   "same tokens (verdict.allow_different gives it)")


def test_no_parity_shown_withholds_the_delta_too() -> None:
    cols = columns(state(None))
    assert "delta" not in cols
    assert cols["verdict_why"].startswith("delta withheld: no parity shown between vllm and the "
                                          "control's stack on class prose")


def test_allow_different_gives_the_delta_and_names_the_difference() -> None:
    rule = Rule(0.05, "holm", 0.05, 0.02, allow_different=True)
    cols = columns(state({"prose": {"verdict": "differs on 1 of 4 prompts", "identical": False}}), rule)
    assert cols["delta"] is not None
    assert cols["verdict_why"].startswith("given across stacks not sent the same tokens "
                                          "(verdict.allow_different: vllm against the control's "
                                          "stack on class prose: differs on 1 of 4 prompts); ")


def test_the_parity_line_says_which_deltas_are_withheld() -> None:
    line = format_event({"seq": 1, "ts": 1.0, **PARITY, "classes": {
        "prose": {"verdict": "token-identical", "identical": True},
        "code": {"verdict": "differs on 1 of 4 prompts", "identical": False}}})
    assert line == ("s1/vllm parity vllm vs control's llamacpp: prose token-identical, code differs "
                    "on 1 of 4 prompts (deltas of code withheld unless allowed)")
