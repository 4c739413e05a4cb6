"""``ruler compare`` between unlike runs, on two recorded real runs of the testbed.

compare-a and compare-b are one campaign (a control and a context window, llama-server as a
process) run twice with ``max_tokens`` 8 and 64, and the second of the class's two prompts changed.
Their rows match exactly; the deltas between them are not an effect of anything but that.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.record.figures import CSV_COLUMNS
from engine.record.state import RunState
from engine.report import RunView, load_run
from engine.report.compare import (
    Match,
    cmd_compare,
    comparison,
    conditions,
    differences,
    match_rows,
    without_common_differences,
)
from engine.report.run import csv_row
from tests.paths import FIXTURES
from tests.unit.engine.report import compare_before

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


# ------------------------------------------------------------------ the same rows as before, in linear time

DEMO = RUNS / "demo-smollm2"
ROW = st.fixed_dictionaries({
    "session": st.sampled_from(["s1", "s2"]), "window": st.sampled_from(["control", "a", "b"]),
    "axis": st.sampled_from(["", "one", "two"]), "class": st.sampled_from(["x", "y"]),
    "load": st.sampled_from([("1", ""), ("4", ""), ("0", "0.5")]),
})


def view_of(rows: list[dict[str, Any]]) -> RunView:
    """A run of these throughput.csv rows alone."""
    return RunView(Path("run"), [], RunState(), [csv_row(dict.fromkeys(CSV_COLUMNS, "") | {
        "session": r["session"], "window": r["window"], "class": r["class"],
        "axis": "control" if r["window"] == "control" else r["axis"],
        "concurrency": r["load"][0], "rate": r["load"][1], "status": "ok"}) for r in rows],
        None, {}, "", {})


def matched(matches: list[Match]) -> list[tuple[list[int | None], list[str]]]:
    return [([id(r) if r is not None else None for r in m.rows], m.how) for m in matches]


@settings(max_examples=300, deadline=None)
@given(runs=st.lists(st.lists(ROW, max_size=14), min_size=2, max_size=3))
def test_rows_match_as_the_scan_of_every_other_row_matched_them(runs: list[list[dict[str, Any]]]) -> None:
    """Rows of few names, so that keys repeat and every rule (exact, window name, axis) and the
    leftovers are reached: each baseline row gets the same row of each run as before."""
    views = [view_of(rows) for rows in runs]
    assert matched(match_rows(views)) == matched(compare_before.match_rows(views))


def reorganised(tmp_path: Path) -> Path:
    """The demo run with a window renamed (matched by its axis), its second session renamed
    (matched by window name), rows left out and the rest in another order."""
    run = tmp_path / "reorganised"
    shutil.copytree(DEMO, run)
    for name in ("throughput.csv", "journal.jsonl"):
        text = (run / name).read_text()
        for old, new in (('"ngram"', '"ngram2"'), (",ngram,", ",ngram2,"),
                         ("windows/s1-ngram", "windows/s1-ngram2"), ('"s2"', '"s3"'),
                         ("windows/s2-", "windows/s3-")):
            text = text.replace(old, new)
        if name == "throughput.csv":
            head, *lines = text.splitlines(keepends=True)
            text = head + "".join(x.replace("s2,", "s3,", 1) if x.startswith("s2,") else x
                                  for x in lines[::-1] if ",code,4," not in x)
        (run / name).write_text(text)
    for d in (run / "windows").iterdir():
        d.rename(d.with_name(d.name.replace("s2-", "s3-").replace("s1-ngram", "s1-ngram2")))
    return run


@pytest.mark.parametrize("runs", [("demo", "copy"), ("a", "b"), ("b", "a"), ("a", "b", "a"),
                                  ("demo", "reorganised"), ("reorganised", "demo", "copy")])
def test_rows_are_the_old_implementations(runs: tuple[str, ...], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row, match, figure and delta as the implementation before (compare_before), on
    recorded runs; a difference it named, named the same, but "not recorded in either run" where
    the run records it (an older journal's requests per rep: the frozen campaign's) or where
    nothing was (a window with no row sends no prompts)."""
    copy = tmp_path / "copy"
    shutil.copytree(DEMO, copy)
    dirs = {"demo": DEMO, "copy": copy, "a": A, "b": B, "reorganised": reorganised(tmp_path)}
    new = comparison([load_run(dirs[r]) for r in runs], allow_different=True)[2]
    with compare_before.installed(monkeypatch):
        old = comparison([load_run(dirs[r]) for r in runs], allow_different=True)[2]
    assert [{k: v for k, v in rec.items() if k != "differences"} for rec in new] == [
        {k: v for k, v in rec.items() if k != "differences"} for rec in old]
    assert any(how not in ("exact", "") for rec in new for how in rec["matched_by"]) == (
        "reorganised" in runs)
    for rec, was in zip(new, old, strict=True):
        for now, then in zip(rec["differences"], was["differences"], strict=True):
            assert (now is None) == (then is None)
            assert now is None or now.items() <= then.items()
            assert now is None or all(then[k] == "not recorded in either run" for k in then.keys() - now)


def test_a_missing_record_is_not_a_difference_when_both_runs_have_it(tmp_path: Path) -> None:
    """The demo against a copy: before, every row was unlike ("requests per rep not recorded in
    either run": the older journal's run_started has none, the frozen campaign says 4), and the
    rejected window's stand-in row besides ("prompts () not recorded", "time scale": it sent no
    request). A prompt changed in the copy is named on that class's rows only."""
    copy = tmp_path / "copy"
    shutil.copytree(DEMO, copy)
    records = comparison([load_run(DEMO), load_run(copy)])[2]
    assert [r["differences"][1] for r in records] == [{}] * 29
    assert records[-1]["row"] == "s2-qv8 (window)"
    assert conditions(load_run(DEMO), load_run(DEMO).rows[0])["requests per rep"] == 4
    prompts = json.loads((copy / "prompts.json").read_text())
    prompts["prose"][1] = "Describe the smell of snow."
    (copy / "prompts.json").write_text(json.dumps(prompts))
    records = comparison([load_run(DEMO), load_run(copy)])[2]
    unlike = {r["row"]: r["differences"][1] for r in records if r["differences"][1]}
    assert set(unlike) == {r["row"] for r in records if " prose " in r["row"]}
    assert all(set(d) == {"prompts (prose)"} and d["prompts (prose)"].startswith("1 of 4 differ")
               for d in unlike.values())
