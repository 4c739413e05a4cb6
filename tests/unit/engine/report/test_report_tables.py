"""report.md's tables say each thing once and name every column, on a recorded real run
(compare-a: a control and a context window, llama-server as a process)."""

from __future__ import annotations

import csv
import dataclasses
import shutil
from pathlib import Path

from engine.report import load_run
from engine.report.compare import cell as compared
from engine.report.methods import flags
from engine.report.steady import section
from engine.report.text import cell
from tests.paths import FIXTURES

RUN = FIXTURES / "runs" / "compare-a"


def headers(lines: list[str]) -> list[str]:
    """The cells of the first table's header line."""
    first = next(x for x in lines if x.startswith("|"))
    return [c.strip() for c in first.strip().strip("|").split("|")]


def test_the_shape_column_says_the_rules_reading_once(tmp_path: Path) -> None:
    """The reading names its shape itself ("noise: ..."): the column read "noise: noise: ..."."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    with (run / "throughput.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        columns, rows = list(reader.fieldnames or []), list(reader)
    why = "noise: the lowest rep (20.1) is 11.0% below the next, within the bar (15.2%)"
    rows[0] |= {"basis": "steady", "spread_shape": "noise", "spread_why": why}
    with (run / "throughput.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, [*columns, "basis", "spread_shape", "spread_why"])
        writer.writeheader()
        writer.writerows(rows)
    text = "\n".join(section(load_run(run)))
    assert f"| {why} |" in text and "noise: noise" not in text
    assert "shape" in headers(text.splitlines())


def test_every_column_of_the_flags_table_is_named() -> None:
    lines = flags(load_run(RUN))
    assert headers(lines)[:3] == ["window", "axis", "lossy"]
    assert "" not in headers(lines)


def test_one_rep_has_no_spread_in_the_report_nor_in_compare() -> None:
    """A one-rep row's spread read "0.0%": there is no spread of one figure."""
    row = load_run(RUN).rows[0]
    assert row.reps == 2 and cell(row, "spread") == "18.1 %" and "(spread 18.1 %)" in compared(row)
    one = dataclasses.replace(row, reps=1, rep_tok_s=row.rep_tok_s[:1], spread=0.0)
    assert cell(one, "spread") == "-"
    assert compared(one) == "24.32"
