"""A probe of a capacity search judged against its criteria, rep by rep, from the requests' records
(engine.method.capacity has the search and the words: a rep holds, a probe holds, fails or is mixed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.method.capacity import ProbeResult
from engine.method.stats import Slo, meets, tpot_ms, ttft_ms


@dataclass(frozen=True)
class Criteria:
    """What must hold per rep: ``limits`` {"ttft_p99_ms": 500, ...} (metric_pNN_ms, at most), and
    ``goodput`` (a share of the rep's requests within ``slo``, at least)."""

    limits: Mapping[str, float] = field(default_factory=dict)
    goodput: float | None = None
    slo: Slo = Slo()

    def text(self) -> str:
        parts = [f"{k.split('_')[0].upper()} {k.split('_')[1]} <= {v:g} ms" for k, v in self.limits.items()]
        if self.goodput is not None:
            within = ", ".join(([f"TTFT <= {self.slo.ttft_ms:g} ms"] if self.slo.ttft_ms else [])
                               + ([f"TPOT <= {self.slo.tpot_ms:g} ms"] if self.slo.tpot_ms else []))
            parts.append(f"goodput >= {self.goodput:.0%} of requests (within {within or 'no SLO'})")
        return " and ".join(parts)


SERIES = ("ttft", "tpot", "itl")
PERCENTILES = ("p50", "p90", "p99")
LIMIT_KEYS = tuple(f"{s}_{p}_ms" for s in SERIES for p in PERCENTILES)


def rep_figures(records: Sequence[Mapping[str, Any]], criteria: Criteria) -> dict[str, Any]:
    """One rep against the criteria: each figure asked, and whether the rep holds."""
    ok = [r for r in records if not r.get("error")]
    series = {"ttft": [t for r in ok if (t := ttft_ms(r)) is not None],
              "tpot": [t for r in ok if (t := tpot_ms(r)) is not None],
              "itl": [g for r in ok for g in r.get("gaps_ms") or ()]}
    out: dict[str, Any] = {"requests": len(records), "failed": len(records) - len(ok)}
    holds = bool(records) and len(ok) == len(records)
    for key, limit in criteria.limits.items():
        name, pct = key.split("_")[:2]
        values = series[name]
        # TPOT of one-token replies does not exist; a series with no value cannot be said to hold.
        figure = float(np.percentile(values, int(pct[1:]))) if values else None
        out[key] = None if figure is None else round(figure, 2)
        holds = holds and figure is not None and figure <= limit
    if criteria.goodput is not None:
        share = sum(meets(r, criteria.slo) for r in ok) / len(records) if records else 0.0
        out["goodput_share"] = round(share, 4)
        holds = holds and share >= criteria.goodput
    out["holds"] = holds
    return out


def judge(reps: Sequence[Mapping[str, Any]]) -> ProbeResult:
    """A probe from its reps' :func:`rep_figures`: unanimous, or mixed."""
    if not reps:
        return ProbeResult.VOID
    held = sum(bool(r["holds"]) for r in reps)
    return ProbeResult.HOLDS if held == len(reps) else ProbeResult.FAILS if held == 0 else ProbeResult.MIXED
