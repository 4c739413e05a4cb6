"""Every request failing (an HTTP error, a stream that is not SSE) leaves every row void at 0 tok/s:
the run measured nothing, exit code 4 with the reason, not 0.

The real engine (``ruler engine``'s run_engine: lock, journal, Runner, Measurement) against the
FAKE server of tests/component/fakes.py, which injects the failing answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import EXIT_NOTHING_MEASURED, EXIT_OK
from engine.record.snapshot import fold_journal
from tests.component.fakes import Behaviour
from tests.component.helpers import run_with


@pytest.mark.parametrize("behaviour", [Behaviour(stream_status=500),
                                       Behaviour(malformed_stream=True)],
                         ids=["HTTP 500", "malformed SSE"])
def test_every_request_failing_measures_nothing_and_exits_4(
        tmp: Path, behaviour: Behaviour, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run, code = run_with(tmp, behaviour, monkeypatch)
    assert code == EXIT_NOTHING_MEASURED
    state = fold_journal(run / "journal.jsonl")
    assert state.status == "finished" and state.rows
    assert {r.status for r in state.rows.values()} == {"void"}
    assert not state.measured
    err = capsys.readouterr().err
    assert "ruler run: measured nothing: every row is void or failed, none moved a token (" in err
    assert "failed requests" in err


def test_a_healthy_run_still_exits_0(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_with(tmp, Behaviour(), monkeypatch)[1] == EXIT_OK
