"""Deltas against a reference row and the report's number formats and markdown tables."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.report.run import Row, RunView


@dataclass(frozen=True)
class Delta:
    """(window - control) / control, with the noise it is judged against."""

    value: float | None
    tolerance: float | None = None  # the larger of the two rows' spreads
    why: str = ""  # why there is no value

    @property
    def inside(self) -> bool:
        return self.value is not None and abs(self.value) <= (self.tolerance or 0.0)

    def text(self) -> str:
        if self.value is None:
            return f"n/a ({self.why})"
        return f"{self.value * 100:+.1f} %" + (" (inside spread)" if self.inside else "")

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "tolerance": self.tolerance, "inside": self.inside,
                "why": self.why or None}


def delta(row: Row | None, ref: Row | None, attr: str = "agg_tok_s") -> Delta:
    """The same rule as the no-effect check: inside when |delta| <= the larger spread."""
    if row is None:
        return Delta(None, why="no row")
    if ref is None:
        return Delta(None, why="no reference row")
    if not row.usable:
        return Delta(None, why=row.status or "no figure")
    if not ref.usable:
        return Delta(None, why=f"reference {ref.status or 'has no figure'}")
    a, b = getattr(row, attr), getattr(ref, attr)
    if a is None or not b:
        return Delta(None, why=f"no {attr}")
    return Delta((a - b) / b, max(row.spread or 0.0, ref.spread or 0.0))


def tok(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def fixed(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def reps_text(row: Row) -> str:
    return ", ".join(tok(v) for v in row.rep_tok_s) or "-"


def cache_text(row: Row | None) -> str:
    """The prefix cache a row measured: the policy and the share of prompt tokens served from it."""
    if row is None or not row.cache:
        return "-"
    if row.cache_hit is None:
        return f"{row.cache}, hits not reported"
    return f"{row.cache}, {pct(row.cache_hit)} hit"


def acceptance_text(row: Row) -> str:
    if row.accept_len is None and row.accept_rate is None:
        return "-"
    return f"{fixed(row.accept_len, 2)} / {fixed(row.accept_rate, 3)}"


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

