"""``ruler plan``: the sessions and GPU minutes a campaign needs, from a pilot's noise between boots
(the H200 A/A run recorded in docs/runs/h200-aa/exact), or said missing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine.campaign.load import load_campaign
from engine.commands.plan import cmd_plan
from engine.errors import BadInput
from engine.method.design import sessions_needed
from engine.record.judgement import judgement
from engine.record.snapshot import fold_journal
from tests.paths import REPO as ROOT

PILOT = ROOT / "docs" / "runs" / "h200-aa" / "exact"
CAMPAIGN = ROOT / "campaigns" / "h200-aa-exact.yaml"


def test_the_plan_from_a_pilot_is_its_noise_through_the_designs_arithmetic(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_plan(str(CAMPAIGN), [str(PILOT)], as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    c = load_campaign(CAMPAIGN)
    noise = judgement(fold_journal(PILOT / "journal.jsonl"), c.verdict.rule()).noise
    assert out["from"] == ["exact"] and out["controls_a_session"] == 2
    by = {(r["class"], r["load"]): r for r in out["shapes"]}
    for (cls, conc, _), n in noise.items():
        row = by[(cls, f"C{conc}")]
        u = n.between + n.within / c.workload.reps
        assert row["boot_sd"] == pytest.approx(math.expm1(math.sqrt(u)), abs=1e-4)
        assert row["effect_sessions"] == sessions_needed(u, out["windows"], 2, out["level"],
                                                         c.verdict.detect, c.verdict.power)
    # The quiet shape wants fewer sessions than the loud one.
    assert by[("prose", "C1")]["effect_sessions"] < by[("prose", "C64")]["effect_sessions"]
    assert out["session_minutes"] > 0


def test_the_text_says_what_each_shape_wants(capsys: pytest.CaptureFixture[str]) -> None:
    cmd_plan(str(CAMPAIGN), [str(PILOT)], as_json=False)
    text = capsys.readouterr().out
    assert "noise between boots measured in exact" in text and "To call every shape's ±5%:" in text


def test_without_a_pilot_nothing_is_measured_and_it_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    cmd_plan(str(ROOT / "campaigns" / "demo-smollm2.yaml"), [], as_json=False)
    text = capsys.readouterr().out
    assert "no pilot" in text and "no noise measured at this shape" in text


def test_a_pilot_that_is_not_a_run_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not a ruler run directory"):
        cmd_plan(str(CAMPAIGN), [str(tmp_path)], as_json=True)
