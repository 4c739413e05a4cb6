"""``ruler report`` on a damaged journal: every valid event is still folded, and the report says
which lines are not events (reading never stops at the first bad line). A frozen
campaign.yaml that does not parse leaves the methods partial, and says so."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from engine.report import load_run, render
from engine.report.compare import cmd_compare
from engine.report.render import cmd_report
from tests.paths import FIXTURES

FINISHED = FIXTURES / "journals" / "finished"


def test_report_names_damaged_lines_and_keeps_the_events_after_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FINISHED, run)
    journal = run / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    whole = load_run(run)
    lines.insert(40, "garbage where an event was\n")
    journal.write_text("".join(lines))
    view = load_run(run)
    assert len(view.events) == len(whole.events)
    assert view.state.status == whole.state.status == "finished"
    assert [d.line for d in view.state.damage] == [41]
    text = render(view, [], "no charts in this test")
    assert "**Journal damaged** at 1 line(s)" in text
    assert f"{run / 'journal.jsonl'}:41: not JSON" in text


def test_a_campaign_yaml_that_is_not_yaml_still_gets_a_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FINISHED, run)
    (run / "campaign.yaml").write_text("name: [unclosed\n")
    view = load_run(run)
    assert view.campaign is None and view.raw_campaign == {}
    assert view.campaign_note.startswith("campaign.yaml unreadable (")
    assert f"- **Campaign**: {view.campaign_note}; the methods below are partial." in render(
        view, [], "no charts in this test")


def test_a_hostile_run_directory_is_refused_in_words_a_terminal_only_shows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A throughput.csv ruler did not write names a receipt whose name holds an OSC and a CSI: the
    report and compare refuse it (exit 2) quoting the name, whose escapes a terminal shows."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "demo-smollm2", run)
    with (run / "throughput.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows[0]["source"] = "windows/\x1b]0;TITLE\x07\x1b[2Jgone.jsonl"
    with (run / "throughput.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert cmd_report(str(run)) == 2
    assert cmd_compare([str(run), str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("windows/\\x1b]0") == 2 and "\x1b" not in err  # the name up to its first ;
