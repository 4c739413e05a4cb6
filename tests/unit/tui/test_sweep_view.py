"""The console's sweep view (key t) on a recorded sweep: campaigns/demo-sweep.yaml run on the
testbed (tests/fixtures/sweep/: its journal, frozen campaign and throughput.csv)."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.record.snapshot import fold_journal
from tests.console import screen_text, settled, until
from tests.paths import FIXTURES
from tui.app import RulerConsole
from tui.core.sweep import picked_sweep, sweep_lines

SWEEP = FIXTURES / "sweep"


def test_the_sweep_view_lines_say_each_value_against_the_control_and_the_answer() -> None:
    state = fold_journal(SWEEP / "journal.jsonl")
    assert picked_sweep(state, "s1-block-5") == "block" and picked_sweep(state, "s1-control") is None
    lines = [text for text, _ in sweep_lines(state, 0.10)]
    assert lines[0] == "block (args --spec-draft-n-max), session s1"
    assert [line.split()[0] for line in lines[2:6]] == ["7", "3", "5", "10"]
    assert "-56.7 % [-79.9, -6.7] worse" in lines[5]
    assert lines[6].startswith("the control's value stays: ")


async def test_t_opens_the_sweep_view_and_esc_closes_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SWEEP, run)
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await pilot.press("t")
        await until(pilot, lambda: "the control's value stays" in screen_text(app))
        assert "-56.7 % [-79.9, -6.7] worse" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: "the control's value stays" not in screen_text(app))
