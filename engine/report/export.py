"""A run's results as its reader expects them at the end of a run, and in the shapes other tools'
users read: the summary table the run prints last (as ``vllm bench serve`` prints its own),
``results.json`` (the whole run in one file), and ``ruler export RUN_DIR --format``:

- ``vllm-bench``: one JSON per row in the shape of ``vllm bench serve --save-result``
  (vllm/benchmarks/serve.py: the setup keys, then the metrics it writes, ``mean_/median_/std_/
  p99_<metric>_ms`` for ttft, tpot, itl and e2el, and the speculative-decoding keys); ruler's own
  figures ride along as top-level keys, as ``--metadata KEY=VALUE`` puts them there;
- ``guidellm``: ``benchmarks.json`` in the shape of GuideLLM's report (guidellm/benchmark/schemas:
  ``metadata``, then per row a ``generative_benchmark`` whose ``metrics`` are status distribution
  summaries, each ``successful / incomplete / errored / total`` with mean, median, percentiles...);
- ``csv``: ``summary.csv``, the summary table with vLLM's metric names as columns (what a
  notebook reads).

Each latency is computed from the rows' request records (their receipts, every rep pooled) with
the definitions of the tool whose shape it is in: vLLM's are ruler's own (engine.method.stats:
TTFT, TPOT after the first token, ITL every gap between chunks, E2EL from the send to the last
byte); GuideLLM's TPOT counts the first token and its ITL is a request's mean gap after it, each
weighted by its tokens, as GuideLLM's own schema computes them. Rates over a row are its reps'
totals over their summed wall time (vLLM's ``duration``); ruler's headline tok/s (the median rep,
on its basis) is beside them, named.
"""

from __future__ import annotations

import io
import math
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine import __version__, files
from engine.method import acceptance, stats
from engine.record import results
from engine.record.receipts import ReceiptError, read_rep, source_paths
from engine.report.run import ReportError, Row, RunView, load_run
from engine.sanitize import csv_document, terminal
from engine.words import load_text

RESULTS_JSON = "results.json"
EXPORT = "export"  # the folder ``ruler export`` writes into, in the run directory
FORMATS = ("vllm-bench", "guidellm", "csv", "json")
SUMMARY_CSV = "summary.csv"
GUIDELLM_FILE = "benchmarks.json"
GUIDELLM_PERCENTILES = {"p001": 0.1, "p01": 1.0, "p05": 5.0, "p10": 10.0, "p25": 25.0, "p50": 50.0,
                        "p75": 75.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


@dataclass(frozen=True)
class Requests:
    """A row's reps as their receipts hold them: every finished and failed request, and the
    reps' wall time summed (a rep: from its first send to its last byte)."""

    records: list[dict[str, Any]]
    duration: float
    reps: int

    @property
    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.records if not r.get("error")]

    @property
    def failed(self) -> int:
        return len(self.records) - len(self.ok)


def row_requests(run_dir: Path, row: Row) -> Requests:
    """The request records of a row's reps (a rep voided before it ran has none); a receipt that
    is missing or damaged counts as none (the report names it)."""
    records: list[dict[str, Any]] = []
    duration, reps = 0.0, 0
    try:
        paths = source_paths(run_dir, row.source)
    except ReceiptError:
        paths = []
    for path in paths:
        try:
            header, recs = read_rep(path)
        except (ReceiptError, OSError):
            continue
        if header.get("void") or not recs:
            continue
        reps += 1
        mine: list[dict[str, Any]] = [dict(r) for r in recs]
        records += mine
        duration += max(float(r["end"]) for r in mine) - min(float(r["start"]) for r in mine)
    return Requests(records, duration, reps)


def _tokens(r: Mapping[str, Any], key: str) -> int:
    return int(r.get(key) or 0)


def _rate(n: float, duration: float) -> float | None:
    return round(n / duration, 4) if duration > 0 else None


# ------------------------------------------------------------------ ruler's own: results.json


def row_result(view: RunView, row: Row, req: Requests) -> dict[str, Any]:
    """One row as results.json holds it: ruler's figures as throughput.csv has them (its headline
    tok/s the median rep on its basis, per user that over C), and every latency's mean, median,
    std and p90/p99 over its requests (engine.method.stats.latency_summary)."""
    series = stats.latency_series(req.records)
    return {
        "row": row.label(), "session": row.session, "window": row.window, "axis": row.axis,
        "class": row.cls, "concurrency": row.concurrency, "rate": row.rate, "load": row.load,
        "status": row.status, "reason": row.reason, "reps": row.reps, "attempts": row.attempts,
        "basis": row.basis or stats.WHOLE, "tok_s": row.agg_tok_s, "per_user_tok_s": row.per_user_tok_s,
        "rep_tok_s": row.rep_tok_s, "spread": row.spread, "requests": len(req.records),
        "failed": req.failed, "duration_s": round(req.duration, 3),
        "output_tokens": sum(_tokens(r, "completion_tokens") for r in req.ok),
        "input_tokens": sum(_tokens(r, "prompt_tokens") for r in req.ok),
        "request_throughput": _rate(len(req.ok), req.duration), "achieved_rps": row.achieved_rps,
        "goodput_rps": row.goodput_rps,
        **{f"{name}_ms": stats.latency_summary(values) for name, values in series.items()},
        "acceptance": {"length": row.accept_len, "rate": row.accept_rate,
                       "per_position": row.curve, "source": row.accept_source,
                       "kind": row.acceptance or acceptance.NATURAL}
        if row.accept_len is not None or acceptance.is_simulated(row.as_json()) else None,
        "delta": row.delta, "delta_lo": row.delta_lo, "delta_hi": row.delta_hi,
        "verdict": row.verdict, "verdict_why": row.verdict_why, "receipts": row.source.split(";")
        if row.source else [],
    }


def results_document(view: RunView, reqs: Mapping[str, Requests]) -> dict[str, Any]:
    """results.json: the run, its windows' calls and every row, in one file."""
    st = view.state
    return {
        "ruler_version": __version__, "run": st.run or view.name, "campaign": st.campaign,
        "server": st.server, "runtime": st.runtime, "status": st.status,
        "started": st.started_ts, "finished": st.finished_ts,
        "definitions": {
            "tok_s": "the median of the reps' tok/s, each over its steady window when basis is "
                     "steady, else over the whole rep",
            "per_user_tok_s": "tok_s over the row's C workers (open loop: its mean requests in "
                              "flight)",
            "latency": "ms over every rep's finished requests: TTFT, TPOT after the first token, "
                       "ITL every gap between two chunks that carried text, E2EL from the send "
                       "to the last byte (vLLM bench serve's definitions)",
            "spread": "(max - min) / mean of the reps' tok/s, on the basis",
        },
        "windows": [{"window": f"{w.session}-{w.window}", "axis": w.axis, "status": w.status,
                     "checks": {c: v.get("verdict") for c, v in w.verdicts.items()}}
                    for w in view.windows()],
        "rows": [row_result(view, r, reqs[r.label()]) for r in view.rows],
    }


# ------------------------------------------------------------------ the summary table


COLUMNS = ("row", "status", "tok/s", "user", "req/s", "fail", "TTFT ms", "ITL ms", "TPOT ms",
           "E2EL ms", "Δ", "call")


def _ms(summary: Mapping[str, float | None]) -> str:
    """mean / p50 / p99 of one latency."""
    if summary["mean"] is None:
        return "-"
    return " / ".join(f"{summary[k]:.1f}" for k in ("mean", "median", "p99"))


def _num(v: float | None, spec: str) -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def summary_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    out = []
    for r in doc["rows"]:
        delta = _num(r["delta"] * 100 if r["delta"] is not None else None, "+.1f")
        out.append([r["row"], r["status"], _num(r["tok_s"], ".1f"), _num(r["per_user_tok_s"], ".1f"),
                    _num(r["request_throughput"], ".2f"), f"{r['failed']}/{r['requests']}",
                    *(_ms(r[f"{n}_ms"]) for n in stats.LATENCIES),
                    f"{delta} %" if delta != "-" else "-", r["verdict"] or "-"])
    return out


def summary_table(doc: Mapping[str, Any]) -> list[str]:
    """The summary a run prints last: a line per row, its figures and latencies (mean / p50 /
    p99 ms) and its call against the control; then where the files are."""
    rows = summary_rows(doc)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
    title = f" {doc['campaign']}: {doc['status']} "
    line = "  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip()
    out = [title.center(len(line), "="), line, "-" * len(line)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out += ["-" * len(line),
            "tok/s: the median rep (on its basis); user: tok/s over C; latencies: mean / p50 / p99 "
            "over every rep's requests; Δ: against the session's control boots, with its call"]
    return out


# ------------------------------------------------------------------ vLLM bench serve's shape


def _vllm_metric(name: str, values: Sequence[float]) -> dict[str, float]:
    """``mean_/median_/std_/p90_/p99_<name>_ms``, as vllm bench serve writes them (its default
    percentile is 99; 90 is what ``--metric-percentiles 90,99`` adds)."""
    s = stats.latency_summary(values)
    # vLLM writes 0 where nothing was measured (np.mean of [0]).
    return {f"{k}_{name}_ms": v or 0.0 for k, v in (
        ("mean", s["mean"]), ("median", s["median"]), ("std", s["std"]), ("p90", s["p90"]),
        ("p99", s["p99"]))}


def burstiness(view: RunView) -> float:
    return view.campaign.workload.burstiness if view.campaign is not None else 1.0


def model_of(view: RunView, row: Row) -> str:
    ws = view.state.windows.get(f"{row.session}-{row.window}")
    facts = ws.facts if ws else {}
    return str(facts.get("model.name") or facts.get("server.model") or facts.get("model.path") or "")


def vllm_bench(view: RunView, row: Row, req: Requests) -> dict[str, Any]:
    """One row as ``vllm bench serve --save-result`` writes one benchmark."""
    ok = req.ok
    out_tokens = sum(_tokens(r, "completion_tokens") for r in ok)
    in_tokens = sum(_tokens(r, "prompt_tokens") for r in ok)
    series = stats.latency_series(req.records)
    model = model_of(view, row)
    started = view.state.started_ts or time.time()
    result: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.localtime(started)),
        "endpoint_type": "openai-chat", "backend": "openai-chat",
        "label": f"ruler-{row.session}-{row.window}", "model_id": model, "tokenizer_id": model,
        "num_prompts": len(req.records),
        "request_rate": row.rate if row.rate else "inf", "burstiness": burstiness(view),
        "max_concurrency": row.concurrency or None,
        "duration": round(req.duration, 6), "completed": len(ok), "failed": req.failed,
        "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": _rate(len(ok), req.duration) or 0.0,
        "request_goodput": row.goodput_rps,
        "output_throughput": _rate(out_tokens, req.duration) or 0.0,
        "total_token_throughput": _rate(in_tokens + out_tokens, req.duration) or 0.0,
        **{k: v for name in ("ttft", "tpot", "itl", "e2el")
           for k, v in _vllm_metric(name, series[name]).items()},
    }
    if row.accept_len is not None and row.accept_rate is not None:
        result |= {"spec_decode_acceptance_rate": round(row.accept_rate * 100, 4),
                   "spec_decode_acceptance_length": row.accept_len,
                   "spec_decode_per_position_acceptance_rates": row.curve}
    # What --metadata KEY=VALUE adds, at the top level: ruler's row and its own figures.
    result |= {"ruler_run": view.state.run or view.name, "ruler_row": row.label(),
               "ruler_status": row.status, "ruler_reps": row.reps, "ruler_basis": row.basis or stats.WHOLE,
               "ruler_tok_s": row.agg_tok_s, "ruler_per_user_tok_s": row.per_user_tok_s,
               "ruler_delta": row.delta, "ruler_verdict": row.verdict,
               # natural, or simulated (how): the spec_decode_* figures were then set, not measured
               "ruler_acceptance": row.acceptance}
    return result


# ------------------------------------------------------------------ GuideLLM's shape


def distribution(values: Sequence[float], weights: Sequence[float] | None = None) -> dict[str, Any]:
    """A GuideLLM DistributionSummary (guidellm/schemas/statistics.py): mean, median, mode,
    variance, std_dev, min, max, count, total_sum and its eleven percentiles; a value weighted
    (TPOT and ITL by their tokens, as GuideLLM weighs them) counts as its weight."""
    if not values:
        zero = {"mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "std_dev": 0.0,
                "min": 0.0, "max": 0.0, "count": 0, "total_sum": 0.0}
        return {**zero, "percentiles": dict.fromkeys(GUIDELLM_PERCENTILES, 0.0), "pdf": None}
    v = np.asarray(values, dtype=float)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    total = float(w.sum())
    mean = float((v * w).sum() / total) if total > 0 else 0.0
    variance = float((w * (v - mean) ** 2).sum() / total) if total > 0 else 0.0
    cum = np.cumsum(w) / total if total > 0 else np.linspace(0, 1, len(v))

    def at(q: float) -> float:
        return float(v[min(int(np.searchsorted(cum, q / 100, side="left")), len(v) - 1)])

    counts: dict[float, float] = {}
    for x, wx in zip(v.tolist(), w.tolist(), strict=True):
        counts[x] = counts.get(x, 0.0) + wx
    return {"mean": mean, "median": at(50.0), "mode": max(counts, key=lambda x: counts[x]),
            "variance": variance, "std_dev": math.sqrt(variance), "min": float(v[0]),
            "max": float(v[-1]), "count": len(values), "total_sum": float((v * w).sum()),
            "percentiles": {k: at(q) for k, q in GUIDELLM_PERCENTILES.items()}, "pdf": None}


def status_distribution(ok: Sequence[float], errored: Sequence[float] = (),
                        weights: tuple[Sequence[float], Sequence[float]] | None = None) -> dict[str, Any]:
    """A GuideLLM StatusDistributionSummary: successful, incomplete (none: ruler lets every
    request end), errored and total."""
    w_ok, w_err = weights if weights is not None else (None, None)
    both = list(ok) + list(errored)
    w_both = None if weights is None else list(w_ok or []) + list(w_err or [])
    return {"successful": distribution(ok, w_ok), "incomplete": distribution([]),
            "errored": distribution(errored, w_err), "total": distribution(both, w_both)}


def _guidellm_per_request(r: Mapping[str, Any]) -> dict[str, float | None]:
    """A request's figures by GuideLLM's definitions (guidellm/schemas/request_stats.py)."""
    n = _tokens(r, "completion_tokens")
    start, end, first = float(r["start"]), float(r["end"]), r.get("first_token")
    return {"latency_s": end - start,
            "ttft_ms": (float(first) - start) * 1000 if first else None,
            "tpot_ms": (end - start) * 1000 / n if n else None,  # the first token counted
            "itl_ms": (end - float(first)) * 1000 / (n - 1) if first and n > 1 else None}


def guidellm_benchmark(view: RunView, row: Row, req: Requests) -> dict[str, Any]:
    """One row as a GuideLLM ``generative_benchmark``: its strategy and its metrics."""
    per = {"ok": [(r, _guidellm_per_request(r)) for r in req.ok],
           "errored": [(r, _guidellm_per_request(r)) for r in req.records if r.get("error")]}

    def values(key: str, side: str) -> list[float]:
        return [v for _, f in per[side] if (v := f[key]) is not None]

    def tokens(key: str, side: str) -> list[float]:
        return [float(_tokens(r, key)) for r, _ in per[side]]

    def weighted(key: str, less: int) -> dict[str, Any]:
        pairs = {side: [(v, float(_tokens(r, "completion_tokens") - less))
                        for r, f in per[side] if (v := f[key]) is not None] for side in per}
        return status_distribution([v for v, _ in pairs["ok"]], [v for v, _ in pairs["errored"]],
                                   ([w for _, w in pairs["ok"]], [w for _, w in pairs["errored"]]))

    starts = [float(r["start"]) for r in req.records]
    ends = [float(r["end"]) for r in req.records]
    out_tokens = sum(tokens("completion_tokens", "ok"))
    # An open-loop row's arrivals are a seeded gamma process: Poisson at burstiness 1.
    strategy = ({"type_": "concurrent", "streams": row.concurrency} if row.concurrency and not row.rate
                else {"type_": "poisson" if burstiness(view) == 1.0 else "constant", "rate": row.rate})
    return {
        "type_": "generative_benchmark",
        "config": {"strategy": strategy, "ruler_row": row.label(), "ruler_axis": row.axis},
        "start_time": min(starts, default=0.0), "end_time": max(ends, default=0.0),
        "duration": round(req.duration, 6),
        "metrics": {
            "request_totals": {"successful": len(per["ok"]), "incomplete": 0,
                               "errored": len(per["errored"]), "total": len(req.records)},
            # Rates over the row: each rep's count over its wall time is one value.
            "requests_per_second": status_distribution(
                [v for v in [_rate(len(req.ok), req.duration)] if v is not None]),
            "output_tokens_per_second": status_distribution(
                [v for v in [_rate(out_tokens, req.duration)] if v is not None]),
            "request_latency": status_distribution(values("latency_s", "ok"),
                                                   values("latency_s", "errored")),
            "prompt_token_count": status_distribution(tokens("prompt_tokens", "ok"),
                                                      tokens("prompt_tokens", "errored")),
            "output_token_count": status_distribution(tokens("completion_tokens", "ok"),
                                                      tokens("completion_tokens", "errored")),
            "total_token_count": status_distribution(
                [a + b for a, b in zip(tokens("prompt_tokens", "ok"), tokens("completion_tokens", "ok"),
                                       strict=True)]),
            "time_to_first_token_ms": status_distribution(values("ttft_ms", "ok"),
                                                          values("ttft_ms", "errored")),
            "time_per_output_token_ms": weighted("tpot_ms", 0),
            "inter_token_latency_ms": weighted("itl_ms", 1),
        },
        "ruler": {"status": row.status, "reps": row.reps, "basis": row.basis or stats.WHOLE,
                  "tok_s": row.agg_tok_s, "per_user_tok_s": row.per_user_tok_s,
                  "delta": row.delta, "verdict": row.verdict, "acceptance": row.acceptance,
                  "rates": "requests and output tokens a second over the row's reps: their totals "
                           "over their summed wall time (one value)"},
    }


def guidellm_report(view: RunView, reqs: Mapping[str, Requests]) -> dict[str, Any]:
    """GuideLLM's ``benchmarks.json``: its report's metadata, then a benchmark per row."""
    return {"metadata": {"version": 2, "ruler_version": __version__,
                         "python_version": platform.python_version(), "platform": platform.platform()},
            "benchmarks": [guidellm_benchmark(view, r, reqs[r.label()]) for r in view.rows]}


# ------------------------------------------------------------------ the files


def requests_of(view: RunView) -> dict[str, Requests]:
    return {r.label(): row_requests(view.dir, r) for r in view.rows}


def write_results(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """results.json of a run, from its journal, throughput.csv and receipts."""
    view = load_run(run_dir)
    doc = results_document(view, requests_of(view))
    path = view.dir / RESULTS_JSON
    results.write_json(path, doc)
    return path, doc


def summary_csv(doc: Mapping[str, Any]) -> str:
    """The summary as a flat CSV, one line per row, vLLM's metric names as columns."""
    names = [f"{k}_{n}_ms" for n in stats.LATENCIES for k in ("mean", "median", "std", "p90", "p99")]
    columns = ["row", "session", "window", "axis", "class", "load", "status", "reps", "basis", "tok_s",
               "per_user_tok_s", "spread", "requests", "failed", "duration_s", "request_throughput",
               "output_tokens", *names, "delta", "delta_lo", "delta_hi", "verdict"]
    lines = []
    for r in doc["rows"]:
        flat = {k: r.get(k) for k in columns}
        for n in stats.LATENCIES:
            s = r[f"{n}_ms"]
            flat |= {f"{k}_{n}_ms": s["median" if k == "median" else k] for k in
                     ("mean", "median", "std", "p90", "p99")}
        lines.append(flat)
    return csv_document(columns, lines)


def export(run_dir: Path, fmt: str) -> list[Path]:
    """Write the run's results in ``fmt`` under ``RUN_DIR/export/``: the paths written."""
    if fmt == "json":  # beside the journal, where the run's end wrote it
        return [write_results(Path(run_dir))[0]]
    view = load_run(run_dir)
    reqs = requests_of(view)
    folder = files.make_dir(view.dir / EXPORT, results.DIR_MODE)
    if fmt == "csv":
        path = folder / SUMMARY_CSV
        results.write_atomic(path, summary_csv(results_document(view, reqs)))
        return [path]
    if fmt == "guidellm":
        path = folder / GUIDELLM_FILE
        results.write_json(path, guidellm_report(view, reqs))
        return [path]
    files.make_dir(folder / "vllm-bench", results.DIR_MODE)
    out = []
    for row in view.rows:
        name = f"{row.session}-{row.window}-{row.cls}-{load_text(row.concurrency, row.rate)}"
        path = folder / "vllm-bench" / (name.replace(" ", "").replace("/", "_") + ".json")
        results.write_json(path, vllm_bench(view, row, reqs[row.label()]))
        out.append(path)
    return out


def cmd_export(run_dir: str, fmt: str) -> int:
    try:
        paths = export(Path(run_dir), fmt)
    except ReportError as e:
        print(terminal(e), file=sys.stderr)
        return 2
    for p in paths:
        print(f"{fmt}: {p}")
    return 0


def summary_text(doc: Mapping[str, Any]) -> str:
    """The summary table as one text for a terminal (a row's words are inert there)."""
    buf = io.StringIO()
    for line in summary_table(doc):
        buf.write(terminal(line) + "\n")
    return buf.getvalue()


__all__ = ["EXPORT", "FORMATS", "RESULTS_JSON", "cmd_export", "export", "guidellm_report",
           "results_document", "summary_table", "summary_text", "vllm_bench", "write_results"]
