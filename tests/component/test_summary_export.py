"""The end of a run on the FAKE server (tests/component/fakes.py): the summary table printed once,
results.json, and ``ruler export``'s shapes checked against the peers' own schemas (the keys and
types their source writes: tests/fixtures/peers/, each naming the file and commit it is from).

Every figure is checked against the rows' receipts, recomputed here from the request records by
each tool's own definitions."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.commands.cli import main
from engine.record.receipts import read_rep
from engine.report.export import RESULTS_JSON
from tests.component.fakes import Behaviour
from tests.component.helpers import run_with
from tests.paths import FIXTURES

pytestmark = pytest.mark.timeout(120)

PEERS = FIXTURES / "peers"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One run of the fake to its end, headless: its directory and what it printed."""
    tmp = tmp_path_factory.mktemp("summary")
    monkeypatch = pytest.MonkeyPatch()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            run, code = run_with(tmp, Behaviour(), monkeypatch, echo=True)
    finally:
        monkeypatch.undo()
    assert code == 0
    return run, out.getvalue()


def label(r: dict[str, str]) -> str:
    return f"{r['session']}-{r['window']}/{r['class']}/C{r['concurrency']}"


def records(run: Path, source: str) -> list[dict[str, Any]]:
    return [dict(r) for p in source.split(";") for r in read_rep(run / p)[1]]


def test_the_run_ends_with_its_summary_table_once_and_results_json(finished: tuple[Path, str]) -> None:
    run, printed = finished
    lines = printed.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("=") and "failing: finished" in line]
    assert len(heads) == 1, printed[-3000:]  # once, after the last progress line
    assert "run finished" in lines[heads[0] - 1]
    table = lines[heads[0] + 1:]
    assert table[0].split()[:6] == ["row", "status", "tok/s", "user", "req/s", "fail"]
    doc = json.loads((run / RESULTS_JSON).read_text())
    assert lines[-1] == f"results: {run / RESULTS_JSON}"
    with (run / "throughput.csv").open(newline="") as f:
        rows = {label(r): r for r in csv.DictReader(f)}
    assert [r["row"] for r in doc["rows"]] == list(rows)
    for r in doc["rows"]:
        csv_row = rows[r["row"]]
        # One definition: the headline and per user are throughput.csv's, per user = tok/s over C.
        assert r["tok_s"] == float(csv_row["agg_tok_s"]) and r["basis"] == csv_row["basis"]
        assert r["per_user_tok_s"] == pytest.approx(r["tok_s"] / int(csv_row["concurrency"]), abs=1e-3)
        recs = [x for x in records(run, csv_row["source"]) if not x.get("error")]
        e2el = [(x["end"] - x["start"]) * 1000 for x in recs]
        assert r["e2el_ms"]["mean"] == pytest.approx(statistics.fmean(e2el), abs=0.01)
        assert r["e2el_ms"]["p99"] == pytest.approx(float(np.percentile(e2el, 99)), abs=0.01)
        # throughput.csv's new columns are the same figures.
        assert float(csv_row["e2el_p99"]) == r["e2el_ms"]["p99"]
        assert float(csv_row["ttft_mean"]) == r["ttft_ms"]["mean"]
        # The table's line for the row: its tok/s and E2EL mean / p50 / p99.
        line = next(x for x in table if x.startswith(r["row"] + " "))
        assert f"{r['tok_s']:.1f}" in line.split()
        assert " / ".join(f"{r['e2el_ms'][k]:.1f}" for k in ("mean", "median", "p99")) in line


def _type_ok(value: Any, kind: str) -> bool:
    ok = {"str": isinstance(value, str), "int": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, int | float) and not isinstance(value, bool),
          "null": value is None, "inf": value == "inf", "list": isinstance(value, list),
          "object": isinstance(value, dict)}
    return any(ok[k.split(" ")[0]] for k in kind.split("|"))


def test_vllm_bench_export_has_the_keys_and_types_vllm_writes(finished: tuple[Path, str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = finished
    assert main(["export", str(run), "--format", "vllm-bench"]) == 0
    said = capsys.readouterr().out.splitlines()
    schema = json.loads((PEERS / "vllm-bench-serve.json").read_text())
    files = sorted((run / "export" / "vllm-bench").glob("*.json"))
    assert len(files) == len(said) == 2  # a file per row: control and ctx at C2
    for path in files:
        got = json.loads(path.read_text())
        for key, kind in {**schema["setup"], **schema["result"]}.items():
            assert key in got and _type_ok(got[key], kind), (path.name, key, got.get(key))
        for m in schema["metrics"]:
            for pattern in schema["metric_keys"]:
                assert isinstance(got[pattern.format(m=m)], float), (path.name, pattern, m)
        assert got["max_concurrency"] == 2 and got["request_rate"] == "inf"
        # vLLM's definitions over the row's reps: its output throughput is the tokens over the
        # reps' summed wall time; its TPOT excludes the first token.
        csv_row = next(r for r in csv.DictReader((run / "throughput.csv").open())
                       if got["ruler_row"] == label(r))
        recs = records(run, csv_row["source"])
        walls = [max(x["end"] for x in recs[i:i + 2]) - min(x["start"] for x in recs[i:i + 2])
                 for i in range(0, len(recs), 2)]  # the fake's reps: two requests each
        tokens = sum(x["completion_tokens"] for x in recs)
        assert got["total_output_tokens"] == tokens
        assert got["output_throughput"] == pytest.approx(tokens / sum(walls), rel=1e-3)
        tpots = [(x["end"] - x["first_token"]) * 1000 / (x["completion_tokens"] - 1) for x in recs]
        assert got["mean_tpot_ms"] == pytest.approx(statistics.fmean(tpots), abs=0.01)
        assert got["ruler_tok_s"] == float(csv_row["agg_tok_s"])


def test_guidellm_export_has_guidellms_report_shape(finished: tuple[Path, str]) -> None:
    run, _ = finished
    assert main(["export", str(run), "--format", "guidellm"]) == 0
    schema = json.loads((PEERS / "guidellm-report.json").read_text())
    got = json.loads((run / "export" / "benchmarks.json").read_text())
    assert sorted(got) == sorted(schema["report"])
    assert got["metadata"]["version"] == schema["metadata_version"]
    assert len(got["benchmarks"]) == 2
    for b in got["benchmarks"]:
        assert b["type_"] == schema["benchmark_type"]
        strategy = b["config"]["strategy"]
        assert strategy == {"type_": "concurrent", "streams": 2}
        assert sorted(b["metrics"]["request_totals"]) == sorted(schema["status_breakdown"])
        for name in schema["metrics"]:
            summary = b["metrics"][name]
            assert sorted(summary) == sorted(schema["status_breakdown"]), name
            for status in schema["status_breakdown"]:
                d = summary[status]
                for key, kind in schema["distribution_summary"].items():
                    assert key in d and _type_ok(d[key], kind), (name, status, key)
                assert sorted(d["percentiles"]) == sorted(schema["percentiles"])
        # GuideLLM's TPOT counts the first token, weighted by each request's tokens.
        csv_row = next(r for r in csv.DictReader((run / "throughput.csv").open())
                       if b["config"]["ruler_row"].startswith(f"{r['session']}-{r['window']}/"))
        recs = records(run, csv_row["source"])
        per = [((x["end"] - x["start"]) * 1000 / x["completion_tokens"], x["completion_tokens"])
               for x in recs]
        mean = sum(v * w for v, w in per) / sum(w for _, w in per)
        assert b["metrics"]["time_per_output_token_ms"]["successful"]["mean"] == pytest.approx(mean)
        assert b["metrics"]["request_totals"]["successful"] == len(recs)


def test_csv_export_is_the_summary_with_vllms_names(finished: tuple[Path, str]) -> None:
    run, _ = finished
    assert main(["export", str(run), "--format", "csv"]) == 0
    with (run / "export" / "summary.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    doc = json.loads((run / RESULTS_JSON).read_text())
    assert [r["row"] for r in rows] == [r["row"] for r in doc["rows"]]
    for line, r in zip(rows, doc["rows"], strict=True):
        for m in ("ttft", "itl", "tpot", "e2el"):
            assert float(line[f"mean_{m}_ms"]) == pytest.approx(r[f"{m}_ms"]["mean"])
            assert float(line[f"p99_{m}_ms"]) == pytest.approx(r[f"{m}_ms"]["p99"])
        assert float(line["tok_s"]) == r["tok_s"]


def test_export_of_a_directory_that_is_no_run_says_so(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path), "--format", "csv"]) == 2
    assert "throughput.csv" in capsys.readouterr().err
