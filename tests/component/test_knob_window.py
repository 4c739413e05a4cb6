"""A window whose change is a request knob (change.knobs, and a sweep of one) against a FAKE server
(tests/component/fakes.py): its passes send the knob over the workload's, its control's do not, and a
knob set to null is left out. The real server's side: tests/integration/test_quality.py's knob
check, which reads the same Campaign.knobs_for."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.run.measure import Measurement
from tests.campaigns import campaign
from tests.component.fakes import FakeRuntime
from tests.component.helpers import runner

pytestmark = pytest.mark.timeout(60)


def test_a_knob_sweep_sends_each_windows_value_and_the_control_the_workloads(tmp: Path,
                                                                            fake: FakeRuntime) -> None:
    spec = campaign("knobs", {}, {"s1": ["effort"]}, knobs={"reasoning_effort": "high", "top_k": 5},
                    reps=1)
    spec["windows"] = [{"name": "effort", "sweep": {"knobs": {"reasoning_effort": ["low", None]}}}]
    r = runner(tmp, spec, fake, phases=[Measurement()])
    assert r.run() == "finished"
    by_window: dict[str, set[tuple[object, object]]] = {}
    for s in fake.servers:
        window = s.plan.name.removeprefix("ruler-knobs-s1-").rsplit("-", 1)[0]  # -<run id>
        by_window[window] = {(b.get("reasoning_effort"), b.get("top_k")) for b in s.chats}
    assert by_window == {"control": {("high", 5)}, "effort-low": {("low", 5)}, "effort-none": {(None, 5)}}
