"""Deltas against a reference row and the report's number formats and markdown tables."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.method.delta import METHOD, Interval, observable, pair_delta
from engine.method.delta import text as delta_text
from engine.record.figures import FIGURES
from engine.report.run import Row, RunView
from engine.words import load_text


@dataclass(frozen=True)
class Delta:
    """(row - reference) / reference from their reps, with its interval and the noise floor it
    is judged against (engine.method.delta: the one rule of the report, the no-effect check and
    compare)."""

    value: float | None
    lo: float | None = None
    hi: float | None = None
    floor: float = 0.0  # the noise a difference must exceed: declared, and drift across sessions
    why: str = ""  # why there is no value

    @property
    def interval(self) -> Interval | None:
        return None if self.value is None else Interval(self.value, self.lo, self.hi)

    @property
    def inside(self) -> bool:
        """Within the noise: the interval holds 0, or the delta is no larger than the floor."""
        iv = self.interval
        return iv is not None and not observable(iv, self.floor)

    def text(self) -> str:
        if self.value is None:
            return f"n/a ({self.why})"
        return delta_text(self.interval, self.floor)

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "floor": self.floor,
                "method": METHOD, "inside": self.inside, "why": self.why or None}


def delta(row: Row | None, ref: Row | None, floor: float = 0.0) -> Delta:
    """The row against ``ref`` from their reps' tok/s; ``floor``: the noise it must exceed."""
    if row is None:
        return Delta(None, why="no row")
    if ref is None:
        return Delta(None, why="no reference row")
    if not row.usable:
        return Delta(None, why=row.status or "no figure")
    if not ref.usable:
        return Delta(None, why=f"reference {ref.status or 'has no figure'}")
    # Rows that took reps to a precision: Stein's interval on their first stages' variance.
    stage = min(row.stage_reps, ref.stage_reps) if row.stage_reps and ref.stage_reps else None
    iv = pair_delta(tuple(row.rep_tok_s), tuple(ref.rep_tok_s), stage)
    if iv is None:
        return Delta(None, why="no reps")
    iv = iv.rounded()
    return Delta(iv.delta, iv.lo, iv.hi, floor)


def declared_noise(view: RunView) -> float:
    """The campaign's declared noise (``leak.spread``): the floor of every delta in the run."""
    return view.campaign.leak.spread if view.campaign is not None else 0.0


def tok(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def fixed(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def cell(row: Row, name: str) -> str:
    """A figure of the row as the report's tables show it (its declaration's format)."""
    return FIGURES[name].text(getattr(row, name))


def head(name: str) -> str:
    """A figure's column header in the report's tables."""
    return FIGURES[name].header


def reps_text(row: Row) -> str:
    return ", ".join(tok(v) for v in row.rep_tok_s) or "-"


def cache_text(row: Row | None) -> str:
    """The prefix cache a row measured: the policy and the share of prompt tokens served from it."""
    if row is None or not row.cache:
        return "-"
    if row.cache_hit is None:
        return f"{row.cache}, hits not reported"
    return f"{row.cache}, {cell(row, 'cache_hit')} hit"


def load_cell(row: Row) -> str | int:
    """The load column: a closed-loop row's concurrency, an open-loop row's rate, a trace's word."""
    return row.concurrency if row.concurrency and not row.rate else load_text(row.concurrency, row.rate)


def triple(row: Row, name: str) -> str:
    """p50 / p90 / p99 of one latency, ms."""
    names = [f"{name}_p{p}" for p in (50, 90, 99)]
    return "-" if all(getattr(row, n) is None for n in names) else " / ".join(
        cell(row, n) for n in names)


def latency_table(rows: Iterable[Row], slo: str) -> list[str]:
    """Latency percentiles (every rep's requests pooled), achieved request rate and goodput."""
    rows = list(rows)
    if not rows:
        return []
    return [f"Latency (ms, p50 / p90 / p99, the reps' requests pooled), requests per second "
            f"finished and, of them, within the SLOs ({slo}):", ""] + table(
        ["class", "C", head("ttft_p50"), head("itl_p50"), head("tpot_p50"), head("achieved_rps"),
         head("goodput_rps"), "status"],
        [[r.cls, load_cell(r), triple(r, "ttft"), triple(r, "itl"), triple(r, "tpot"),
          cell(r, "achieved_rps"), cell(r, "goodput_rps"), r.status] for r in rows])


def slo_text(view: RunView) -> str:
    slo = view.campaign.workload.slo.text() if view.campaign is not None else ""
    return slo or "none set: no goodput"


def acceptance_text(row: Row) -> str:
    if row.accept_len is None and row.accept_rate is None:
        return "-"
    return f"{cell(row, 'accept_len')} / {cell(row, 'accept_rate')}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(cell(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return out + [""]


def link(view: RunView, rel: str | None, text: str | None = None) -> str:
    """A receipt link relative to report.md, only when the file is there."""
    if not rel or not (view.dir / rel).exists():
        return ""
    return f"[{text or Path(rel).name}]({rel})"


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

