"""The console's sweep view (key t) on a recorded sweep: campaigns/demo-sweep.yaml run on the
testbed (tests/fixtures/sweep/: its journal, frozen campaign and throughput.csv)."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.record.snapshot import fold_journal
from tests.console import screen_text, settled, until
from tests.paths import FIXTURES
from tui.app import RulerConsole
from tui.core.rules import DEFAULT_RULE
from tui.core.sweep import picked_sweep, sweep_lines

SWEEP = FIXTURES / "sweep"


def test_the_sweep_view_lines_say_each_value_against_the_control_and_the_answer() -> None:
    state = fold_journal(SWEEP / "journal.jsonl")
    assert picked_sweep(state, "s1-block-5") == "block" and picked_sweep(state, "s1-control") is None
    lines = [text for text, _ in sweep_lines(state, DEFAULT_RULE)]
    assert lines[0] == "block (args --spec-draft-n-max), session s1"
    assert [line.split()[0] for line in lines[2:6]] == ["7", "3", "5", "10"]
    # One session, one control boot: nothing measures the noise between boots, so no interval and
    # no call, and the answer says why.
    assert "-56.7 %" in lines[5] and "[" not in lines[5] and "worse" not in lines[5]
    assert lines[6].startswith("no value separates from the control: ")
    assert "the noise between boots was not measured" in lines[6]


async def test_t_opens_the_sweep_view_and_esc_closes_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SWEEP, run)
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await pilot.press("t")
        await until(pilot, lambda: "no value separates from the control" in screen_text(app))
        assert "-56.7 %" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: "no value separates from the control" not in screen_text(app))
