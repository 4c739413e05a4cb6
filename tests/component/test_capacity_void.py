"""Issue 49: a capacity search against a FAKE server that answers every request with an error
(injected: HTTP 500): every probe is void, and the search says it found no answer, in the journal,
the headless line and the report, never "bracketed" below the range."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.commands.progress import format_event
from engine.method.capacity import Found
from engine.report.render import render
from engine.report.run import load_run
from tests.campaigns import campaign
from tests.component.fakes import Behaviour, FakeRuntime
from tests.component.helpers import events, runner

pytestmark = pytest.mark.timeout(120)


def test_a_server_failing_every_request_has_no_capacity_found(tmp: Path) -> None:
    spec = campaign("cap", {}, {"s1": []}, reps=1, requests_per_rep=2, concurrency=[1])
    spec["workload"]["capacity"] = {"over": "concurrency", "range": [1, 8], "holds": {"ttft_p99_ms": 400}}
    spec["leak"] = {"max_reruns": 0}
    fake = FakeRuntime(lambda _: Behaviour(stream_status=500))
    try:
        r = runner(tmp, spec, fake)
        r.run()
    finally:
        fake.close()
    [answer] = events(r.run_dir, "capacity")
    assert answer["found"] == Found.NONE and answer["lo"] is None and answer["hi"] is None
    assert [p["probe"] for p in answer["probes"]] == ["void", "void"]  # both ends, no more
    line = format_event(answer) or ""
    assert "no answer" in line and "bracketed" not in line and "below the range" not in line, line
    report = render(load_run(r.run_dir), [], "")
    assert "| no answer |" in report
