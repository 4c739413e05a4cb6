"""A row's figures, declared once: each one's name, JSON type, unit, formats, where it goes (the
``row_done`` event, a throughput.csv column, a report header, a console column) and the request
record fields it is computed from.

The journal's ``row_done`` fields (engine.record.events), throughput.csv's columns and the report's
reading of them (engine.report.run) follow :data:`ROW` in its order; the report's tables and the
console's reps table take their headers, columns and formats from a figure's declaration. A row's
words that the event and the file hold alike (its axis, status, reason, receipts) are declared the
same way, so that the table is the row's whole schema.

A figure added later goes at the end of the CSV's columns, with ``later=True``: a file recorded
before it reads it as empty.
"""

# No ``from __future__ import annotations``: ``Figure.type`` holds an evaluated type, which
# engine.record.events builds the row_done event's TypedDict from.

import math
from dataclasses import dataclass
from typing import Any

# Where the journal holds a figure (Figure.journal).
ROW_DONE = "row_done"  # a field of the row_done event
SHAPE = "shape"  # a field of the row's shape (events.Shape), in every event of the row
WRITTEN = "written"  # in throughput.csv alone: computed when the file is written (receipts)


@dataclass(frozen=True)
class Figure:
    """One field of a finished row; the defaults are a row_done field that is also a CSV column."""

    name: str  # its key in the row_done event, and its throughput.csv column
    type: Any  # its JSON type in the event: the journal's schema
    doc: str
    unit: str = ""  # tok/s, ms, req/s, s, J/token, W, MHz; "" a count, a share or a word
    fmt: str = ""  # the report's format spec; " %" at its end: a share shown as a percentage
    cell: str = ""  # the console's format spec
    compact: bool = False  # the console shows no places from 1000 up (a narrow column)
    header: str = ""  # its column in the report's tables ("": none of its own)
    column: str = ""  # its column in the console's reps table ("": none)
    journal: str = ROW_DONE
    required: bool = False  # every row_done has it; the others are absent when no rep was measured
    csv: bool = True  # a throughput.csv column
    later: bool = False  # a CSV column added after runs were recorded without it: read as empty
    source: tuple[str, ...] = ()  # the request record (engine.record.request) fields it is from

    def text(self, v: float | None) -> str:
        """The report's cell: ``-`` for no value (a journal from before the writers refused them
        can hold Infinity: no value either)."""
        if v is None or not math.isfinite(v):
            return "-"
        if self.fmt.endswith(" %"):
            return f"{format(v * 100, self.fmt[:-2])} %"
        return format(v, self.fmt)

    def short(self, v: Any) -> str:
        """The console's cell: ``-`` for no value (an empty one included)."""
        if v is None or v == "" or not math.isfinite(x := float(v)):
            return "-"
        return f"{x:.0f}" if self.compact and abs(x) >= 1000 else format(x, self.cell)


_TOKENS = ("completion_tokens", "start", "end", "error")
_TTFT = ("start", "first_token", "error")
_TPOT = ("completion_tokens", "first_token", "end", "error")
_STEADY = ("completion_tokens", "start", "first_token", "end", "error")
_E2EL = ("start", "end", "error")


def _latency(name: str, header: str, what: str, source: tuple[str, ...]) -> tuple[Figure, ...]:
    """A latency's p50, p90 and p99 over every rep's requests pooled (stats.latency_figures); the
    report shows the three in one column under ``header``."""
    return tuple(Figure(f"{name}_p{p}", float | None, f"{what}, p{p}, ms", unit="ms", fmt=".1f",
                        header=header, later=True, source=source) for p in (50, 90, 99))


ROW: tuple[Figure, ...] = (
    Figure("session", str, "the session", journal=SHAPE),
    Figure("window", str, "the window", journal=SHAPE),
    Figure("axis", str, "the window's axis label", required=True),
    Figure("class", str, "the prompt class", journal=SHAPE),
    Figure("concurrency", int, "closed-loop workers; 0 for an open-loop row", journal=SHAPE),
    # NotRequired in events.Shape: a closed-loop row has none.
    Figure("rate", float, "an open-loop row's arrival rate", unit="req/s", journal=SHAPE, later=True),
    Figure("reps", int, "the reps measured"),
    Figure("agg_tok_s", float, "the median of the reps' tok/s (rep_tok_s), each over its steady "
           "window when basis is steady, else over the whole rep", unit="tok/s", fmt=".2f",
           cell=".1f", compact=True, header="tok/s", column="median", source=_STEADY),
    Figure("per_user_tok_s", float, "agg_tok_s over the users, on its basis: / C closed-loop "
           "workers (open loop: the median rep's tok/s over its mean requests in flight)",
           unit="tok/s", fmt=".2f", cell=".1f", compact=True, header="per user",
           column="user", source=_TOKENS),
    Figure("ttft_ms", float | None, "the reps' median of their median time to first token",
           unit="ms", fmt=".1f", cell=".1f", compact=True, header="TTFT ms", column="ttft ms",
           source=_TTFT),
    Figure("decode_tok_s", float | None, "the reps' median of their median decode tok/s after the "
           "first token", unit="tok/s", fmt=".2f", header="decode tok/s", source=_TPOT),
    *_latency("ttft", "TTFT", "time to first token", _TTFT),
    *_latency("itl", "ITL", "the gaps between two chunks that carried text", ("gaps_ms", "error")),
    *_latency("tpot", "TPOT", "time per output token after the first", _TPOT),
    Figure("achieved_rps", float | None, "finished requests a second, the reps' median",
           unit="req/s", fmt=".2f", cell=".2f", header="req/s", column="req/s", later=True,
           source=("start", "end", "error")),
    Figure("goodput_rps", float | None, "of them, those within the campaign's SLOs (None: none "
           "set)", unit="req/s", fmt=".2f", cell=".2f", header="goodput req/s", column="good/s",
           later=True, source=_TPOT + ("start",)),
    Figure("accept_len", float | None, "speculative decoding: 1 + accepted / verify steps",
           fmt=".2f", cell=".2f", column="acc len", source=("acceptance",)),
    Figure("accept_rate", float | None, "speculative decoding: accepted / drafted tokens",
           fmt=".3f", cell=".1%", column="acc rate", source=("acceptance",)),
    Figure("accept_source", str, "what acceptance is from: metrics | per-request | \"\""),
    # From here to throttled: NVML (engine.gpu, stats.gpu_figures); empty without a GPU.
    Figure("j_per_token", float | None, "the median rep's energy a token", unit="J/token", later=True),
    Figure("power_w", float | None, "the median rep's mean power", unit="W", later=True),
    Figure("sm_mhz_min", float | None, "the lowest SM clock under load", unit="MHz", later=True),
    Figure("throttled", bool | None, "whether any rep saw a power or thermal throttle reason",
           later=True),
    Figure("spread", float | None, "(max - min) / mean of the reps' tok/s, on the row's basis "
           "(None: no rep moved a token)",
           fmt=".1f %", cell=".1%",
           header="spread", column="spread"),
    # A window row against its session's control boots, with the noise between boots
    # (engine.record.judgement).
    Figure("delta", float | None, "(row - control) / control tok/s, the control boots' geometric "
           "mean", journal=WRITTEN, later=True),
    Figure("delta_lo", float | None, "... its 95 % interval's low end (the noise between boots in it)",
           journal=WRITTEN, later=True),
    Figure("delta_hi", float | None, "... and high end", journal=WRITTEN, later=True),
    Figure("boot_noise", float | None, "how far the same server moves between boots at this load "
           "(relative sd)", journal=WRITTEN, later=True),
    Figure("boot_noise_how", str, "measured (boots, df) or declared (verdict.boot_noise)",
           journal=WRITTEN, later=True),
    Figure("p_value", float | None, "the delta's two-sided p-value", journal=WRITTEN, later=True),
    Figure("p_adjusted", float | None, "... adjusted over the campaign's window rows (verdict."
           "correction)", journal=WRITTEN, later=True),
    Figure("verdict", str, "observable effect | no observable effect (TOST within verdict.margin) "
           "| undetermined", journal=WRITTEN, later=True),
    Figure("verdict_why", str, "the call's figures: p-values, the equivalence interval, the "
           "sessions it would take", journal=WRITTEN, later=True),
    Figure("cache", str, "the campaign's cache policy the reps ran under: keep | flush", later=True),
    Figure("cache_hit", float | None, "share of the reps' prompt tokens served from the prefix "
           "cache", fmt=".1f %", later=True, source=("prompt_tokens", "cached_tokens", "error")),
    Figure("status", str, "ok | noisy | void | failed | aborted (engine.words.RowStatus)", required=True),
    Figure("attempts", int, "attempts measured (a void row's reruns)", required=True),
    Figure("reason", str, "why the row has its status", required=True),
    Figure("source", str, "the receipts, \";\"-separated, relative to the run directory",
           required=True),
    Figure("ruler_check", str, "the window's ruler check verdict", journal=WRITTEN),
    # The steady window (engine.method.steady); a row without these was measured before it: its
    # tok/s are the whole reps'.
    Figure("basis", str, "steady | whole: what rep_tok_s and agg_tok_s are over", later=True),
    Figure("whole_tok_s", float, "the whole reps' median tok/s, beside the headline", unit="tok/s",
           fmt=".2f", header="whole-rep tok/s", later=True, source=_TOKENS),
    Figure("ramp_s", float | None, "the reps' median seconds before the steady window", unit="s",
           fmt=".2f", later=True, source=_STEADY),
    Figure("steady_s", float | None, "... in it", unit="s", fmt=".2f", later=True, source=_STEADY),
    Figure("tail_s", float | None, "... after it", unit="s", fmt=".2f", later=True, source=_STEADY),
    Figure("spread_shape", str, "engine.method.leak: leak | noise | \"\" (within the spread)",
           later=True),
    Figure("spread_why", str, "how the rule read the reps", later=True),
    # Reps to a precision (engine.method.precision); absent when the campaign asks for none.
    Figure("precision", float, "the half-width asked for", later=True),
    Figure("half_width", float | None, "the half-width reached", fmt=".1f %", header="half-width",
           later=True),
    Figure("precision_status", str, "reached | cap | cannot", header="precision", later=True),
    Figure("stage_reps", int, "the first stage, whose variance the row's interval uses", later=True),
    # Acceptance across reps and per draft position (engine.method.acceptance); empty without drafts.
    Figure("accept_len_lo", float | None, "acceptance length: the 95 % t interval across the "
           "reps, low end (None: fewer than two reps)", fmt=".2f", later=True, source=("acceptance",)),
    Figure("accept_len_hi", float | None, "... high end", fmt=".2f", later=True, source=("acceptance",)),
    Figure("accept_rate_lo", float | None, "acceptance rate: the same interval, low end",
           fmt=".3f", later=True, source=("acceptance",)),
    Figure("accept_rate_hi", float | None, "... high end", fmt=".3f", later=True, source=("acceptance",)),
    Figure("accept_per_pos", str, "per draft position, the share of verify steps that accepted "
           "it, space-separated (\"\": the server gives none)", later=True, source=("acceptance",)),
    # A window on another stack (engine.quality.stacks): "" on the control's own stack.
    Figure("parity", str, "token-identical | differs on N of M prompts | not compared: whether "
           "the window's stack and the control's sent this class the same token ids",
           journal=WRITTEN, later=True),
    # The means beside the percentiles and the end-to-end latency (what vLLM's bench serve and
    # GuideLLM report), every rep's requests pooled (stats.latency_figures).
    *(Figure(f"{name}_mean", float | None, f"{what}, mean, ms", unit="ms", fmt=".1f", later=True,
             source=source) for name, what, source in (
        ("ttft", "time to first token", _TTFT), ("itl", "the gaps between two chunks that "
                                                 "carried text", ("gaps_ms", "error")),
        ("tpot", "time per output token after the first", _TPOT))),
    *_latency("e2el", "E2EL", "end-to-end latency, from the send to the last byte", _E2EL),
    Figure("e2el_mean", float | None, "end-to-end latency, mean, ms", unit="ms", fmt=".1f",
           later=True, source=_E2EL),
    Figure("acceptance", str, "natural (the server measured it) | simulated (how: its server was "
           "told to accept drafts at a set rate, engine.method.acceptance) | \"\" without "
           "acceptance figures", later=True),
    # In the event alone.
    Figure("rep_tok_s", list[float], "each rep's tok/s, over the basis", csv=False),
    Figure("failed_requests", int, "requests that failed, every rep's", csv=False, source=("error",)),
    Figure("error", str, "the commonest request error (\"\" when none failed)", csv=False,
           source=("error",)),
    Figure("metrics_rejected", str, "reps whose metrics delta was bad server data, and why",
           csv=False),
    Figure("throttle_cause", str, "the slowest rep's throttle, when the GPU explains a wide row",
           csv=False),
    Figure("void_reps", str, "reps voided before they ran (a failed cache flush), and why", csv=False),
    Figure("cache_source", str, "metrics | per-request | \"\" (the server does not say)", csv=False),
    Figure("rep_whole_tok_s", list[float], "each rep's whole tok/s", csv=False, source=_TOKENS),
    Figure("rep_accept_len", list[float | None], "each rep's acceptance length", csv=False,
           source=("acceptance",)),
    Figure("rep_accept_rate", list[float | None], "each rep's acceptance rate", csv=False,
           source=("acceptance",)),
    Figure("rep_accept_per_pos", list[list[float]], "each rep's per-position acceptance",
           csv=False, source=("acceptance",)),
    Figure("reps_needed", int | None, "the reps the precision rule projected (None: beyond "
           "max_reps)", csv=False),
    Figure("boot_half", float | None, "with a precision: the noise between boots' part of the "
           "delta's half-width at the row's shape (past the precision, reps cannot reach it)",
           csv=False),
    Figure("turns", list[dict[str, Any]], "multi-turn: per turn index, every rep pooled "
           "(stats.turn_figures): requests, TTFT, TPOT, prompt and cached tokens, cache hit",
           csv=False, source=("turn", "prompt_tokens", "cached_tokens", "start", "first_token", "end")),
)

FIGURES: dict[str, Figure] = {f.name: f for f in ROW}
CSV_COLUMNS: list[str] = [f.name for f in ROW if f.csv]
LATER_COLUMNS = frozenset(f.name for f in ROW if f.later)
