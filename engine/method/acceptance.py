"""Speculative decoding's acceptance, defined once for every server.

- **length**: tokens committed per verify step, the bonus token included: 1 + accepted / steps;
- **rate**: accepted draft tokens / drafted tokens;
- **per position** i (0-based): the share of verify steps whose draft token at position i was
  accepted, i.e. the steps that accepted more than i drafts over all steps. It never rises with
  i (a draft token is accepted only after every one before it), its sum is length - 1, and it is
  what vLLM's log prints as "Per-position acceptance rate" (v1/spec_decode/metrics.py).

Every adapter turns its server's own counters into one flat shape, :data:`COUNT_KEYS` plus
``pos.<i>`` per draft position, read the same way whether it is a ``/metrics`` delta over a rep or
a request's own counts (engine.servers.client.ServerClient.spec_counters and request_acceptance):

========== ===================================== ======================================= =========
server     /metrics (delta over the rep)         per request                             per pos.
========== ===================================== ======================================= =========
vLLM       spec_decode_num_drafts / _draft_      ``metrics.speculative_decoding`` with   /metrics
           tokens / _accepted_tokens, _per_pos   ``--per-request-spec-decode-metrics``
llama.cpp  llamacpp:spec_decode_* (``--metrics``) ``timings.draft_n``, ``draft_n_accepted`` /metrics
           with _per_pos                         (no steps: no length per request)
SGLang     Δgeneration_tokens / Δverify_calls    ``spec_verify_ct``, ``spec_num_correct_``  per request
                                                 ``drafts``, ``spec_accept_histogram``
========== ===================================== ======================================= =========

**Natural or simulated**: a server told to accept drafts at a set rate instead of checking them
(SGLang's ``SGLANG_SIMULATE_ACC_LEN``, vLLM's ``rejection_sample_method: synthetic``, llama.cpp's
``--spec-synth-len``: engine.servers.launch.simulated_acceptance) reports the acceptance it was
given, and its throughput is that of tokens nobody checked. Each row says which (``acceptance``:
:data:`NATURAL` or ``simulated (how)``), every surface shows it, and a delta between a natural and
a simulated row is withheld (:func:`unlike`).

A rep reads the server's ``/metrics`` delta when it has one (it counts every request, the failed
ones too, and is what the server itself reports), else the sum of its requests' own counts. A
row pools its reps' counts (a ratio of sums) and gives each rep's figures beside it, with a t
interval across the reps (None with fewer than two).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.method.delta import LEVEL, t_quantile
from engine.servers.data import POS

# The counts every source gives (drafts: verify steps; 0 where the source has no step count).
COUNT_KEYS = ("drafts", "drafted", "accepted")
METRICS, PER_REQUEST = "metrics", "per-request"  # a row's accept_source


@dataclass(frozen=True)
class Counts:
    """Counts over some requests: verify steps, drafted and accepted tokens, accepted per position."""

    drafts: float = 0.0
    drafted: float = 0.0
    accepted: float = 0.0
    per_pos: tuple[float, ...] = ()

    @classmethod
    def of(cls, flat: Mapping[str, Any]) -> Counts:
        """From the flat shape the adapters give (absent keys count 0)."""
        pos = sorted((int(k[len(POS):]), float(v)) for k, v in flat.items() if k.startswith(POS))
        per_pos = [0.0] * (pos[-1][0] + 1 if pos else 0)
        for i, v in pos:
            per_pos[i] = v
        drafts, drafted, accepted = (float(flat.get(k) or 0) for k in COUNT_KEYS)
        return cls(drafts, drafted, accepted, tuple(per_pos))

    def __add__(self, other: Counts) -> Counts:
        n = max(len(self.per_pos), len(other.per_pos))
        a, b = (list(x) + [0.0] * (n - len(x)) for x in (self.per_pos, other.per_pos))
        return Counts(self.drafts + other.drafts, self.drafted + other.drafted,
                      self.accepted + other.accepted, tuple(x + y for x, y in zip(a, b, strict=True)))


def figures(c: Counts) -> dict[str, Any]:
    """The definition: ``accept_len``, ``accept_rate`` and ``accept_per_pos`` (a list; empty where
    the counts have no position or no step count), None where the counts cannot say."""
    steps = c.drafts > 0
    return {
        "accept_len": round(1 + c.accepted / c.drafts, 4) if steps else None,
        "accept_rate": round(c.accepted / c.drafted, 4) if c.drafted > 0 else None,
        "accept_per_pos": [round(p / c.drafts, 4) for p in c.per_pos] if steps else [],
    }


def rep_counts(header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> tuple[Counts, str]:
    """One rep's counts and where they are from: its ``/metrics`` delta (``metrics``), else its
    requests' own counts (``per-request``), else nothing (``""``). A request count without verify
    steps (llama.cpp's timings) leaves the steps unknown, not fewer: a rep's steps are counted only
    when every request that drafted says its own."""
    delta = header.get("metrics_delta")
    # A delta with verify steps and no drafted tokens is SGLang's without its block size: a
    # length and no rate, still the server's own count.
    if delta and (delta.get("drafted") or delta.get("drafts")):
        return Counts.of(delta), METRICS
    accs = [a for r in records if (a := r.get("acceptance"))]
    if not accs or not any(a.get("drafted") for a in accs):
        return Counts(), ""
    total = sum((Counts.of(a) for a in accs), Counts())
    if not all("drafts" in a for a in accs):
        total = Counts(0.0, total.drafted, total.accepted, ())
    elif not all(any(k.startswith(POS) for k in a) for a in accs if a.get("drafted")):
        total = Counts(total.drafts, total.drafted, total.accepted, ())
    return total, PER_REQUEST


def interval(values: Sequence[float], level: float = LEVEL) -> tuple[float | None, float | None]:
    """The mean's t interval across reps; (None, None) with fewer than two."""
    if len(values) < 2:
        return None, None
    m = sum(values) / len(values)
    sd = math.sqrt(sum((x - m) ** 2 for x in values) / (len(values) - 1))
    half = t_quantile(1 - (1 - level) / 2, len(values) - 1) * sd / math.sqrt(len(values))
    return round(m - half, 4), round(m + half, 4)


def row_figures(reps: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
    """A row's acceptance: its reps' counts pooled, each rep's figures and the interval across
    them. The reps are read alike: every one from its metrics delta when every one has it, else
    every one from its requests (a row never mixes the two sources)."""
    read = [rep_counts(h, rs) for h, rs in reps]
    if read and all(src == METRICS for _, src in read):
        counts, source = [c for c, _ in read], METRICS
    else:
        counts = [rep_counts({}, rs)[0] for _, rs in reps]
        source = PER_REQUEST if any(c.drafted or c.drafts for c in counts) else ""
    per_rep = [figures(c) for c in counts]
    pooled = figures(sum(counts, Counts()))
    out = {**pooled, "accept_per_pos": curve_text(pooled["accept_per_pos"]), "accept_source": source,
           "rep_accept_len": [f["accept_len"] for f in per_rep],
           "rep_accept_rate": [f["accept_rate"] for f in per_rep],
           "rep_accept_per_pos": [f["accept_per_pos"] for f in per_rep]}
    for name in ("accept_len", "accept_rate"):
        known = [v for v in out[f"rep_{name}"] if v is not None]
        whole = known == out[f"rep_{name}"]  # a rep without the figure: no interval
        out[f"{name}_lo"], out[f"{name}_hi"] = interval(known) if whole else (None, None)
    return out


def curve_text(per_pos: Sequence[float] | None) -> str:
    """A per-position curve in one cell, as :func:`figures` rounds it: ``0.9125 0.74 0.5``
    ("" for none)."""
    return " ".join(f"{p:g}" for p in per_pos or ())


def parse_curve(text: str) -> list[float]:
    """:func:`curve_text`'s cell back (throughput.csv's ``accept_per_pos``)."""
    return [float(x) for x in text.split()]


NATURAL = "natural"
SIMULATED = "simulated"


def simulated_text(how: str) -> str:
    """A simulated row's ``acceptance``: the word and the setting that made it so."""
    return f"{SIMULATED} ({how})"


def is_simulated(row: Mapping[str, Any]) -> bool:
    return str(row.get("acceptance") or "").startswith(SIMULATED)


def unlike(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Why two rows make no delta on acceptance (one simulated, the other not), or None."""
    if is_simulated(a) == is_simulated(b):
        return None
    said = a.get("acceptance") if is_simulated(a) else b.get("acceptance")
    return (f"delta withheld: one row's acceptance is {said}, the other's is measured: the "
            "simulated row's tok/s is of draft tokens nobody checked")
