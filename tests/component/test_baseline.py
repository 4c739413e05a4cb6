"""``ruler validate --baseline RUN``: a campaign read against an earlier run of it (in-process
fake servers make the earlier run); ``ruler run --baseline`` refuses what is not a run."""

from __future__ import annotations

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
    seen = read_baseline(earlier)
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
