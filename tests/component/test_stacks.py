"""A window on another stack against a FAKE pair of servers (tests/component/fakes.py): both boot
through the window's own server spec, their renderings of every prompt are compared before the
window measures (engine.quality.stacks), and the row carries the verdict: the delta when the
stacks are token-identical, withheld (saying why) when a FAKE planted template difference makes
them differ, given all the same under verdict.allow_different. The real pair (llama.cpp and vLLM):
tests/integration/test_vllm_live.py's process campaign."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.quality.stacks import StackParity
from engine.run.measure import Measurement
from engine.runtime.base import LaunchPlan
from tests.campaigns import campaign
from tests.component.fakes import Behaviour, FakeRuntime
from tests.component.helpers import events, rows, runner

pytestmark = pytest.mark.timeout(60)

OTHER = "llama-server-other-build"  # the window's own command: another build of the server


def stacks_campaign(**verdict: Any) -> dict[str, Any]:
    spec = campaign("stacks", {}, {"s1": ["other"]}, reps=2, control_position="both")
    spec["windows"] = [{"name": "other", "axis": "another build",
                        "server": {"adapter": "llamacpp", "command": [OTHER],
                                   "args": {"-c": 2048, "-np": 2, "--metrics": True}}}]
    spec["verdict"] = verdict
    return spec


def planted(plan: LaunchPlan) -> Behaviour:
    """The other build's chat template puts a FAKE extra word after each turn's role."""
    return Behaviour(after_role=":" if plan.argv[0] == OTHER else "")


def run(tmp: Path, fake: FakeRuntime, **verdict: Any) -> Path:
    r = runner(tmp, stacks_campaign(**verdict), fake, phases=[StackParity(), Measurement()])
    assert r.run() == "finished"
    return tmp / "run"


def test_token_identical_stacks_give_the_row_its_delta(tmp: Path, fake: FakeRuntime) -> None:
    run_dir = run(tmp, fake)
    assert [s.plan.argv[0] for s in fake.servers] == ["llama-server", OTHER, "llama-server"]
    [parity] = events(run_dir, "parity")
    assert parity["window"] == "other" and parity["stack"] == parity["reference"] == "llamacpp"
    assert parity["classes"]["prose"]["verdict"] == "token-identical"
    row = rows(run_dir)["s1-other/prose/c2"]
    assert row["parity"] == "token-identical" and row["delta"] != ""
    assert rows(run_dir)["s1-control/prose/c2"]["parity"] == ""  # the control's own stack
    # The window's stack is journalled as it boots, so the fold knows the row is across stacks.
    assert events(run_dir, "window_started", window="other")[0]["stack"] == "llamacpp"


def test_a_planted_template_difference_withholds_the_delta_and_says_why(
        tmp: Path) -> None:
    fake = FakeRuntime(planted)
    try:
        run_dir = run(tmp, fake)
    finally:
        fake.close()
    [parity] = events(run_dir, "parity")
    assert parity["classes"]["prose"] == {"verdict": "differs on 2 of 2 prompts", "identical": False,
                                          "prompts": 2, "differing": 2, "failed": 0}
    row = rows(run_dir)["s1-other/prose/c2"]
    assert row["parity"] == "differs on 2 of 2 prompts"
    assert row["delta"] == "" and row["verdict"] == ""
    assert row["verdict_why"] == ("delta withheld: llamacpp against the control's stack on class "
                                  "prose: differs on 2 of 2 prompts, so the two stacks were not "
                                  "sent the same tokens (verdict.allow_different gives it)")
    receipt = json.loads((run_dir / "windows" / "s1-other" / "parity.json").read_text())
    [prompt] = receipt["classes"][0]["per_prompt"][:1]
    assert prompt["divergence"]["position"] == 1  # the role's token: 'user' vs 'user:'
    assert receipt["requests"]["sampling"] == {"temperature": 0.0, "seed": None}


def test_allow_different_gives_the_delta_across_a_difference_and_says_so(tmp: Path) -> None:
    fake = FakeRuntime(planted)
    try:
        run_dir = run(tmp, fake, allow_different=True)
    finally:
        fake.close()
    row = rows(run_dir)["s1-other/prose/c2"]
    assert row["parity"] == "differs on 2 of 2 prompts" and row["delta"] != ""
    assert row["verdict_why"].startswith("given across stacks not sent the same tokens "
                                         "(verdict.allow_different: llamacpp against the control's "
                                         "stack on class prose: differs on 2 of 2 prompts); ")


def test_with_the_control_last_the_control_compares_when_it_boots(tmp: Path, fake: FakeRuntime) -> None:
    spec = stacks_campaign()
    spec["control_position"] = "last"
    r = runner(tmp, spec, fake, phases=[StackParity(), Measurement()])
    assert r.run() == "finished"
    run_dir = tmp / "run"
    order = [e["window"] for e in events(run_dir, "window_started")]
    assert order == ["other", "control"]
    [parity] = events(run_dir, "parity")
    assert parity["window"] == "other" and parity["classes"]["prose"]["verdict"] == "token-identical"
    # It landed after the window's rows: the row's delta follows it all the same.
    assert rows(run_dir)["s1-other/prose/c2"]["delta"] != ""
