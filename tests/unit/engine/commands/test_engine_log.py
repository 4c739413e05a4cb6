"""The detached engine's output is its run's engine.log: it passes the run's filter as every other
file under the run directory does (engine.commands.launch.Guarded)."""

from __future__ import annotations

import io
from pathlib import Path

from engine.campaign.redact import Redactor
from engine.commands.launch import Guarded
from engine.record import results

TOKEN = "hf_rulerFakeToken0123456789abcdef"


def test_the_engine_log_passes_the_runs_filter(tmp_path: Path) -> None:
    log = io.StringIO()
    out = Guarded(log, tmp_path)
    out.write("before the run has a filter\n")  # nothing of a server's yet
    results.guard(tmp_path, Redactor({"HF_TOKEN": TOKEN}))
    said = f"EngineError: the server said {TOKEN}\n"
    assert out.write(said) == len(said)  # what the caller wrote, as a stream answers
    out.flush()  # the rest of the stream's interface is the stream's
    assert log.getvalue() == ("before the run has a filter\n"
                              "EngineError: the server said <redacted:HF_TOKEN>\n")
