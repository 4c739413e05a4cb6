"""ruler compare on the two real runs of tests/integration/report_runs.py (built once per session),
and on two real runs that differ in what shapes the figures.

Run B has one class, one session and its drafter window under another name with the same axis,
so the comparison has to match rows exactly, by axis, and list what only one run has. Its workload
is A's: their matched rows are alike, and every delta between them is given.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.method.delta import relative_delta
from engine.method.verdict import versus
from engine.report import load_run, pct, tok
from engine.report.compare import cmd_compare, comparison, cross_noise, match_rows
from tests.integration.live import RULER
from tests.integration.report_runs import POLICY_A, POLICY_B, csv_rows, recomputed

MARKS = (" effect", " (no effect)", " (undetermined)")

# The shared runs may be built here (see test_report): minutes for whichever test asks first.
pytestmark = [pytest.mark.timeout(3600), pytest.mark.slow]


def test_rows_side_by_side_with_deltas(run_a: Path, run_b: Path) -> None:
    headers, text, _ = comparison([load_run(run_a), load_run(run_b)])
    assert headers[:4] == ["row", "A tok/s", "B tok/s", "Δ B vs A"]
    line = dict(zip(headers, next(t for t in text if t[0] == "s1-control prose C1"), strict=True))
    a = recomputed(run_a, ("s1", "control", "prose", 1), POLICY_A)
    b = recomputed(run_b, ("s1", "control", "prose", 1), POLICY_B)
    assert line["A tok/s"] == f"{tok(a['agg_tok_s'])} (spread {pct(a['spread'])})"
    assert line["B tok/s"] == f"{tok(b['agg_tok_s'])} (spread {pct(b['spread'])})"
    # A control row across runs: the delta of the reps recomputed from the receipts, its interval
    # with the noise between boots (two runs are two boots at least: the noisier run's at C1, or
    # the declared), and the call on that one comparison.
    views = [load_run(run_a), load_run(run_b)]
    row_a, row_b = (v.rows_of("s1", "control")[("prose", 1, None)] for v in views)
    j = cross_noise(views[0], views[1], row_b)
    noise = j.noise_or_declared("prose", 1, None)
    assert row_a.rep_tok_s == pytest.approx(a["rep_tok_s"])
    assert row_b.rep_tok_s == pytest.approx(b["rep_tok_s"])
    v = versus(row_b.rep_tok_s, [row_a.rep_tok_s], noise)
    assert v is not None and (iv := v.interval()) is not None
    cell = line["Δ B vs A"]
    assert re.fullmatch(r"[+-]\d+\.\d % \[.*", cell) and cell.endswith(MARKS), cell
    delta = float(cell.split(" %", 1)[0])
    lo, hi = (float(x) for x in cell[cell.index("[") + 1:cell.index("]")].split(", "))
    # The cell prints the figures as throughput.csv has them (4 decimals) at 0.1 %: two roundings,
    # 0.05 + 0.005 (seen: a delta of -44.4 % at 0.1 %, printed -44.5 % from its 4 decimals).
    assert delta == pytest.approx(v.delta * 100, abs=0.056), cell
    assert lo == pytest.approx(iv[0] * 100, abs=0.056) and hi == pytest.approx(iv[1] * 100, abs=0.056)
    assert v.noise.boot_mean > 0  # the boots' noise is in it, never zero in silence
    assert line["matched by"] == "B: exact"
    assert line["A accept len/rate"] == f"{a['accept_len']:.2f}/{a['accept_rate']:.3f}"


def test_windows_matched_by_axis_and_leftovers_listed(run_a: Path, run_b: Path) -> None:
    matches = match_rows([load_run(run_a), load_run(run_b)])
    by_label = {m.label(): m for m in matches}
    block5 = by_label["s1-block5 prose C1"]
    assert block5.how == ["exact", "axis"]
    assert block5.rows[1] is not None and block5.rows[1].window == "draft5"
    # Run B has no code class and no second session: those A rows stand alone.
    assert by_label["s1-block5 code C1"].rows[1] is None
    assert by_label["s2-control prose C1"].rows[1] is None
    assert all(m.rows[0] is not None for m in matches)  # B has nothing A lacks
    # A window rejected at boot has no row; it is compared all the same, as the window's status.
    qv8 = by_label["s2-qv8 (window)"]
    assert qv8.rows[0] is not None and qv8.rows[0].status == "rejected" and qv8.rows[1] is None
    assert len(matches) == len(csv_rows(run_a)) + 1


def test_each_delta_says_its_call_and_the_noise_it_counted(run_a: Path, run_b: Path) -> None:
    views = [load_run(run_a), load_run(run_b)]
    headers, text, records = comparison(views)
    checked = 0
    for rec, line in zip(records, text, strict=True):
        a, b = rec["runs"]
        d = rec["delta_vs_first"][1]
        if a is None or b is None or d is None or d["value"] is None:
            continue
        mark = {"observable effect": " effect", "no observable effect": " (no effect)",
                "undetermined": " (undetermined)"}[d["call"]]
        assert line[headers.index("Δ B vs A")].endswith(mark)
        if d["call"] == "observable effect":  # an effect's interval excludes 0
            assert d["lo"] > 0 or d["hi"] < 0
        assert "noise between boots" in d["method"]
        checked += 1
    assert checked >= 2


def test_each_run_against_its_own_control(run_a: Path, run_b: Path) -> None:
    headers, text, _ = comparison([load_run(run_a), load_run(run_b)])
    line = dict(zip(headers, next(t for t in text if t[0] == "s1-block5 prose C1"), strict=True))
    w = recomputed(run_b, ("s1", "draft5", "prose", 1), POLICY_B)
    c = recomputed(run_b, ("s1", "control", "prose", 1), POLICY_B)
    # B's own call, as its throughput.csv wrote it.
    row = csv_rows(run_b)[("s1", "draft5", "prose", 1)]
    mark = {"observable effect": " effect", "no observable effect": " (no effect)",
            "undetermined": " (undetermined)"}[row["verdict"]]
    assert line["B Δ vs own control"] == (
        f"{float(row['delta']) * 100:+.1f} % [{float(row['delta_lo']) * 100:+.1f}, "
        f"{float(row['delta_hi']) * 100:+.1f}]{mark}")
    assert relative_delta(w["rep_tok_s"], c["rep_tok_s"]) is not None


def test_cmd_compare_table_and_json(run_a: Path, run_b: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_compare([str(run_a), str(run_b)]) == 0
    out = capsys.readouterr().out
    assert f"A = {run_a}" in out and f"B = {run_b}" in out
    assert "| s1-control prose C1" in out
    assert re.search(r"^\| s2-qv8 \(window\) +\| rejected +\| - ", out, re.M)
    assert cmd_compare([str(run_a), str(run_b)], as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    print(out)  # the table, for a person reading the test log
    assert [r["tag"] for r in data["runs"]] == ["A", "B"]
    row = next(r for r in data["rows"] if r["row"] == "s1-block5 prose C1")
    assert row["matched_by"] == ["exact", "axis"] and row["runs"][1]["window"] == "draft5"


def test_across_servers(run_a: Path, run_b: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    """No SGLang or vLLM here: a copy of run B whose journal names another server stands in. The
    rows match all the same (nothing in the matching looks at the server); the server is a
    condition of the figures, so a delta across it is given only when asked, the server named."""
    other = tmp_path / "vllm-run"
    shutil.copytree(run_b, other)
    journal = other / "journal.jsonl"
    journal.write_text(journal.read_text().replace('"server":"llamacpp"', '"server":"vllm"', 1))
    assert cmd_compare([str(run_a), str(other)]) == 0
    out = capsys.readouterr().out
    assert "servers differ (llamacpp vs vllm)" in out
    assert "| s1-block5 prose C1" in out and "B: axis" in out
    assert re.search(r"^\| s1-block5 prose C1 .*\| unlike: no effect given \|", out, re.M)
    assert "B: server llamacpp vs vllm" in unlike_of(out, "s1-block5 prose C1")
    assert cmd_compare([str(run_a), str(other)], allow_different=True) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\| s1-block5 prose C1 [^|]*\|[^|]*\|[^|]*\| [+-][0-9.]+ % ", out, re.M)
    assert "B: server llamacpp vs vllm" in unlike_of(out, "s1-block5 prose C1")


def unlike_of(out: str, label: str) -> str:
    """What compare printed of a row's differences from A: in its row's last column, or once above
    the table when every row differs alike."""
    lines = out.splitlines()
    common = [ln for ln in lines if ln.startswith("unlike A on every row: ")]
    header = next(ln for ln in lines if ln.startswith("| row "))
    row = next(ln for ln in lines if ln.startswith(f"| {label} "))
    if common:
        assert "unlike A" not in header
        return common[0]
    assert header.rstrip(" |").endswith("unlike A")
    return row.rstrip(" |").rsplit("|", 1)[1]


UNLIKE = """\
name: {name}
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {{-m: "${{model}}", -c: 1024, -np: 1, -t: 1}}
windows:
  - name: ctx
    axis: context 2048
    change:
      args: {{-c: 2048}}
sessions:
  s1: [ctx]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Say hi.", "{prompt}"]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: 2
  max_tokens: {max_tokens}
timeouts: {{boot: 120, request: 60}}
quality: {{enabled: false}}
"""


def test_unlike_runs_give_no_effect_unless_asked(testbed: tb_mod.Testbed, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Two real runs of one campaign but for max_tokens (8 vs 64) and one of the two prompts."""
    runs = []
    for name, max_tokens, prompt in (("unlike-a", 8, "Write one sentence about the sea."),
                                     ("unlike-b", 64, "Write one sentence about the moon.")):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(UNLIKE.format(name=name, max_tokens=max_tokens, prompt=prompt))
        done = subprocess.run([*RULER, "run", str(spec), "--headless", "--results-dir",
                               str(tmp_path / "results")], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        (run,) = (tmp_path / "results").glob(f"*-{name}")
        runs.append(str(run))
    assert cmd_compare(runs) == 0
    out = table = capsys.readouterr().out
    assert "unlike runs: 2 matched rows differ in what shapes the figures: " in out
    for label in ("s1-control prose C1", "s1-ctx prose C1"):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"| {label} "))
        assert "| unlike: no effect given |" in line and "%  [" not in line
        said = unlike_of(out, label)
        assert "max_tokens 8 vs 64" in said and "prompts (prose) 1 of 2 differ" in said
    assert cmd_compare(runs, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(r["delta_vs_first"][1] is None and r["matched_by"] == ["exact", "exact"]
               and set(r["differences"][1]) == {"max_tokens", "prompts (prose)"}
               for r in data["rows"])
    assert cmd_compare(runs, allow_different=True) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("| s1-control prose C1 "))
    # The delta is given; its runs booted the control once and declared no noise between boots,
    # so it has no interval and no call but "undetermined".
    assert re.search(r"\| [+-][0-9.]+ % ", line) and "undetermined" in line
    assert "max_tokens 8 vs 64" in unlike_of(out, "s1-control prose C1")
    print(table)  # the table, for a person reading the test log


def test_cmd_compare_needs_two_runs(run_a: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_compare([str(run_a)]) == 2
    assert cmd_compare([str(run_a), str(tmp_path)]) == 2
    assert "not a ruler run directory" in capsys.readouterr().err
