"""A sweep on the real testbed: campaigns/demo-sweep.yaml (the draft block, a llama.cpp flag, over
3, 5 and 10 against the control's 7), its workload cut to one class and two short reps. Whatever
the machine's noise decides, every cell of the trade table is the run's own delta against the
control (throughput.csv's), called only where the campaign's rule calls it, and the answer is
said in words; the report draws it."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine import testbed as tb_mod
from engine.campaign.spec import VerdictSpec
from engine.record.journal import read_events
from engine.record.snapshot import fold_journal
from engine.record.trade import SEPARATES, Answer, Outcome, trades
from tests.paths import REPO

pytestmark = pytest.mark.slow

DEMO = REPO / "campaigns" / "demo-sweep.yaml"


def test_a_flag_swept_over_three_values_gives_its_trade_table(testbed: tb_mod.Testbed,
                                                               tmp_path: Path) -> None:
    spec = yaml.safe_load(DEMO.read_text())
    spec["workload"].update({"classes": {"prose": {"prompts": ["Write one sentence about the sea.",
                                                               "Name three colours."]}},
                             "reps": 2, "requests_per_rep": 2, "max_tokens": 8})
    spec["quality"]["greedy"] = {"prompts": ["Say hello.", "Count to three."], "n": 2, "max_tokens": 8}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    results = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(path), "--headless",
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=1500)
    print(out.stdout[-4000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    run = next(results.iterdir())
    started = next(e for e in read_events(run / "journal.jsonl") if e["kind"] == "run_started")
    # control_position both (the demo's default): the control again at the session's end
    assert started["sessions"] == {"s1": ["control", "block-3", "block-5", "block-10", "control-again"]}
    assert started["sweeps"] == {"block": {"axis": "args --spec-draft-n-max", "control": 7,
                                           "windows": {"block-3": 3, "block-5": 5, "block-10": 10}}}
    state = fold_journal(run / "journal.jsonl")
    rule = VerdictSpec.model_validate(spec.get("verdict") or {}).rule()
    [t] = trades(state, rule)
    assert [w for w, _ in t.values] == ["block-3", "block-5", "block-10"] and t.shapes == [("prose", 1, None)]
    # Each cell is throughput.csv's delta of that window's row against the control's.
    csv_rows = {r["window"]: r for r in csv.DictReader((run / "throughput.csv").open())}
    for window, _ in t.values:
        cell, row = t.cells[(window, ("prose", 1, None))], csv_rows[window]
        assert cell.delta is not None and round(cell.delta, 4) == float(row["delta"]), (window, row)
        assert cell.hi is not None and cell.lo is not None
        assert cell.lo == pytest.approx(float(row["delta_lo"]), abs=1e-4)
        assert cell.hi == pytest.approx(float(row["delta_hi"]), abs=1e-4)
        # The cell's call is throughput.csv's verdict: an effect by its sign, none as equivalent.
        want = {"observable effect": Outcome.BETTER if cell.delta > 0 else Outcome.WORSE,
                "no observable effect": Outcome.EQUIVALENT,
                "undetermined": Outcome.UNDETERMINED}[row["verdict"]]
        assert cell.outcome == want, (window, row["verdict_why"])
        # One session: the control and the control again measure it, one degree of freedom.
        assert row["boot_noise_how"].startswith("measured: 5 boots in 1 session, 1 df")
    calls = {c.outcome for c in t.cells.values()}
    everywhere = any(t.cells[(w, s)].outcome == Outcome.BETTER for w, _ in t.values for s in t.shapes)
    expected = (Answer.WINS if everywhere else Answer.NONE if not calls & SEPARATES
                else Answer.CONTROL)  # one shape: better somewhere is better everywhere
    assert t.answer == expected, t.words
    report = subprocess.run([sys.executable, "-m", "engine", "report", str(run)],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    text = (run / "report.md").read_text()
    start = text.index("## Trade tables")
    section = text[start:text.index("\n## ", start)]
    print(section)
    assert f"**{t.answer}**: {t.words}." in section
    assert "| 7 (control) |" in section and "| 10 (block-10) |" in section
    assert (run / "report-trade.png").stat().st_size > 0
