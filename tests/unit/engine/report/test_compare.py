"""``ruler compare`` between unlike runs, on two recorded real runs of the testbed.

compare-a and compare-b are one campaign (a control and a context window, llama-server as a
process) run twice with ``max_tokens`` 8 and 64, and the second of the class's two prompts changed.
Their rows match exactly; the deltas between them are not an effect of anything but that.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.report import load_run
from engine.report.compare import (
    cmd_compare,
    comparison,
    conditions,
    differences,
    without_common_differences,
)
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"
A, B = RUNS / "compare-a", RUNS / "compare-b"


def test_unlike_rows_get_no_delta_and_say_why() -> None:
    headers, text, records = comparison([load_run(A), load_run(B)])
    assert [r["matched_by"] for r in records] == [["exact", "exact"]] * 2
    for rec, line in zip(records, text, strict=True):
        cells = dict(zip(headers, line, strict=True))
        diff = rec["differences"][1]
        assert set(diff) == {"prompts (prose)", "max_tokens"}
        assert diff["max_tokens"] == "8 vs 64"
        assert diff["prompts (prose)"].startswith("1 of 2 differ (sha256 ")
        assert rec["delta_vs_first"][1] is None
        assert cells["Δ B vs A"] == "unlike: no effect given"
        assert "max_tokens 8 vs 64" in cells["unlike A"]


def test_allow_different_gives_the_delta_beside_the_differences(
        capsys: pytest.CaptureFixture[str]) -> None:
    headers, text, records = comparison([load_run(A), load_run(B)], allow_different=True)
    for rec, line in zip(records, text, strict=True):
        cells = dict(zip(headers, line, strict=True))
        assert rec["delta_vs_first"][1]["value"] is not None
        assert cells["Δ B vs A"].startswith(("+", "-"))
        assert "max_tokens 8 vs 64" in cells["unlike A"]
    assert cmd_compare([str(A), str(B)], allow_different=True) == 0
    out = capsys.readouterr().out
    assert "unlike runs: 2 matched rows differ" in out and "(--allow-different)" in out


def test_json_carries_the_differences(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_compare([str(A), str(B)], as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["allow_different"] is False
    row = data["rows"][0]
    assert row["differences"][0] is None and row["differences"][1]["max_tokens"] == "8 vs 64"
    assert row["delta_vs_first"] == [None, None]


def test_a_run_against_itself_is_alike(capsys: pytest.CaptureFixture[str]) -> None:
    headers, text, records = comparison([load_run(A), load_run(A)])
    assert all(r["differences"] == [None, {}] for r in records)
    assert all(r["delta_vs_first"][1] is not None for r in records)
    assert cmd_compare([str(A), str(A)]) == 0
    assert "unlike runs" not in capsys.readouterr().out


@pytest.mark.parametrize(("edit", "name"), [
    ('"max_tokens":8', "max_tokens"),
    ('"requests":[2]', "requests per rep"),
    ('"-c","1024"', "server args"),
    ('"server":"llamacpp"', "server"),
])
def test_each_condition_recorded_in_the_journal_is_compared(
        tmp_path: Path, edit: str, name: str) -> None:
    other = tmp_path / "other"
    shutil.copytree(A, other)
    journal = other / "journal.jsonl"
    text = journal.read_text()
    assert edit in text
    changed = {'"max_tokens":8': '"max_tokens":9', '"requests":[2]': '"requests":[3]',
               '"-c","1024"': '"-c","4096"', '"server":"llamacpp"': '"server":"vllm"'}[edit]
    journal.write_text(text.replace(edit, changed))
    a, b = load_run(A), load_run(other)
    row = next(r for r in a.rows if r.window == "control")
    theirs = next(r for r in b.rows if r.window == "control")
    assert list(differences(conditions(a, row), conditions(b, theirs))) == [name]


@pytest.mark.parametrize(("old", "new", "name"), [
    ("max_tokens: 8", "max_tokens: 8\n  sampling: {temperature: 0.5}", "sampling"),
    ("max_tokens: 8", "max_tokens: 8\n  knobs: {top_k: 1}", "knobs"),
    ("max_tokens: 8", "max_tokens: 8\n  cache: flush", "cache"),
])
def test_each_condition_of_the_frozen_campaign_is_compared(
        tmp_path: Path, old: str, new: str, name: str) -> None:
    other = tmp_path / "other"
    shutil.copytree(A, other)
    spec = other / "campaign.yaml"
    spec.write_text(spec.read_text().replace(old, new))
    if name == "cache":  # the row's own record of its cache policy is what it ran under
        csv = other / "throughput.csv"
        csv.write_text(csv.read_text().replace(",keep,", ",flush,"))
    a, b = load_run(A), load_run(other)
    assert b.campaign is not None
    row = a.rows[0]
    assert list(differences(conditions(a, row), conditions(b, b.rows[0]))) == [name]


def test_shared_keeps_only_the_rows_every_run_has_and_empty_columns_go(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fewer = tmp_path / "compare-b"
    shutil.copytree(B, fewer)
    lines = (fewer / "throughput.csv").read_text().splitlines(keepends=True)
    (fewer / "throughput.csv").write_text("".join(x for x in lines if ",ctx," not in x))
    assert [t[0] for t in comparison([load_run(A), load_run(fewer)])[1]] == [
        "s1-control prose C1", "s1-ctx prose C1"]
    assert [t[0] for t in comparison([load_run(A), load_run(fewer)], shared=True)[1]] == [
        "s1-control prose C1"]
    assert cmd_compare([str(A), str(fewer)], shared=True) == 0
    out = capsys.readouterr().out
    table = [x for x in out.splitlines() if x.startswith("|")]
    assert len(table) == 3 and "(--shared)" in out
    # Neither run drafts: the acceptance columns, "-" in every row, are left out. The spread is
    # named as what it is, (max - min) / mean, not a ± around the figure.
    assert "accept len/rate" not in table[0] and "±" not in out
    assert "24.32 (spread 18.1 %)" in table[2]


def test_matched_by_is_said_once_when_every_row_matched_exactly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """"B: exact" on every row took a column of a table already wider than a terminal: when every
    row matched exactly it is said once above the table; a row matched otherwise keeps the column."""
    assert cmd_compare([str(A), str(B)]) == 0
    out = capsys.readouterr().out
    table = [x for x in out.splitlines() if x.startswith("|")]
    assert "every row matched exactly" in out and "matched by" not in table[0]
    assert all("B: exact" not in x for x in table)
    renamed = tmp_path / "compare-b"
    shutil.copytree(B, renamed)
    # The context window renamed in B: matched by its axis.
    for name, old, new in (("throughput.csv", ",ctx,", ",ctx2,"), ("journal.jsonl", '"ctx"', '"ctx2"')):
        (renamed / name).write_text((renamed / name).read_text().replace(old, new))
    assert cmd_compare([str(A), str(renamed)]) == 0
    out = capsys.readouterr().out
    table = [x for x in out.splitlines() if x.startswith("|")]
    assert "every row matched exactly" not in out and "matched by" in table[0]
    assert any("B: axis" in x for x in table)


def test_differences_every_row_shares_are_said_once_above_the_table(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The runs differ in max_tokens and a prompt on every row: the longest cell of the table,
    repeated on each row, is said once above it; rows that differ each their own way keep it."""
    assert cmd_compare([str(A), str(B)]) == 0
    out = capsys.readouterr().out
    table = [x for x in out.splitlines() if x.startswith("|")]
    said = [x for x in out.splitlines() if x.startswith("unlike A on every row: ")]
    assert len(said) == 1 and "max_tokens 8 vs 64" in said[0] and "prompts (prose)" in said[0]
    assert "unlike A" not in table[0] and all("max_tokens" not in x for x in table)
    headers = ["row", "unlike A"]
    alike = [["r1", "-"], ["r2", "-"]]
    assert without_common_differences(headers, alike) == (headers, alike, "")
    mixed = [["r1", "B: max_tokens 8 vs 64"], ["r2", "-"]]
    assert without_common_differences(headers, mixed) == (headers, mixed, "")
