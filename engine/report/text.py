"""Deltas against a reference row and the report's number formats and markdown tables."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.campaign.spec import VerdictSpec
from engine.method import acceptance
from engine.method.verdict import Call, Rule, Versus, judge_one, versus
from engine.record.figures import FIGURES
from engine.record.judgement import Judgement, fallback_noise, judgement
from engine.record.state import RowState, RunState
from engine.report.run import Row, RunView
from engine.sanitize import Md, markdown
from engine.words import CONTROL, load_text, row_key


@dataclass(frozen=True)
class Delta:
    """(row - reference) / reference from their reps, with its 95 % interval (the noise between
    boots counted: engine.method.verdict) and the call on it."""

    value: float | None
    lo: float | None = None
    hi: float | None = None
    call: str = ""  # an engine.method.verdict.Call, "" where none is made
    why: str = ""  # why there is no value, or the call's figures
    method: str = ""
    p_adjusted: float | None = None

    @property
    def effect(self) -> bool:
        return self.call == Call.EFFECT

    def text(self) -> str:
        if self.value is None:
            return f"n/a ({self.why})"
        out = f"{self.value * 100:+.1f} %"
        if self.lo is not None and self.hi is not None:
            out += f" [{self.lo * 100:+.1f}, {self.hi * 100:+.1f}]"
        marks: dict[str, str] = {Call.EFFECT: " effect", Call.NONE: " (no effect)",
                                 Call.UNDETERMINED: " (undetermined)"}
        return out + marks.get(self.call, "")

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "call": self.call or None,
                "why": self.why or None, "method": self.method or None, "p_adjusted": self.p_adjusted}


def rule_of(view: RunView) -> Rule:
    """The campaign's verdict rules (the defaults for a run whose campaign cannot be read)."""
    return view.campaign.verdict.rule() if view.campaign is not None else VerdictSpec().rule()


def judgement_of(view: RunView) -> Judgement:
    """The campaign's judgement of the report's rows: throughput.csv's, each rep's tok/s the
    journal's or recomputed from its receipts (engine.record.judgement on them). Once per view, kept
    with it: a comparison asks each of its runs' for every row."""
    found = view.derived.get(judgement_of)
    if isinstance(found, Judgement):
        return found
    st = RunState(session_places=dict(view.state.session_places), looks=list(view.state.looks),
                  added=dict(view.state.added), baseline=dict(view.state.baseline))
    for r in view.rows:
        rs = RowState(r.session, r.window, r.cls, r.concurrency, r.rate, status=r.status,
                      row={"rep_tok_s": r.rep_tok_s, "rep_whole_tok_s": r.rep_whole_tok_s,
                           "stage_reps": r.stage_reps or None,
                           "basis": r.basis, "acceptance": r.acceptance})
        st.rows[rs.key] = rs
    j = view.derived[judgement_of] = judgement(st, rule_of(view))
    return j


def _missing(row: Row | None, ref: Row | None) -> str:
    if row is None:
        return "no row"
    if ref is None:
        return "no reference row"
    if not row.usable:
        return row.status or "no figure"
    return "" if ref.usable else f"reference {ref.status or 'has no figure'}"


def _from(v: Versus | None, call: str = "", why: str = "", p_adjusted: float | None = None) -> Delta:
    if v is None:
        return Delta(None, why="no reps")
    lo, hi = v.interval() or (None, None)
    def r(x: float | None) -> float | None:  # the figures as throughput.csv has them
        return None if x is None else round(x, 4)
    return Delta(r(v.delta), r(lo), r(hi), call, why, v.method(), p_adjusted)


def verdict(view: RunView, row: Row | None) -> Delta:
    """A window row against its session's control boots, with the campaign's call on it (the
    family: every window row of the run)."""
    if row is None:
        return Delta(None, why="no row")
    ctl = view.rows_of(row.session, CONTROL).get(row.shape)
    if (missing := _missing(row, ctl)):
        return Delta(None, why=missing)
    j = judgement_of(view)
    key = row_key(*row.key)
    judged, v = j.rows.get(key), j.versus(key)
    if judged is None:
        return _from(v, why=j.refused.get(key, "a later control boot: the noise between boots"))
    if v is None:
        return Delta(None, why=j.refused.get(key, "no reps"))
    return _from(v, judged.call.value, judged.why(), judged.p_adjusted)


def delta(row: Row | None, ref: Row | None, j: Judgement | None = None) -> Delta:
    """One boot's row against another's (a control against an earlier session's, a row against
    another run's): the noise between boots at the row's load counted (``j``'s, else declared),
    the call at the rule's error rate for this one comparison (no family)."""
    if (missing := _missing(row, ref)):
        return Delta(None, why=missing)
    assert row is not None and ref is not None
    rule = j.rule if j is not None else VerdictSpec().rule()
    noise = (j.noise_or_declared(row.cls, row.concurrency, row.rate) if j is not None
             else fallback_noise(rule))
    v = versus(row.rep_tok_s, [ref.rep_tok_s], noise)
    if v is None:
        return Delta(None, why="no reps")
    one = judge_one(v, rule)
    return _from(v, one.call.value, one.why(), one.p_adjusted)


def tok(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def fixed(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def cell(row: Row, name: str) -> str:
    """A figure of the row as the report's tables show it (its declaration's format); one rep has
    no spread ("-", never 0.0 %)."""
    if name == "spread" and row.reps < 2:
        return "-"
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
    """mean · p50 / p90 / p99 of one latency, ms (a row recorded before the mean: no mean)."""
    names = [f"{name}_p{p}" for p in (50, 90, 99)]
    if all(getattr(row, n) is None for n in names):
        return "-"
    mean = getattr(row, f"{name}_mean")
    return (f"{cell(row, f'{name}_mean')} · " if mean is not None else "") + " / ".join(
        cell(row, n) for n in names)


def latency_table(rows: Iterable[Row], slo: str) -> list[str]:
    """Latency means and percentiles (every rep's requests pooled), end to end included,
    achieved request rate and goodput."""
    rows = list(rows)
    if not rows:
        return []
    return [f"Latency (ms, mean · p50 / p90 / p99, the reps' requests pooled; E2EL: from the send "
            f"to the last byte), requests per second finished and, of them, within the SLOs "
            f"({slo}):", ""] + table(
        ["class", "C", head("ttft_p50"), head("itl_p50"), head("tpot_p50"), head("e2el_p50"),
         head("achieved_rps"), head("goodput_rps"), "status"],
        [[r.cls, load_cell(r), triple(r, "ttft"), triple(r, "itl"), triple(r, "tpot"),
          triple(r, "e2el"), cell(r, "achieved_rps"), cell(r, "goodput_rps"), r.status]
         for r in rows])


def slo_text(view: RunView) -> str:
    slo = view.campaign.workload.slo.text() if view.campaign is not None else ""
    return slo or "none set: no goodput"


def acceptance_text(row: Row) -> Md:
    """Length / rate, each with its interval across the reps where there is one."""
    if row.accept_len is None and row.accept_rate is None:
        return Md("-")

    def one(name: str) -> str:
        lo, hi = getattr(row, f"{name}_lo"), getattr(row, f"{name}_hi")
        spec = FIGURES[name].fmt
        return cell(row, name) + (f" [{lo:{spec}}, {hi:{spec}}]" if lo is not None and hi is not None else "")
    # A simulated acceptance is what the server was told, not what it measured: said beside it.
    sim = f" — {markdown(row.acceptance)}" if acceptance.is_simulated(row.as_json()) else ""
    return Md(f"{one('accept_len')} / {one('accept_rate')}{sim}")  # ruler's figures, the source escaped


def table_cell(value: object) -> str:
    """One cell of a document's table: ruler's own markdown (:class:`Md`: a link to a receipt, a
    code span, a bold call, its figures) as written; a number as it prints; any other text, from
    whatever it came (a campaign, a server, a journal), through :func:`markdown`, the one escaping
    path: never a link, an image, HTML or a cell of its own."""
    if isinstance(value, Md):
        return value.replace("\n", " ")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return markdown(value)


def table(headers: Sequence[object], rows: Iterable[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(table_cell(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(table_cell(v) for v in r) + " |" for r in rows]
    return out + [""]


_RECEIPT = re.compile(r"[\w.@+,=~-]+(?:/[\w.@+,=~-]+)*")


def link(view: RunView, rel: str | None, text: str | None = None) -> Md:
    """A receipt link relative to report.md, only when the file is there: a path within the run
    directory (a journal names it; a damaged one may name /etc/passwd or javascript:), of the
    characters a receipt's name has; nothing otherwise."""
    if not rel or not _RECEIPT.fullmatch(rel) or ".." in rel.split("/") or not (view.dir / rel).exists():
        return Md("")
    return Md(f"[{markdown(text or Path(rel).name)}]({rel})")


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

