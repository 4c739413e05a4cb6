"""Quality and ruler checks, per window against its session's control, with JSON receipts.

The phase ``Quality()(runner, ctx)`` runs after the measurement of a window. In order:

- the ruler check (``knobs.json``): every request knob of the workload must act. Outputs and
  token counts with and without it must differ; a reasoning knob must also keep ``<think>`` out of
  ``content`` and, where the server reports them, give reasoning token counts. An inert knob marks
  the window "ruler suspect";
- greedy equivalence (``greedy.json``): fixed prompts at temperature 0 with a seed; per prompt
  identical, or the index of the first differing character;
- teacher-forced |Δlogp| (``teacher-forced.json``): the control's greedy continuations, scored
  token by token under this window's server, against the control's own scores; the control is
  scored twice ("self-score repeat-identical on N tokens");
- KL(oracle || window) for lossy windows (``kl.json``), over the oracle's top-k plus one tail
  bucket, beside the floor (the control against itself, and against the previous session's);
- "no observable effect": boot facts, throughput rows and greedy outputs all match the control;
- the tool-call probe (``tools.json``) when the campaign asks for it;
- control drift (run-level ``drift.json``) each time a control finishes.

Work happens in token ids (the adapter renders the chat template and tokenizes on the server), so
no retokenisation sits between two servers. The control's outputs and scores are the session's
*reference*: kept in memory and in ``windows/<session>-control/reference.json``, so a resumed run
reloads them, and reusable by another campaign as a stored oracle receipt.

Every verdict is a journal event ``verdict`` (session, window, check, verdict, summary, file,
figures) and a column of the run-level ``verdicts.csv``. Checks and their verdicts:

==============  ==========================================================================
knobs           acts | ruler suspect
greedy          identical | diverged | no reference
teacher_forced  exact | close (p99 <= 0.05 nats) | differs | no reference
self_score      repeat-identical | repeat-differs                    (controls only)
kl              above floor | at floor | no reference                (lossy windows, control)
no_effect       no observable effect | observable effect | undetermined
tool_probe      ok | failed
drift           within spread | drift                                (controls, session 2 on)
any check       error | unsupported
==============  ==========================================================================
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from engine import __version__, results
from engine.servers.base import ChatReply, ServerAdapter, Unsupported, tool_arguments

if TYPE_CHECKING:
    from engine.runner import Runner, WindowContext
    from engine.spec import Campaign

CONTROL = "control"
REFERENCE = "reference.json"
VERDICTS = "verdicts.csv"
DRIFT = "drift.json"

TF_CLOSE = 0.05  # nats: a p99 |dlogp| at or below this is numeric noise, not a different model
KL_CLEAR = 10.0  # a lossy window's KL is "above floor" when > KL_CLEAR x floor ...
KL_MIN = 1e-4  # ... and above this, so that a zero floor does not make any noise count
PROB_EPS = 1e-12  # probabilities are clamped here before a log
KNOB_PROMPTS = 3  # greedy prompts the knob check sends with and without each knob
THINK_TAGS = ("<think>", "</think>")
REASONING_KEY = re.compile(r"think|reason", re.I)

VERDICT_COLUMNS = [
    "session", "window", "axis", "lossy", "knobs", "greedy", "first_divergence", "dlogp_p50",
    "dlogp_p99", "dlogp_max", "floored", "self_score", "kl_mean", "kl_p99", "kl_floor",
    "no_effect", "tool_calls", "reference",
]

# Boot facts that legitimately differ from boot to boot, or come from requests rather than the
# boot: file paths (the model's type, size and shape are facts of their own), the listening URL
# (a port per window), request timings and speculative-decoding counters of served requests.
IGNORED_FACT = re.compile(
    r"(^|\.)path$|^server\.model$|^spec\.draft_model$|^server\.url$|^timing\.|^ready$"
    r"|^spec\.(accept_rate|accepted|generated|mean_len|acc_per_pos)$|^spec\.lifetime\.")


# ------------------------------------------------------------------------------ pure maths


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first differing character, None when identical (a prefix differs at its end)."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def spread_positions(n: int, k: int) -> list[int]:
    """Up to k positions spread evenly over range(n), first and last included."""
    if n <= 0:
        return []
    if n <= k:
        return list(range(n))
    return sorted({round(x) for x in np.linspace(0, n - 1, k)})


def abs_stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p99/max of absolute values (numpy's linear percentiles); None figures when empty."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None, "mean": None}
    a = np.abs(np.asarray(values, dtype=float))
    return {"n": int(a.size), "p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max()), "mean": float(a.mean())}


def forced_logprob(top: Sequence[tuple[int, float]], token: int) -> tuple[float, bool]:
    """The forced token's logprob from a top-k list; outside it, the floor: the k-th logprob.

    The floor is an upper bound of the true value, so a |dlogp| involving it is a lower bound;
    receipts count such positions as "floored".
    """
    for tid, lp in top:
        if tid == token:
            return lp, False
    return (min(lp for _, lp in top), True) if top else (math.log(PROB_EPS), True)


def topk_distribution(top: Sequence[tuple[int, float]], support: Sequence[int]) -> list[float]:
    """Probabilities over ``support`` plus one tail bucket, from one side's top-k.

    A support token missing from this top-k is in its tail, so its probability is at most the
    k-th probability; it gets min(k-th, tail / (missing + 1)) and the tail bucket keeps the rest,
    so the buckets still sum to one.
    """
    probs = {tid: math.exp(lp) for tid, lp in top}
    tail = max(0.0, 1.0 - sum(probs.values()))
    missing = [t for t in support if t not in probs]
    kth = min(probs.values()) if probs else 1.0
    guess = min(kth, tail / (len(missing) + 1)) if missing else 0.0
    out = [probs.get(t, guess) for t in support]
    out.append(max(0.0, tail - guess * len(missing)))
    return out


def kl_topk(oracle: Sequence[tuple[int, float]], window: Sequence[tuple[int, float]]) -> float:
    """KL(oracle || window) in nats over the oracle's top-k tokens plus one tail bucket."""
    support = [tid for tid, _ in oracle]
    p = topk_distribution(oracle, support)
    q = topk_distribution(window, support)
    return float(sum(pi * (math.log(max(pi, PROB_EPS)) - math.log(max(qi, PROB_EPS)))
                     for pi, qi in zip(p, q, strict=True) if pi > 0))


def truncate(top: Sequence[Sequence[Any]], k: int) -> list[tuple[int, float]]:
    return [(int(t), float(lp)) for t, lp in list(top)[:k]]


# ------------------------------------------------------------------------------ receipts' data


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
    return Reference.from_json(json.loads(path.read_text()))


def compare_scores(items: Sequence[Item], ref: Scores, win: Scores, k: int) -> dict[str, Any]:
    """Per-position |dlogp| of the forced tokens, window against reference, with the worst ones."""
    rows: list[dict[str, Any]] = []
    for item, r_item, w_item in zip(items, ref, win, strict=True):
        for r, w in zip(r_item, w_item, strict=True):
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
                for ri, wi in zip(ref, win, strict=True) for r, w in zip(ri, wi, strict=True)),
            "worst": worst, "positions": rows}


def compare_kl(oracle: Scores, win: Scores, k: int) -> dict[str, Any]:
    values = [kl_topk(truncate(o["top"], k), truncate(w["top"], k))
              for oi, wi in zip(oracle, win, strict=True) for o, w in zip(oi, wi, strict=True)]
    a = np.asarray(values, dtype=float)
    return {"n": int(a.size), "mean": float(a.mean()) if a.size else None,
            "p99": float(np.percentile(a, 99)) if a.size else None,
            "max": float(a.max()) if a.size else None, "per_position": [round(v, 8) for v in values]}


def same_items(a: Sequence[Item], b: Sequence[Item]) -> bool:
    return [(i.prompt_ids, i.cont_ids, i.positions) for i in a] == [
        (i.prompt_ids, i.cont_ids, i.positions) for i in b]


def greedy_compare(ref: Sequence[dict[str, Any]], mine: Sequence[dict[str, Any]]) -> dict[str, Any]:
    per: list[dict[str, Any]] = []
    for r, m in zip(ref, mine, strict=False):
        div = first_divergence(r["text"], m["text"])
        per.append({"prompt": m["prompt"], "identical": div is None, "first_divergence": div,
                    "same_prompt_ids": r["prompt_ids"] == m["prompt_ids"],
                    "control": r["text"], "window": m["text"]})
    same = sum(p["identical"] for p in per)
    divs = [p["first_divergence"] for p in per if p["first_divergence"] is not None]
    return {"identical": same, "n": len(per), "first_divergence": min(divs) if divs else None,
            "prompts": per}


def fact_diff(window: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Boot facts that differ, ignoring the per-boot ones (IGNORED_FACT)."""
    keys = {k for k in window.keys() | control.keys() if not IGNORED_FACT.search(k)}
    return {k: [window.get(k), control.get(k)] for k in sorted(keys)
            if window.get(k) != control.get(k) or type(window.get(k)) is not type(control.get(k))}


def rows_inside(window: dict[tuple[str, int], dict[str, Any]],
                control: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Each window row against the control's row of the same shape: |delta| within the spread.

    The tolerance is the larger of the two rows' spreads: the noise each measured of itself.
    A row that is void, failed or aborted on either side cannot be judged.
    """
    out: list[dict[str, Any]] = []
    for (cls, c), w in sorted(window.items()):
        ctl = control.get((cls, c))
        if not ctl or not ctl.get("agg_tok_s") or w.get("status") not in ("ok", "noisy") or \
                ctl.get("status") not in ("ok", "noisy"):
            out.append({"class": cls, "concurrency": c, "judged": False})
            continue
        delta = (w["agg_tok_s"] - ctl["agg_tok_s"]) / ctl["agg_tok_s"]
        tol = max(float(w.get("spread") or 0), float(ctl.get("spread") or 0))
        out.append({"class": cls, "concurrency": c, "judged": True, "delta": round(delta, 4),
                    "tolerance": round(tol, 4), "inside": abs(delta) <= tol,
                    "agg_tok_s": w["agg_tok_s"], "control_agg_tok_s": ctl["agg_tok_s"]})
    return {"rows": out, "judged": bool(out) and all(r["judged"] for r in out),
            "inside": bool(out) and all(r.get("inside") for r in out)}


# ------------------------------------------------------------------------------ control drift


def _c1_rows(run_dir: Path) -> list[dict[str, str]]:
    """The controls' rows at the lowest concurrency measured (C1 when there is one)."""
    path = run_dir / results.THROUGHPUT
    if not path.exists():
        return []
    rows = [r for r in csv.DictReader(path.open()) if r["window"] == CONTROL and r["agg_tok_s"]
            and r["status"] in ("ok", "noisy")]
    if not rows:
        return []
    low = min(int(r["concurrency"]) for r in rows)
    return [r for r in rows if int(r["concurrency"]) == low]


def _drift_row(row: dict[str, str], ref_tok_s: float, ref_spread: float,
               against: str) -> dict[str, Any]:
    tok_s, spread = float(row["agg_tok_s"]), float(row["spread"] or 0)
    delta = (tok_s - ref_tok_s) / ref_tok_s * 100 if ref_tok_s else None
    inside = delta is not None and abs(delta) <= max(spread, ref_spread) * 100
    return {"session": row["session"], "class": row["class"],
            "concurrency": int(row["concurrency"]), "against": against, "agg_tok_s": tok_s,
            "reference_tok_s": ref_tok_s, "delta_pct": None if delta is None else round(delta, 2),
            "spread": spread, "reference_spread": ref_spread,
            "verdict": "within spread" if inside else "drift"}


def control_drift(run_dir: Path, baseline_dir: Path | None = None) -> list[dict[str, Any]]:
    """Each session's control against the previous session's, per class at C1: delta in percent.

    With ``baseline_dir`` (another run), also against that run's controls: per class, the median
    of its sessions' control rows (spread: the largest of theirs).
    """
    rows = _c1_rows(run_dir)
    out: list[dict[str, Any]] = []
    by_class: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_class.setdefault(row["class"], []).append(row)
    for cls_rows in by_class.values():
        for prev, cur in zip(cls_rows, cls_rows[1:], strict=False):
            out.append(_drift_row(cur, float(prev["agg_tok_s"]), float(prev["spread"] or 0),
                                  f"{prev['session']}-control"))
    if baseline_dir is not None:
        base: dict[str, list[dict[str, str]]] = {}
        for row in _c1_rows(baseline_dir):
            base.setdefault(row["class"], []).append(row)
        for cls, cls_rows in by_class.items():
            if cls not in base:
                continue
            ref = float(np.median([float(r["agg_tok_s"]) for r in base[cls]]))
            ref_spread = max(float(r["spread"] or 0) for r in base[cls])
            out += [_drift_row(r, ref, ref_spread, f"baseline {baseline_dir.name}")
                    for r in cls_rows]
    return out


def write_drift(run_dir: Path, baseline_dir: Path | None = None) -> list[dict[str, Any]]:
    drift = control_drift(run_dir, baseline_dir)
    results.write_json(run_dir / DRIFT, {"baseline": str(baseline_dir) if baseline_dir else None,
                                         "rows": drift})
    return drift


# ------------------------------------------------------------------------------ verdicts.csv


def verdict_row(session: str, window: str, axis: str, lossy: bool,
                verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One verdicts.csv row from a window's verdict events (check -> event)."""
    def fig(check: str, key: str) -> Any:
        return (verdicts.get(check, {}).get("figures") or {}).get(key)

    def word(check: str) -> str:
        return verdicts[check]["verdict"] if check in verdicts else ""

    greedy = verdicts.get("greedy", {})
    greedy_text = (f"{fig('greedy', 'identical')}/{fig('greedy', 'n')}"
                   if fig("greedy", "n") is not None else word("greedy"))
    tools = verdicts.get("tool_probe")
    return {
        "session": session, "window": window, "axis": axis, "lossy": lossy,
        "knobs": word("knobs"), "greedy": greedy_text,
        "first_divergence": fig("greedy", "first_divergence"),
        "dlogp_p50": fig("teacher_forced", "p50"), "dlogp_p99": fig("teacher_forced", "p99"),
        "dlogp_max": fig("teacher_forced", "max"), "floored": fig("teacher_forced", "floored"),
        "self_score": verdicts.get("self_score", {}).get("summary", ""),
        "kl_mean": fig("kl", "mean"), "kl_p99": fig("kl", "p99"), "kl_floor": fig("kl", "floor"),
        "no_effect": word("no_effect"),
        "tool_calls": tools["summary"].split(" ")[0] if tools else "",
        "reference": (greedy.get("figures") or {}).get("reference", ""),
    }


def write_verdicts(run_dir: Path, rows: Iterable[dict[str, Any]]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, VERDICT_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: _cell(row.get(k)) for k in VERDICT_COLUMNS})
    results.write_atomic(run_dir / VERDICTS, buf.getvalue())


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


# ------------------------------------------------------------------------------ the phase


class Stopped(Exception):
    """The operator aborted or advanced: the phase stops between requests."""


@dataclass
class Probe:
    """The live side of one window: its server, through the adapter, and a request counter."""

    adapter: ServerAdapter
    client: httpx.Client
    stopping: Callable[[], bool]
    requests: int = 0

    def check(self) -> None:
        if self.stopping():
            raise Stopped

    def greedy(self, prompts: Sequence[str], knobs: dict[str, Any], max_tokens: int,
               seed: int) -> list[dict[str, Any]]:
        out = []
        for prompt in prompts:
            self.check()
            text = self.adapter.render_chat(self.client, messages(prompt), knobs)
            ids = self.adapter.tokenize(self.client, text)
            gen = self.adapter.generate(self.client, ids, max_tokens, seed)
            self.requests += 3
            out.append({"prompt": prompt, "prompt_ids": ids, "text": gen.text,
                        "token_ids": gen.token_ids, "stop": gen.stop})
        return out

    def score(self, items: Sequence[Item], top_k: int) -> Scores:
        out: Scores = []
        for item in items:
            rows = []
            for j, t in enumerate(item.positions):
                self.check()
                nt = self.adapter.next_token(self.client, item.prompt_ids + item.cont_ids[:t], top_k,
                                             fresh=j == 0)
                self.requests += 1
                forced = item.cont_ids[t]
                rows.append({"t": t, "top": [[tid, lp] for tid, lp in nt.top],
                             "pieces": {str(forced): nt.pieces.get(forced, "")}})
            out.append(rows)
        return out

    def chat(self, prompt: str, knobs: dict[str, Any], max_tokens: int, seed: int,
             extra: dict[str, Any] | None = None) -> ChatReply:
        self.check()
        self.requests += 1
        return self.adapter.chat(self.client, {"messages": messages(prompt), "max_tokens": max_tokens,
                                               "temperature": 0, "seed": seed, **knobs,
                                               **(extra or {})})


def messages(prompt: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": prompt}]


def greedy_items(greedy: Sequence[dict[str, Any]], positions: int) -> list[Item]:
    return [Item(f"greedy-{i}", g["prompt_ids"], g["token_ids"],
                 spread_positions(len(g["token_ids"]), positions), g["text"])
            for i, g in enumerate(greedy) if g["token_ids"]]


def text_items(probe: Probe, texts: Sequence[str], positions: int) -> list[Item]:
    """Fixed texts as items: the first token is the prompt, every later one can be scored."""
    items = []
    for i, text in enumerate(texts):
        ids = probe.adapter.tokenize(probe.client, text)
        probe.requests += 1
        if len(ids) >= 2:
            items.append(Item(f"text-{i}", ids[:1], ids[1:], spread_positions(len(ids) - 1,
                                                                               positions), text))
    return items


def is_reasoning_knob(name: str, value: Any) -> bool:
    if REASONING_KEY.search(name):
        return True
    return isinstance(value, dict) and any(REASONING_KEY.search(str(k)) for k in value)


def knob_check(probe: Probe, prompts: Sequence[str], knobs: dict[str, Any], max_tokens: int,
               seed: int) -> dict[str, Any]:
    """Each knob against the same requests without it (the others kept)."""
    base = [probe.chat(p, knobs, max_tokens, seed) for p in prompts]
    report: dict[str, Any] = {"prompts": list(prompts), "max_tokens": max_tokens, "knobs": {}}
    for name, value in knobs.items():
        rest = {k: v for k, v in knobs.items() if k != name}
        without = [probe.chat(p, rest, max_tokens, seed) for p in prompts]
        report["knobs"][name] = judge_knob(probe, name, value, knobs, rest, prompts, base, without)
    suspects = [n for n, k in report["knobs"].items() if k["verdict"] != "acts"]
    report["verdict"] = "ruler suspect" if suspects else "acts"
    report["suspects"] = suspects
    return report


def judge_knob(probe: Probe, name: str, value: Any, knobs: dict[str, Any], rest: dict[str, Any],
               prompts: Sequence[str], base: Sequence[ChatReply],
               without: Sequence[ChatReply]) -> dict[str, Any]:
    pairs = [{"prompt": p, "with": _reply(a), "without": _reply(b),
              "differs": (a.content, a.reasoning, a.completion_tokens) !=
                         (b.content, b.reasoning, b.completion_tokens)}
             for p, a, b in zip(prompts, base, without, strict=True)]
    reasons: list[str] = []
    if not any(p["differs"] for p in pairs):
        reasons.append(f"outputs and token counts identical with and without it on "
                       f"{len(pairs)}/{len(pairs)} prompts")
    rendered = _renders_same(probe, prompts[0], knobs, rest)
    if rendered:
        reasons.append("the chat template renders the same prompt with and without it")
    reasoning = is_reasoning_knob(name, value)
    if reasoning:
        leaks = [r for r in base if any(tag in r.content for tag in THINK_TAGS)]
        if leaks:
            reasons.append(f"reasoning left in content (<think> in {len(leaks)} replies)")
        if probe.adapter.reasoning_counts() and all(r.reasoning_tokens is None for r in base):
            reasons.append("no reasoning token count in usage")
    acts = any(p["differs"] for p in pairs) and not any("reasoning left" in r or "no reasoning"
                                                        in r for r in reasons)
    return {"value": value, "reasoning_knob": reasoning, "template_renders_same": rendered,
            "reasoning_counts": ("reported" if any(r.reasoning_tokens is not None for r in base)
                                 else "not reported by this server"
                                 if not probe.adapter.reasoning_counts() else "missing"),
            "verdict": "acts" if acts else "ruler suspect", "reasons": reasons, "pairs": pairs}


def _renders_same(probe: Probe, prompt: str, a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    try:
        same = (probe.adapter.render_chat(probe.client, messages(prompt), a) ==
                probe.adapter.render_chat(probe.client, messages(prompt), b))
    except Unsupported:
        return None
    probe.requests += 2
    return same


def _reply(r: ChatReply) -> dict[str, Any]:
    return {"content": r.content, "reasoning": r.reasoning, "completion_tokens": r.completion_tokens,
            "reasoning_tokens": r.reasoning_tokens, "finish_reason": r.finish_reason}


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}]
TOOL_CITIES = ["Paris", "Tokyo", "Lima", "Nairobi", "Oslo", "Cairo", "Sydney", "Toronto",
               "Mumbai", "Berlin"]


def tool_probe(probe: Probe, n: int, max_tokens: int, seed: int,
               knobs: dict[str, Any]) -> dict[str, Any]:
    """N weather questions with a tool schema; a success is a named call with JSON-object args."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        prompt = f"What is the weather like in {TOOL_CITIES[i % len(TOOL_CITIES)]} right now?"
        try:
            r = probe.chat(prompt, knobs, max_tokens, seed, {"tools": TOOLS, "tool_choice": "auto"})
        except httpx.HTTPStatusError as e:
            out.append({"prompt": prompt, "ok": False, "error": str(e)})
            continue
        args = [tool_arguments(c) for c in r.tool_calls]
        ok = bool(args) and all(a is not None for a in args)
        out.append({"prompt": prompt, "ok": ok, "tool_calls": r.tool_calls,
                    "content": r.content[:300],
                    "why": "" if ok else ("no tool call" if not args else "arguments do not parse")})
    ok = sum(o["ok"] for o in out)
    return {"ok": ok, "n": n, "tools": TOOLS, "calls": out}


class Quality:
    """Callable phase: ``Quality()(runner, ctx)`` runs every quality and ruler check of a window.

    ``baseline_dir`` (another run directory) adds a baseline comparison to ``drift.json``.
    """

    def __init__(self, baseline_dir: Path | None = None) -> None:
        self.baseline_dir = baseline_dir
        self.refs: dict[str, Reference] = {}  # session -> its control's reference

    def __call__(self, runner: Runner, ctx: WindowContext) -> None:
        q = runner.campaign.quality
        if not q.enabled:
            return
        started = time.monotonic()
        timeout = httpx.Timeout(runner.campaign.timeouts.request, connect=10.0)
        with httpx.Client(base_url=ctx.server.base_url, timeout=timeout) as client:
            probe = Probe(ctx.adapter, client, runner.controls.stopping)
            run = WindowRun(self, runner, ctx, probe)
            try:
                run.all()
            except Stopped:
                runner.emit("quality_done", session=ctx.session, window=ctx.window,
                            status="stopped", seconds=round(time.monotonic() - started, 2),
                            requests=probe.requests)
                return
            except httpx.TransportError as e:
                if not ctx.server.alive():
                    from engine.measure import WindowFailed

                    raise WindowFailed(f"server died during the quality checks ({e})") from e
                raise
        runner.emit("quality_done", session=ctx.session, window=ctx.window, status="done",
                    seconds=round(time.monotonic() - started, 2), requests=probe.requests,
                    stages=run.stages)
        write_verdicts(runner.run_dir, self.rows(runner))

    def reference(self, runner: Runner, session: str) -> Reference | None:
        """The session's control reference: in memory, else the one a resumed run left on disk."""
        if session not in self.refs:
            path = results.window_dir(runner.run_dir, session, CONTROL) / REFERENCE
            if path.exists():
                self.refs[session] = load_reference(path)
        return self.refs.get(session)

    def rows(self, runner: Runner) -> list[dict[str, Any]]:
        out = []
        for key in runner.state.order:
            ws = runner.state.windows[key]
            verdicts = getattr(ws, "verdicts", {})
            if not verdicts:
                continue
            lossy = ws.window != CONTROL and runner.campaign.window(ws.window).lossy
            out.append(verdict_row(ws.session, ws.window, ws.axis, lossy, verdicts))
        return out


class WindowRun:
    """The checks of one window; each writes its receipt and journals its verdict."""

    def __init__(self, phase: Quality, runner: Runner, ctx: WindowContext, probe: Probe) -> None:
        self.phase, self.runner, self.ctx, self.probe = phase, runner, ctx, probe
        self.c: Campaign = runner.campaign
        self.q = self.c.quality
        self.seed = self.c.quality_seed()
        self.knobs = dict(self.c.workload.knobs)
        self.top_k = max(self.q.teacher_forced.top_k, self.q.kl.top_k)
        self.is_control = ctx.window == CONTROL
        self.lossy = not self.is_control and self.c.window(ctx.window).lossy
        self.stages: dict[str, float] = {}

    # -- plumbing -------------------------------------------------------------------------

    def verdict(self, check: str, verdict: str, summary: str, file: str | None,
                **figures: Any) -> None:
        rel = str((self.ctx.dir / file).relative_to(self.runner.run_dir)) if file else None
        self.runner.emit("verdict", session=self.ctx.session, window=self.ctx.window, check=check,
                         verdict=verdict, summary=summary, file=rel, figures=figures)

    def write(self, name: str, data: dict[str, Any]) -> None:
        results.write_json(self.ctx.dir / name, {"session": self.ctx.session,
                                                 "window": self.ctx.window, **data})

    def timed(self, stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            self.stages[stage] = round(self.stages.get(stage, 0) + time.monotonic() - t0, 3)

    def guarded(self, check: str, fn: Callable[[], Any]) -> Any:
        """A check the server cannot answer is a verdict, not a crash of the campaign."""
        try:
            return self.timed(check, fn)
        except Unsupported as e:
            self.verdict(check, "unsupported", str(e), None)
        except (httpx.HTTPStatusError, ValueError, KeyError) as e:
            if isinstance(e, httpx.HTTPStatusError) or self.ctx.server.alive():
                self.verdict(check, "error", f"{type(e).__name__}: {e}"[:300], None)
            else:
                raise
        return None

    # -- the checks, in order ----------------------------------------------------------------

    def all(self) -> None:
        if self.q.knobs_check and self.knobs:
            self.guarded("knobs", self.knobs_check)
        mine = self.guarded("greedy", self.greedy_outputs)
        if mine is None:
            return
        if self.is_control:
            self.guarded("reference", lambda: self.control(mine))
        else:
            self.window(mine)
        if self.q.tool_probe is not None:
            self.guarded("tool_probe", self.tools)

    def knobs_check(self) -> None:
        prompts = self.c.greedy_prompts()[:KNOB_PROMPTS]
        report = knob_check(self.probe, prompts, self.knobs, self.q.greedy.max_tokens, self.seed)
        self.write("knobs.json", report)
        if report["suspects"]:
            why = "; ".join(f"{n}: {', '.join(report['knobs'][n]['reasons'])}"
                            for n in report["suspects"])
            summary = f"RULER SUSPECT: {', '.join(report['suspects'])} inert ({why})"
        else:
            summary = f"{len(report['knobs'])}/{len(report['knobs'])} knobs act"
        self.verdict("knobs", report["verdict"], summary, "knobs.json",
                     suspects=report["suspects"], knobs=list(report["knobs"]))

    def greedy_outputs(self) -> list[dict[str, Any]]:
        return self.probe.greedy(self.c.greedy_prompts(), self.knobs, self.q.greedy.max_tokens,
                                 self.seed)

    # -- the control: the session's reference ---------------------------------------------

    def control(self, mine: list[dict[str, Any]]) -> None:
        tf = self.q.teacher_forced
        items = greedy_items(mine, tf.positions)
        scores = self.timed("score", lambda: self.probe.score(items, self.top_k))
        repeat = self.timed("score", lambda: self.probe.score(items, self.top_k))
        kl_items, kl_scores, kl_repeat, receipt = self.kl_side(items, scores, repeat)
        ref = Reference(self.ctx.session, CONTROL, self.top_k, mine, items, scores, repeat,
                        kl_items, kl_scores, kl_repeat, self.provenance())
        prev = self.previous_reference()
        ref.kl_floors = self.floors(ref, prev, receipt)
        results.write_json(self.ctx.dir / REFERENCE, ref.to_json())
        self.phase.refs[self.ctx.session] = ref
        self.control_greedy(mine, prev)
        self.self_score(items, scores, repeat)
        self.control_kl(ref, receipt)
        self.settle_earlier_windows(ref)
        if list(self.c.sessions).index(self.ctx.session) > 0:
            self.drift()

    def control_greedy(self, mine: list[dict[str, Any]], prev: Reference | None) -> None:
        """The control is the session's reference; against the previous session's it shows drift."""
        base = {"seed": self.seed, "max_tokens": self.q.greedy.max_tokens}
        if prev is None:
            self.write("greedy.json", {"reference": "self", **base, "outputs": mine})
            self.verdict("greedy", "reference", f"reference: {len(mine)} prompts", "greedy.json",
                         reference="self")
            return
        cmp = greedy_compare(prev.greedy, mine)
        against = f"{prev.session}-control"
        self.write("greedy.json", {"reference": against, **base, "comparison": cmp, "outputs": mine})
        self.verdict("greedy", "identical" if cmp["identical"] == cmp["n"] else "diverged",
                     f"{greedy_summary(cmp)} vs {against}", "greedy.json",
                     identical=cmp["identical"], n=cmp["n"],
                     first_divergence=cmp["first_divergence"], reference=against)

    def kl_side(self, items: list[Item], scores: Scores,
                repeat: Scores) -> tuple[list[Item], Scores, Scores | None, Reference | None]:
        """What KL is taken over: a stored oracle receipt's texts, fixed texts, or the greedy items."""
        receipt_path = self.c.oracle_receipt()
        if receipt_path is not None:
            receipt = load_reference(receipt_path)
            return receipt.kl_items, self.timed(
                "score", lambda: self.probe.score(receipt.kl_items, self.top_k)), None, receipt
        texts = self.c.kl_texts()
        if texts is None:
            return items, scores, repeat, None
        kl_items = self.timed("score", lambda: text_items(self.probe, texts, self.q.kl.positions))
        kl_scores = self.timed("score", lambda: self.probe.score(kl_items, self.top_k))
        kl_repeat = self.timed("score", lambda: self.probe.score(kl_items, self.top_k))
        return kl_items, kl_scores, kl_repeat, None

    def self_score(self, items: list[Item], scores: Scores, repeat: Scores) -> None:
        cmp = compare_scores(items, scores, repeat, self.q.teacher_forced.top_k)
        n = cmp["stats"]["n"]
        if cmp["identical"]:
            verdict, summary = "repeat-identical", f"self-score repeat-identical on {n} tokens"
        else:
            verdict = "repeat-differs"
            summary = f"self-score repeat differs: max |dlogp| {cmp['stats']['max']:.3g} on {n} tokens"
        self.write("teacher-forced.json", {
            "reference": "self (scored twice)", "top_k": self.q.teacher_forced.top_k,
            "self_score": {"identical": cmp["identical"], "n": n, "stats": cmp["stats"],
                           "floored": cmp["floored"], "worst": cmp["worst"]},
            "scores": scores, "repeat": repeat})
        self.verdict("self_score", verdict, summary, "teacher-forced.json", **cmp["stats"])

    def floors(self, ref: Reference, prev: Reference | None,
               receipt: Reference | None) -> dict[str, Any]:
        """KL between scorings that should agree: the control twice, and across sessions."""
        k = self.q.kl.top_k
        floors: dict[str, Any] = {}
        if ref.kl_repeat is not None:
            floors["repeat"] = compare_kl(ref.kl_scores, ref.kl_repeat, k)
        if prev is not None and same_items(prev.kl_items, ref.kl_items):
            floors["previous_session"] = {**compare_kl(prev.kl_scores, ref.kl_scores, k),
                                          "against": f"{prev.session}-control"}
        if receipt is not None and receipt.kl_repeat is not None:
            floors["oracle_repeat"] = compare_kl(receipt.kl_scores, receipt.kl_repeat, k)
        for f in floors.values():
            f.pop("per_position", None)
        return floors

    def control_kl(self, ref: Reference, receipt: Reference | None) -> None:
        k = self.q.kl.top_k
        floor = ref.kl_floor()
        data: dict[str, Any] = {"oracle": "control" if receipt is None else "receipt", "top_k": k,
                                "floor": floor, "floors": ref.kl_floors}
        parts = [f"{name} {f['mean']:.3g}" for name, f in ref.kl_floors.items()]
        summary = f"KL floor: {', '.join(parts) or 'none measured'}"
        vs = None
        if receipt is not None:
            vs = compare_kl(receipt.kl_scores, ref.kl_scores, k)
            data.update(provenance=receipt.provenance, control_vs_oracle=vs)
            summary += f"; control vs oracle mean {vs['mean']:.4g} p99 {vs['p99']:.4g}"
        self.write("kl.json", data)
        self.verdict("kl", "floor", summary, "kl.json", floor=floor,
                     mean=vs["mean"] if vs else None, p99=vs["p99"] if vs else None)

    def previous_reference(self) -> Reference | None:
        sessions = list(self.c.sessions)
        i = sessions.index(self.ctx.session)
        for s in reversed(sessions[:i]):
            ref = self.phase.reference(self.runner, s)
            if ref is not None:
                return ref
        return None

    def settle_earlier_windows(self, ref: Reference) -> None:
        """control_position: last: windows that ran before the control get their greedy verdict now."""
        for window in self.c.windows_in(self.ctx.session):
            if window == CONTROL:
                break
            path = results.window_dir(self.runner.run_dir, self.ctx.session, window) / "greedy.json"
            if not path.exists():
                continue
            data = json.loads(path.read_text())
            if data.get("reference") not in (None, "pending"):
                continue
            cmp = greedy_compare(ref.greedy, data["outputs"])
            data.update(reference=f"{self.ctx.session}-control (ran after this window)",
                        comparison=cmp)
            results.write_json(path, data)
            self.runner.emit("verdict", session=self.ctx.session, window=window, check="greedy",
                             verdict="identical" if cmp["identical"] == cmp["n"] else "diverged",
                             summary=greedy_summary(cmp), file=str(path.relative_to(
                                 self.runner.run_dir)),
                             figures={"identical": cmp["identical"], "n": cmp["n"],
                                      "first_divergence": cmp["first_divergence"],
                                      "reference": data["reference"]})

    def drift(self) -> None:
        rows = [r for r in write_drift(self.runner.run_dir, self.phase.baseline_dir)
                if r["session"] == self.ctx.session]
        if not rows:
            return
        worst = max(rows, key=lambda r: abs(r["delta_pct"] or 0))
        bad = [r for r in rows if r["verdict"] == "drift"]
        summary = ", ".join(f"{r['class']} C{r['concurrency']} {r['delta_pct']:+.1f}% vs "
                            f"{r['against']}" for r in rows)
        self.runner.emit("verdict", session=self.ctx.session, window=self.ctx.window, check="drift",
                         verdict="drift" if bad else "within spread", summary=summary, file=DRIFT,
                         figures={"worst_pct": worst["delta_pct"]})

    def provenance(self) -> dict[str, Any]:
        facts = self.ctx.facts.as_json()["facts"]
        keep = ("model.path", "model.name", "model.file_type", "model.n_vocab", "model.params",
                "spec.draft_model", "server.model")
        return {"run": self.runner.run_id, "campaign": self.c.name, "session": self.ctx.session,
                "window": self.ctx.window, "server": self.ctx.adapter.name,
                "ruler_version": __version__, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "facts": {k: facts[k] for k in keep if k in facts}}

    # -- a window: against the session's reference -------------------------------------------

    def window(self, mine: list[dict[str, Any]]) -> None:
        ref = self.phase.reference(self.runner, self.ctx.session)
        if ref is None:
            self.write("greedy.json", {"reference": "pending", "seed": self.seed,
                                       "max_tokens": self.q.greedy.max_tokens, "outputs": mine})
            self.verdict("greedy", "no reference", "the session's control has not run (yet)",
                         "greedy.json", reference="none")
            return
        cmp = greedy_compare(ref.greedy, mine)
        self.write("greedy.json", {"reference": f"{ref.session}-control", "seed": self.seed,
                                   "max_tokens": self.q.greedy.max_tokens, "comparison": cmp,
                                   "outputs": mine})
        self.verdict("greedy", "identical" if cmp["identical"] == cmp["n"] else "diverged",
                     greedy_summary(cmp), "greedy.json", identical=cmp["identical"], n=cmp["n"],
                     first_divergence=cmp["first_divergence"], reference=f"{ref.session}-control")
        scores = self.guarded("score", lambda: self.probe.score(ref.items, ref.top_k))
        if scores is None:
            return
        self.teacher_forced(ref, scores)
        if self.lossy:
            self.guarded("kl", lambda: self.kl(ref, scores))
        self.no_effect(cmp)

    def teacher_forced(self, ref: Reference, scores: Scores) -> None:
        k = self.q.teacher_forced.top_k
        cmp = compare_scores(ref.items, ref.scores, scores, k)
        st = cmp["stats"]
        if st["n"] == 0:
            self.verdict("teacher_forced", "no reference", "no scored positions", None)
            return
        verdict = "exact" if st["max"] == 0 else "close" if st["p99"] <= TF_CLOSE else "differs"
        summary = (f"|dlogp| p50 {st['p50']:.3g} p99 {st['p99']:.3g} max {st['max']:.3g} on "
                   f"{st['n']} tokens" + (f" ({cmp['floored']} floored)" if cmp["floored"] else ""))
        self.write("teacher-forced.json", {
            "reference": f"{ref.session}-control", "top_k": k, "stats": st,
            "floored": cmp["floored"], "floor_rule": "outside the top-k: the k-th logprob",
            "worst": cmp["worst"], "positions": cmp["positions"], "scores": scores})
        self.verdict("teacher_forced", verdict, summary, "teacher-forced.json", **st,
                     floored=cmp["floored"])

    def kl(self, ref: Reference, scores: Scores) -> None:
        receipt_path = self.c.oracle_receipt()
        if receipt_path is not None:
            oracle = load_reference(receipt_path)
            oracle_scores = oracle.kl_scores
            win = self.timed("score", lambda: self.probe.score(oracle.kl_items, self.top_k))
            provenance: dict[str, Any] = {"receipt": str(receipt_path), **oracle.provenance}
        else:
            oracle_scores = ref.kl_scores
            win = scores if same_items(ref.kl_items, ref.items) else self.timed(
                "score", lambda: self.probe.score(ref.kl_items, self.top_k))
            provenance = {"oracle": f"{ref.session}-control", **ref.provenance}
        k = self.q.kl.top_k
        res = compare_kl(oracle_scores, win, k)
        floor = ref.kl_floor()
        above = res["mean"] is not None and res["mean"] > max(KL_CLEAR * (floor or 0.0), KL_MIN)
        self.write("kl.json", {"oracle": provenance, "top_k": k, "kl": res, "floor": floor,
                               "floors": ref.kl_floors,
                               "rule": f"above floor: mean > max({KL_CLEAR:g} x floor, {KL_MIN:g})",
                               "scores": win if win is not scores else "see teacher-forced.json"})
        floor_text = f"floor {floor:.3g}" if floor is not None else "no floor measured"
        summary = (f"KL mean {res['mean']:.4g} p99 {res['p99']:.4g} on {res['n']} positions "
                   f"({floor_text})")
        self.verdict("kl", "above floor" if above else "at floor", summary, "kl.json",
                     mean=res["mean"], p99=res["p99"], floor=floor)

    def no_effect(self, greedy: dict[str, Any]) -> None:
        """Boot facts equal, throughput rows inside the control's spread, greedy identical."""
        control_facts = self.control_facts()
        rows = rows_inside(self.rows(self.ctx.window), self.rows(CONTROL))
        facts = fact_diff(self.ctx.facts.as_json()["facts"], control_facts or {})
        differ: list[str] = []
        missing: list[str] = []
        if control_facts is None:
            missing.append("no control boot facts")
        elif facts:
            differ.append("boot facts differ: " + ", ".join(
                f"{k} {v[0]!r} vs {v[1]!r}" for k, v in list(facts.items())[:5]))
        if not rows["rows"]:
            missing.append("no throughput rows")
        for r in rows["rows"]:
            shape = f"{r['class']}/c{r['concurrency']}"
            if not r["judged"]:
                missing.append(f"{shape} cannot be judged (void, failed or missing)")
            elif not r["inside"]:
                differ.append(f"{shape} {r['delta']:+.1%} outside spread {r['tolerance']:.1%}")
        if greedy["identical"] != greedy["n"]:
            differ.append(f"greedy {greedy['identical']}/{greedy['n']}")
        verdict = ("observable effect" if differ else "undetermined" if missing
                   else "no observable effect")
        reasons = differ + missing
        self.write("no-effect.json", {"verdict": verdict, "reasons": reasons, "facts_differ": facts,
                                      "ignored_facts": IGNORED_FACT.pattern, "rows": rows["rows"],
                                      "greedy": f"{greedy['identical']}/{greedy['n']}"})
        summary = verdict if not reasons else f"{verdict}: {'; '.join(reasons)}"
        self.verdict("no_effect", verdict, summary, "no-effect.json")

    def control_facts(self) -> dict[str, Any] | None:
        facts = self.runner.control_facts.get(self.ctx.session)
        if facts is not None:
            return facts.as_json()["facts"]
        path = results.window_dir(self.runner.run_dir, self.ctx.session, CONTROL) / "boot-facts.json"
        return json.loads(path.read_text()).get("facts") if path.exists() else None

    def rows(self, window: str) -> dict[tuple[str, int], dict[str, Any]]:
        return {(r.cls, r.concurrency): r.row for r in self.runner.state.rows.values()
                if r.session == self.ctx.session and r.window == window and r.row}

    def tools(self) -> None:
        tp = self.q.tool_probe
        assert tp is not None
        report = tool_probe(self.probe, tp.n, tp.max_tokens, self.seed, self.knobs)
        self.write("tools.json", report)
        whys = sorted({c.get("why") or c.get("error", "") for c in report["calls"] if not c["ok"]})
        summary = f"{report['ok']}/{report['n']} parseable tool calls" + (
            f" ({'; '.join(whys)[:200]})" if whys else "")
        self.verdict("tool_probe", "ok" if report["ok"] == report["n"] else "failed", summary,
                     "tools.json", ok=report["ok"], n=report["n"])


def greedy_summary(cmp: dict[str, Any]) -> str:
    s = f"{cmp['identical']}/{cmp['n']} identical"
    if cmp["first_divergence"] is not None:
        s += f", first divergence at character {cmp['first_divergence']}"
    return s
