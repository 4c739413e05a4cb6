"""The report's words for the campaign's SLOs: the TPOT SLO is said as TPOT, what it is judged against."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from engine.campaign.spec import Campaign
from engine.report.text import slo_text

FINISHED = Path(__file__).parents[3] / "fixtures" / "journals" / "finished" / "campaign.yaml"


def view_with(slo: dict[str, float] | None) -> SimpleNamespace:
    import yaml

    raw = yaml.safe_load(FINISHED.read_text())
    if slo is not None:
        raw["workload"]["slo"] = slo
    return SimpleNamespace(campaign=Campaign.model_validate(raw))


def test_the_slos_are_said_as_what_they_are_judged_against() -> None:
    assert slo_text(view_with({"ttft_ms": 500, "tpot_ms": 40})) == "TTFT <= 500 ms, TPOT <= 40 ms"  # type: ignore[arg-type]  # a stand-in view: slo_text reads its campaign only
    assert slo_text(view_with({"tpot_ms": 40})) == "TPOT <= 40 ms"  # type: ignore[arg-type]  # as above
    assert slo_text(view_with(None)) == "none set: no goodput"  # type: ignore[arg-type]  # as above
    assert slo_text(SimpleNamespace(campaign=None)) == "none set: no goodput"  # type: ignore[arg-type]  # as above
