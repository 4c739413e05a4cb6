"""Under ``runtime: attach`` ruler starts no server, so no window's change reaches it: validate and
the run warn at the change's file:line:col, and the report marks each such window's change as not
applied and its delta as a repeat's, not an effect of the change.

Why marked, not refused: an attached campaign's windows are the same server measured again (an
A/A repeat that shows the run's noise), a use the campaigns in tests/integration rely on; what
was wrong is calling the repeat the change's effect.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.commands.cli import main
from engine.report import load_run, render
from tests.paths import FIXTURES

RUN = FIXTURES / "runs" / "compare-a"  # a recorded process run

ATTACH = """\
name: attached
server: llamacpp
runtime: attach
attach: {url: "http://127.0.0.1:1"}
control: {args: {}}
windows:
  - name: again
    axis: env UNUSED
    change:
      env: {UNUSED: "1"}
sessions:
  s1: [again]
workload:
  classes:
    prose: {prompts: ["Say hi."]}
  concurrency: [1]
"""


def test_validate_warns_at_the_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "attached.yaml"
    spec.write_text(ATTACH)
    assert main(["validate", str(spec)]) == 0
    out = capsys.readouterr()
    assert (f"{spec}:9:5: warning: window 'again': runtime attach cannot apply its change "
            "(env UNUSED)") in out.out + out.err
    spec.write_text(ATTACH.replace("runtime: attach", "runtime: process\nprocess: {command: [x]}"))
    assert main(["validate", str(spec)]) == 0
    out = capsys.readouterr()
    assert "cannot apply" not in out.out + out.err


def test_the_report_marks_the_change_not_applied(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    journal = run / "journal.jsonl"
    text = journal.read_text()
    assert '"runtime":"process"' in text
    before = render(load_run(run), [], "no charts in this test")
    assert "not applied" not in before
    journal.write_text(text.replace('"runtime":"process"', '"runtime":"attach"'))
    after = render(load_run(run), [], "no charts in this test")
    assert "change: `-c 2048` (control `-c 1024`) **not applied**" in after
    assert "Runtime attach: ruler did not start the server, so this change was not applied" in after
    assert "Δ tok/s [95 % CI], call (change not applied)" in after
