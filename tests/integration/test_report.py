"""ruler report on real runs of the testbed: every number checked against the receipts.

The two small real runs (llama-server as a process) are tests/integration/report_runs.py's, built
once per test session and shared with tests/integration/test_compare.py.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from engine.method.delta import relative_delta
from engine.method.delta import text as delta_text
from engine.record.journal import read_events
from engine.record.state import fold
from engine.report import (
    CHARTS_SKIPPED,
    REPORT,
    cmd_report,
    delta,
    load_run,
    pct,
    receipt_rep_tok_s,
    tok,
    write_report,
)
from tests.integration.report_runs import POLICY_A, POLICY_B, csv_rows, recomputed

# The first test to ask for a run pays for building it (minutes on a busy 2-core box): the
# 900 s per-test default would cut a session-scoped build short; the module is slow for it.
pytestmark = [pytest.mark.timeout(3600), pytest.mark.slow]


@pytest.fixture(scope="session")
def report_a(run_a: Path) -> str:
    write_report(run_a)
    return (run_a / REPORT).read_text()


# ------------------------------------------------------------------------------ helpers


def md_cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def md_table(text: str, heading: str) -> list[dict[str, str]]:
    """The first markdown table after a heading line, as dicts by header (pipes unescaped)."""
    lines = text.splitlines()
    i = lines.index(heading)
    while not lines[i].startswith("|"):
        i += 1
    head = md_cells(lines[i])
    rows: list[dict[str, str]] = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(head, md_cells(ln), strict=True)))
    return rows


def section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    level = heading.split(" ")[0]
    rest = text[start + len(heading) + 1:]
    ends = [rest.find(f"\n{h} ") for h in ("#" * n for n in range(1, len(level) + 1))]
    ends = [e for e in ends if e >= 0]
    return rest[:min(ends)] if ends else rest


def pick(rows: list[dict[str, str]], cls: str, c: int) -> dict[str, str]:
    return next(r for r in rows if r["class"] == cls and r["C"] == str(c))


# ------------------------------------------------------------------------------ tests




def test_control_table_is_recomputed_from_the_receipts(run_a: Path, report_a: str) -> None:
    table = md_table(report_a, "### s1: control")
    assert {(r["class"], r["C"]) for r in table} == {("prose", "1"), ("prose", "2"), ("code", "1"),
                                                     ("code", "2")}
    for cls in ("prose", "code"):
        for c in (1, 2):
            again = recomputed(run_a, ("s1", "control", cls, c), POLICY_A)
            cells = pick(table, cls, c)
            assert cells["tok/s"] == tok(again["agg_tok_s"])
            assert cells["per user"] == tok(again["per_user_tok_s"])
            assert cells["spread"] == pct(again["spread"])
            assert cells["reps tok/s"] == ", ".join(tok(v) for v in again["rep_tok_s"])
            assert cells["accept len / rate"] == f"{again['accept_len']:.2f} / {again['accept_rate']:.3f}"
            assert cells["status"] == again["status"]


def test_window_deltas_against_the_sessions_control(run_a: Path, report_a: str) -> None:
    table = md_table(report_a, "### s1-block5: draft block 5")
    for cls in ("prose", "code"):
        w = recomputed(run_a, ("s1", "block5", cls, 1), POLICY_A)
        ctl = recomputed(run_a, ("s1", "control", cls, 1), POLICY_A)
        iv = relative_delta(w["rep_tok_s"], ctl["rep_tok_s"]).rounded()  # type: ignore[union-attr]  # reps on both sides
        cells = pick(table, cls, 1)
        assert cells["tok/s"] == tok(w["agg_tok_s"]) and cells["control"] == tok(ctl["agg_tok_s"])
        assert cells["Δ tok/s [95 % CI]"] == delta_text(iv, POLICY_A.spread)
        # throughput.csv says the same, from the same reps.
        row = csv_rows(run_a)[("s1", "block5", cls, 1)]
        assert (float(row["delta"]), float(row["delta_lo"]), float(row["delta_hi"])) == (
            iv.delta, iv.lo, iv.hi)
        assert cells["spread (window / control)"] == f"{pct(w['spread'])} / {pct(ctl['spread'])}"
        assert cells["reps tok/s"] == ", ".join(
            tok(v) for v in receipt_rep_tok_s(run_a, csv_rows(run_a)[("s1", "block5", cls, 1)][
                "source"], 1, csv_rows(run_a)[("s1", "block5", cls, 1)]["basis"]))
    # A row judged against a void control row (or void itself) has no delta, and says why.
    assert pick(table, "prose", 2)["Δ tok/s [95 % CI]"] == "n/a (void)"
    assert csv_rows(run_a)[("s1", "block5", "prose", 2)]["delta"] == ""


def test_void_rows_and_their_reruns_are_on_record(run_a: Path, report_a: str) -> None:
    rows = csv_rows(run_a)
    void = [k for k, r in rows.items() if r["status"] == "void"]
    assert void, "the tiny leak threshold must void the C2 rows"
    events = read_events(run_a / "journal.jsonl")
    voids = [e for e in events if e["kind"] == "row_void"]
    assert voids and all(e["concurrency"] == 2 for e in voids)
    block5 = [k for k in void if k[1] == "block5"]
    assert block5, void
    s, w, cls, c = block5[0]
    text = section(report_a, "### s1-block5: draft block 5")
    row = rows[block5[0]]
    assert f"- {cls} C{c}: row **void** after {row['attempts']} attempts: {row['reason']}" in text
    first = next(e for e in voids if (e["session"], e["window"], e["class"]) == (s, w, cls))
    assert (f"- {cls} C{c}: attempt {first['attempt']} **void** ({first['reason']}; reps "
            f"{', '.join(tok(v) for v in first['rep_tok_s'])} tok/s)") in text
    assert int(row["attempts"]) == 2  # one rerun, as max_reruns: 1 allows
    cells = pick(md_table(report_a, "### s1-block5: draft block 5"), cls, c)
    assert (cells["status"], cells["attempts"]) == ("void", "2")


def test_rejected_window_keeps_the_servers_words(run_a: Path, report_a: str) -> None:
    text = section(report_a, "### s2-qv8: q8_0 V cache without flash attention")
    assert "**Rejected at boot**" in text
    verbatim = (run_a / "windows" / "s2-qv8" / "rejection.txt").read_text()
    line = next(ln for ln in verbatim.splitlines()
                if "quantized V cache requires flash_attn to be enabled" in ln)
    assert f"\n{line}\n" in text  # verbatim, in the fenced block
    assert "[rejection.txt](windows/s2-qv8/rejection.txt)" in text
    glance = md_table(report_a, "## Windows at a glance")
    qv8 = next(r for r in glance if r["window"] == "s2-qv8")
    assert qv8["status"] == "rejected" and qv8["greedy"] == "rejected"


def test_verdicts_come_from_the_journal(run_a: Path, report_a: str) -> None:
    ws = fold(read_events(run_a / "journal.jsonl")).windows["s1-block5"]
    greedy, tf = ws.verdicts["greedy"], ws.verdicts["teacher_forced"]
    glance = next(r for r in md_table(report_a, "## Windows at a glance") if r["window"] == "s1-block5")
    assert glance["greedy"] == f"{greedy['figures']['identical']}/{greedy['figures']['n']}"
    assert glance["|Δlogp| p99"] == f"{tf['figures']['p99']:.3g}"
    assert glance["ruler check"] == "ruler suspect"  # SmolLM2's template ignores enable_thinking
    assert glance["no observable effect"] == ws.verdicts["no_effect"]["verdict"]
    text = section(report_a, "### s1-block5: draft block 5")
    assert f"- **greedy**: {greedy['summary']}" in text or f"- **greedy**: {greedy['verdict']}: " \
        f"{greedy['summary']}" in text
    assert "[teacher-forced.json](windows/s1-block5/teacher-forced.json)" in text
    assert "RULER SUSPECT: chat_template_kwargs" in text
    assert "`spec.n_max` 5 vs 7" in text  # the boot fact the axis changes
    assert "server.url" not in text  # a per-boot fact is not a difference


def test_controls_and_drift(run_a: Path, report_a: str) -> None:
    rows = csv_rows(run_a)
    ctl = md_table(report_a, "## Controls")
    s2 = next(r for r in ctl if r["session"] == "s2")
    p1 = rows[("s2", "control", "prose", 1)]
    assert s2["prose C1 tok/s (spread)"] == f"{tok(float(p1['agg_tok_s']))} ({pct(float(p1['spread']))})"
    top = rows[("s2", "control", "code", 2)]
    assert s2["code C2 agg / per user (spread)"] == (
        f"{tok(float(top['agg_tok_s']))} / {tok(float(top['per_user_tok_s']))} "
        f"({pct(float(top['spread']))}, {top['status']})")
    drift = md_table(report_a, "### Control drift across sessions")
    view = load_run(run_a)
    for cls in ("prose", "code"):
        d = delta(view.rows_of("s2", "control")[(cls, 1, None)],
                  view.rows_of("s1", "control")[(cls, 1, None)], POLICY_A.spread)
        assert d.lo is not None  # two reps a side: an interval
        assert pick(drift, cls, 1)["s2"].endswith(d.text())
        # The floor a comparison across the two sessions must exceed: the drift itself here.
        assert pick(drift, cls, 1)["noise floor across sessions"] == pct(
            max(abs(d.value or 0), POLICY_A.spread))
    assert "`drift.json`" in report_a if (run_a / "drift.json").exists() else True


def test_methods_say_how_it_was_measured(run_a: Path, report_a: str) -> None:
    methods = section(report_a, "## Methods")
    env = json.loads((run_a / "env.json").read_text())
    assert f"**ruler**: {env['ruler_version']}" in methods
    assert env["host"]["node"] in methods and f"{env['host']['cpus']} CPUs" in methods
    assert "2 reps per shape" in methods and "max_tokens 12" in methods
    assert "a row wider than 0.01 % is *leak-shaped* when its lowest rep" in methods
    assert "at C >= 2 only a leak-shaped row is void, rewarmed and rerun (up to 1 times)" in methods
    assert "one warm pass" in methods and "- **Steady state**: " in methods
    assert '{"chat_template_kwargs": {"enable_thinking": false}}' in methods
    flags = md_table(report_a, "### Flags per window")
    block5 = next(r for r in flags if r["window"] == "s1-block5")
    assert block5["change vs control"] == "`--spec-draft-n-max 5` (control `--spec-draft-n-max 7`)"
    assert "--spec-draft-n-max 5" in block5["argv"] and "-fa off" in block5["argv"]
    qv8 = next(r for r in flags if r["window"] == "s2-qv8")
    assert "--cache-type-v q8_0" in qv8["argv"]


def test_charts_are_written(run_a: Path, report_a: str) -> None:
    pytest.importorskip("matplotlib")
    names = ["report-tok-s.png", "report-acceptance.png", "report-control-drift.png"]
    for name in names:
        data = (run_a / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
        assert f"]({name})" in report_a
        print(f"{name}: {len(data)} bytes")
    assert CHARTS_SKIPPED not in report_a


def test_report_without_the_plotting_extra(run_a: Path, report_a: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The missing extra is simulated in-process: sys.modules["matplotlib"] = None makes every
    ``import matplotlib`` raise ImportError, as on an install without ruler[report]."""
    copy = tmp_path / run_a.name
    shutil.copytree(run_a, copy, ignore=shutil.ignore_patterns("report*"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for mod in [m for m in sys.modules if m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, mod, None)
    assert cmd_report(str(copy)) == 0
    text = (copy / REPORT).read_text()
    assert CHARTS_SKIPPED in section(text, "## Charts")
    assert not list(copy.glob("*.png"))
    with_charts = report_a
    # Every table is there all the same: the text differs only in the charts section.
    for heading in ("## Windows at a glance", "### s1: control", "### s1-block5: draft block 5",
                    "### Flags per window"):
        assert md_table(text, heading) == md_table(with_charts, heading)


def test_run_without_quality_receipts_says_not_measured(run_b: Path) -> None:
    path, charts, note = write_report(run_b)
    text = path.read_text()
    if not note:  # with the extra: one session booted the control once, so no drift chart
        assert [c.name for c in charts] == ["report-tok-s.png", "report-acceptance.png"]
    glance = md_table(text, "## Windows at a glance")
    assert glance[0]["window"] == "s1-draft5"
    assert glance[0]["greedy"] == "not measured" and glance[0]["no observable effect"] == "not measured"
    assert "quality checks: not measured (quality checks off in the campaign)" in text
    assert "**Quality**: off" in text
    table = md_table(text, "### s1-draft5: draft block 5")
    again = recomputed(run_b, ("s1", "draft5", "prose", 2), POLICY_B)
    assert pick(table, "prose", 2)["tok/s"] == tok(again["agg_tok_s"])


