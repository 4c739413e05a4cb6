"""The control booted again at a session's end (control_position: both) on the FAKE server: it is one
of the control's boots, measured and checked for its outputs like any boot, but not a question
asked of the campaign, so it gets no "no observable effect" verdict of its own."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from engine.quality import Quality
from engine.record import results
from engine.run.measure import Measurement
from engine.words import CONTROL_AGAIN
from tests.campaigns import CTX, campaign
from tests.component.fakes import FakeRuntime
from tests.component.helpers import runner

pytestmark = pytest.mark.timeout(60)


def test_the_control_again_is_checked_for_its_outputs_but_not_judged_as_a_window(
        tmp: Path, fake: FakeRuntime) -> None:
    spec = campaign("again", CTX, {"s1": ["ctx"]}, control_position="both",
                    quality={"greedy": {"n": 2, "max_tokens": 8}, "teacher_forced": {"positions": 2}})
    r = runner(tmp, spec, fake, phases=[Measurement(), Quality()])
    assert r.run() == "finished"
    verdicts = {v["window"]: v for v in csv.DictReader((r.run_dir / "verdicts.csv").open())}
    # Its greedy replies are the control's, as every boot's should be ...
    assert verdicts[CONTROL_AGAIN]["greedy"] == "2/2"
    # ... and the window beside it is judged, the control again is not.
    assert verdicts["ctx"]["no_effect"] != ""
    assert verdicts[CONTROL_AGAIN]["no_effect"] == ""
    assert not (results.window_dir(r.run_dir, "s1", CONTROL_AGAIN) / "no-effect.json").exists()
    events = [json.loads(line) for line in (r.run_dir / "journal.jsonl").read_text().splitlines()]
    judged = {e["window"] for e in events if e["kind"] == "verdict" and e.get("check") == "no_effect"}
    assert judged == {"ctx"}
