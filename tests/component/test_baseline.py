"""``ruler validate --baseline RUN``: a campaign read against an earlier run of it (in-process
fake servers make the earlier run); ``ruler run --baseline`` refuses what is not a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.commands.baseline import read_baseline
from engine.commands.validate import cmd_validate
from tests.campaigns import CTX, campaign
from tests.component.fakes import FakeRuntime
from tests.component.helpers import runner

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def earlier(tmp: Path, fake: FakeRuntime) -> Path:
    spec = campaign("base", CTX, {"s1": ["ctx"]}, requests_per_rep=4)
    r = runner(tmp, spec, fake, run_dir=tmp / "earlier")
    assert r.run() == "finished"
    return tmp / "earlier"


def write(tmp: Path, **workload: object) -> Path:
    spec = campaign("base", CTX, {"s1": ["ctx"]}, **workload)
    path = tmp / "next.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_the_earlier_run_says_how_long_and_how_noisy_each_shape_was(earlier: Path) -> None:
    seen, damage = read_baseline(earlier)
    assert damage is None
    s = seen[("prose", 2, None)]
    assert s.requests == 4 and s.wall_s > 0 and s.steady_s is not None and s.steady_s > 0
    assert len(s.control_logs) == len(s.window_logs) == 1 and len(s.rep_s) == 6
    assert s.sd(control=True) is not None


def test_explain_estimates_the_reps_and_wall_time_of_a_precision(
        earlier: Path, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp, requests_per_rep=4, precision=0.05, max_reps=12)
    assert cmd_validate(str(path), explain=True, baseline=str(earlier)) == 0
    out = capsys.readouterr().out
    assert "# reps to precision +-5.0% (Stein's two-stage rule on 3 first-stage reps, at most 12)" in out
    line = next(x for x in out.splitlines() if x.startswith("prose C2 "))
    assert line.split()[-1].endswith("s")
    assert "measurement wall time, every shape of every session: about" in out


def test_a_rep_too_short_for_a_steady_window_is_warned_of(
        earlier: Path, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp, requests_per_rep=None, rep_seconds=0.001)
    assert cmd_validate(str(path), baseline=str(earlier)) == 0
    err = capsys.readouterr().err
    assert f"{path}: workload: prose C2: a rep lasts about" in err
    assert f"(the control's first rep in {earlier}: 4 requests in" in err
    assert "too short for a steady window at C2" in err


def test_a_baseline_that_is_no_run_is_bad_input(tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp)
    assert cmd_validate(str(path), baseline=str(tmp / "nowhere")) == 2
    assert "no journal.jsonl there (not a ruler run)" in capsys.readouterr().err


def test_a_run_whose_baseline_is_no_run_is_bad_input(tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.commands.cli import main

    code = main(["run", str(write(tmp)), "--headless", "--results-dir", str(tmp / "r"),
                 "--baseline", str(tmp / "nowhere")])
    assert code == 2
    assert "--baseline" in capsys.readouterr().err and not (tmp / "r").exists()


def row_source(run: Path, source: str) -> None:
    """The journal's finished rows name ``source`` as their receipts."""
    journal = run / "journal.jsonl"
    lines = journal.read_text().splitlines()
    out = []
    for line in lines:
        e = json.loads(line)
        if e.get("kind") == "row_done" and e.get("source"):
            e["source"] = source
        out.append(json.dumps(e))
    journal.write_text("\n".join(out) + "\n")
    for snap in run.glob("*snapshot*"):
        snap.unlink()  # the fold reads the journal, not a snapshot of it


@pytest.mark.parametrize("source", ["/etc/passwd", "../outside.jsonl", "reps/../../outside.jsonl"])
def test_a_row_source_outside_the_run_is_refused_unopened(
        earlier: Path, tmp: Path, source: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp / "outside.jsonl").write_text('{"kind": "rep"}\n')
    row_source(earlier, source)
    assert cmd_validate(str(write(tmp, requests_per_rep=4)), baseline=str(earlier)) == 2
    assert f"ruler validate: --baseline {earlier}: a row's source {source!r} is outside the run" in \
        capsys.readouterr().err


def test_a_truncated_receipt_is_exit_2_at_its_line(
        earlier: Path, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    receipt = sorted(p for p in earlier.rglob("*.jsonl") if p.name != "journal.jsonl")[0]
    text = receipt.read_text()
    receipt.write_text(text[:len(text) // 2])  # cut mid-line, as a full disk leaves it
    assert cmd_validate(str(write(tmp, requests_per_rep=4, precision=0.05, max_reps=12)), explain=True,
                        baseline=str(earlier)) == 2
    err = capsys.readouterr().err
    assert f"{receipt}:" in err and "not a receipt line" in err and "Traceback" not in err


def test_a_damaged_journal_line_is_said_not_used_silently(
        earlier: Path, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = earlier / "journal.jsonl"
    lines = journal.read_text().splitlines()
    at = len(lines) // 2
    lines.insert(at, '{"kind": "row_done", "seq": 3')  # a line cut short, then the run went on
    journal.write_text("\n".join(lines) + "\n")
    for snap in earlier.glob("*snapshot*"):
        snap.unlink()
    assert cmd_validate(str(write(tmp, requests_per_rep=4)), baseline=str(earlier)) == 0
    err = capsys.readouterr().err
    assert f"ruler validate: warning: --baseline {earlier}: its journal has" in err
    assert f"{journal}:{at + 1}:" in err, err
