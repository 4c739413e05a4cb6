"""A session's reference (its control's greedy outputs and scores) and comparisons against it.

Work happens in token ids (the adapter renders the chat template and tokenizes on the server), so
no retokenisation sits between two servers. The reference is kept in memory and in
``windows/<session>-control/reference.json``, so a resumed run reloads it, and another campaign
can reuse it as a stored oracle receipt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.campaign.prompts import OracleReceiptError, read_receipt
from engine.quality.maths import abs_stats, forced_logprob, kl_topk, truncate
from engine.record import results
from engine.words import CONTROL

REFERENCE = "reference.json"


@dataclass
class Item:
    """A forced token sequence: prompt ids, then the continuation whose positions are scored."""

    name: str
    prompt_ids: list[int]
    cont_ids: list[int]
    positions: list[int]
    text: str = ""  # the continuation (or text) as characters, for a person reading the receipt


Scores = list[list[dict[str, Any]]]  # per item, per position: {"t", "top": [[id, logprob]...]}


@dataclass
class Reference:
    """A session's control: its greedy outputs and scores, and the KL oracle's side."""

    session: str
    window: str
    top_k: int
    greedy: list[dict[str, Any]]
    items: list[Item]
    scores: Scores
    repeat: Scores
    kl_items: list[Item]
    kl_scores: Scores
    kl_repeat: Scores | None
    provenance: dict[str, Any] = field(default_factory=dict)
    kl_floors: dict[str, Any] = field(default_factory=dict)  # name -> compare_kl figures

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Reference:
        def items(key: str) -> list[Item]:
            return [Item(**i) for i in data[key]]
        return Reference(data["session"], data["window"], data["top_k"], data["greedy"],
                         items("items"), data["scores"], data["repeat"], items("kl_items"),
                         data["kl_scores"], data.get("kl_repeat"), data.get("provenance", {}),
                         data.get("kl_floors", {}))

    def kl_floor(self) -> float | None:
        """The largest floor mean: KL between two scorings that should be the same distribution."""
        means = [f["mean"] for f in self.kl_floors.values() if f.get("mean") is not None]
        return max(means) if means else None


def load_reference(path: Path) -> Reference:
    """A reference receipt (this run's, or a stored oracle), read through the checked opener; one
    ruler cannot use is an OracleReceiptError naming the file."""
    data = read_receipt(path)
    try:
        return Reference.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:  # an item's fields, past read_receipt's checks
        raise OracleReceiptError(path, f"not an oracle receipt ruler wrote ({type(exc).__name__}: "
                                       f"{exc})") from None


def same_items(a: Sequence[Item], b: Sequence[Item]) -> bool:
    return [(i.prompt_ids, i.cont_ids, i.positions) for i in a] == [
        (i.prompt_ids, i.cont_ids, i.positions) for i in b]


def scored(position: dict[str, Any]) -> bool:
    """Whether the server showed a distribution at a position (engine.servers.client.NextToken:
    one that gave none is kept with why, and compared with nothing)."""
    return bool(position.get("top")) and not position.get("unscored")


def unscored(ref: Scores, win: Scores) -> int:
    """Positions either side could not score: left out of every comparison, counted."""
    return sum(not (scored(r) and scored(w)) for ri, wi in zip(ref, win, strict=True)
               for r, w in zip(ri, wi, strict=True))


def compare_scores(items: Sequence[Item], ref: Scores, win: Scores, k: int) -> dict[str, Any]:
    """Per-position |dlogp| of the forced tokens, window against reference, with the worst ones;
    a position either side could not score is left out (``unscored`` counts them)."""
    rows: list[dict[str, Any]] = []
    for item, r_item, w_item in zip(items, ref, win, strict=True):
        for r, w in zip(r_item, w_item, strict=True):
            if not (scored(r) and scored(w)):
                continue
            forced = item.cont_ids[r["t"]]
            r_lp, r_floor = forced_logprob(truncate(r["top"], k), forced)
            w_lp, w_floor = forced_logprob(truncate(w["top"], k), forced)
            rows.append({"item": item.name, "t": r["t"], "token": forced,
                         "piece": r.get("pieces", {}).get(str(forced), ""),
                         "ref_logprob": r_lp, "logprob": w_lp, "abs_dlogp": abs(w_lp - r_lp),
                         "floored": r_floor or w_floor})
    stats = abs_stats([row["abs_dlogp"] for row in rows])
    worst = sorted(rows, key=lambda row: row["abs_dlogp"], reverse=True)[:5]
    return {"stats": stats, "floored": sum(row["floored"] for row in rows),
            "identical": all(row["abs_dlogp"] == 0 for row in rows) and all(
                truncate(r["top"], k) == truncate(w["top"], k)
                for ri, wi in zip(ref, win, strict=True) for r, w in zip(ri, wi, strict=True)
                if scored(r) and scored(w)),
            "unscored": unscored(ref, win), "worst": worst, "positions": rows}


def compare_kl(oracle: Scores, win: Scores, k: int) -> dict[str, Any]:
    """KL(oracle || window) per scored position: mean, p99, max."""
    values = [kl_topk(truncate(o["top"], k), truncate(w["top"], k))
              for oi, wi in zip(oracle, win, strict=True) for o, w in zip(oi, wi, strict=True)
              if scored(o) and scored(w)]
    a = np.asarray(values, dtype=float)
    return {"n": int(a.size), "mean": float(a.mean()) if a.size else None,
            "p99": float(np.percentile(a, 99)) if a.size else None,
            "max": float(a.max()) if a.size else None, "per_position": [round(v, 8) for v in values]}


class ReferenceStore:
    """Sessions' references: in memory, else the one a resumed run left on disk."""

    def __init__(self) -> None:
        self.refs: dict[str, Reference] = {}

    def get(self, run_dir: Path, session: str) -> Reference | None:
        if session not in self.refs:
            path = results.window_dir(run_dir, session, CONTROL) / REFERENCE
            if path.exists():
                self.refs[session] = load_reference(path)
        return self.refs.get(session)

    def put(self, ref: Reference) -> None:
        self.refs[ref.session] = ref
