"""Trace replay: a file of timed requests read, windowed and turned into items sent at their times.

Two formats. Mooncake's JSONL (one request a line: ``timestamp`` in ms, ``input_length`` and
``output_length`` in tokens, ``hash_ids`` naming the 512-token blocks the input is made of, equal
ids equal blocks across requests: the shared prefixes a prefix cache reuses), and a plain trace,
CSV with a header or JSONL, of ``time`` in seconds, ``input_length`` and ``output_length``.

Prompts are synthesised from words of one token each (engine.campaign.sources.shared_prefix): a
block's text is seeded by the seed and its hash id alone, so every request naming a block carries
the same tokens for it, and every rep, window and run the same prompts. A request without hash
ids gets blocks of its own.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import random
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, cast

from pydantic import Field, Strict

from engine.campaign.prompts import DataFileError, json_line, text_lines
from engine.campaign.sources.base import Frozen, Source
from engine.campaign.sources.item import Item
from engine.campaign.sources.shared_prefix import words

BLOCK_TOKENS = 512  # Mooncake's block: one hash id names this many tokens
MAX_LENGTH = 1 << 20  # tokens: past it, a typo


class TraceSpec(Frozen):
    """A trace class: its file, the window of it replayed and how fast."""

    file: Annotated[str, Strict()]
    # Every send time is multiplied by this: 0.5 replays the trace twice as fast, 2 at half speed.
    time_scale: Annotated[float, Strict(), Field(gt=0, le=1000, allow_inf_nan=False)] = 1.0
    # The window of the trace: from this many seconds into it, for this many (None: to its end).
    start: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)] = 0.0
    seconds: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] | None = None
    block_tokens: Annotated[int, Strict(), Field(ge=1, le=65536)] = BLOCK_TOKENS
    seed: Annotated[int, Strict(), Field(ge=0, lt=1 << 63)] = 0  # the synthesised prompts' text


@dataclass(frozen=True, slots=True)  # a trace holds a million of them
class TraceRequest:
    line: int  # where it is in its file, for errors and the explanation
    t: float  # seconds from the trace's start
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None  # None: the request shares no block


def read_trace(path: Path, block_tokens: int = BLOCK_TOKENS) -> list[TraceRequest]:
    """Every request of a trace file, in its order, its times from the first's; a record ruler
    cannot replay is a DataFileError that reads ``path:line: problem``."""
    out = list(_requests(path, block_tokens))
    first = out[0].t
    return [dataclasses.replace(r, t=r.t - first) for r in out] if first else out


def _requests(path: Path, block_tokens: int) -> Iterator[TraceRequest]:
    """The trace's requests as read, one at a time (times as the file has them), each checked
    and in time order; a trace with none is an error."""
    lines = text_lines(path, DataFileError, "no records")
    rows = _csv_rows(path, lines) if path.suffix.lower() == ".csv" else _jsonl_rows(path, lines)
    last: TraceRequest | None = None
    for n, row in rows:
        req = _request(path, n, row, block_tokens)
        if last is not None and req.t < last.t:
            raise DataFileError(path, f"time goes backwards ({_secs(req.t)} after {_secs(last.t)}): "
                                  "a trace is in time order", n)
        yield req
        last = req
    if last is None:
        raise DataFileError(path, "no requests: the trace is empty")


def _secs(t: float) -> str:
    return f"{t:g} s"


def _jsonl_rows(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in lines:
        if not line.strip():
            continue
        obj = json_line(path, n, line, DataFileError)
        if not isinstance(obj, dict):
            raise DataFileError(path, "expected a JSON object (timestamp or time, input_length, "
                                "output_length)", n)
        yield n, obj


def _csv_rows(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, dict[str, Any]]]:
    # csv counts the lines it consumes: its line_num is the file's line, as text_lines numbers them.
    reader = csv.DictReader(line + "\n" for _, line in lines)
    try:
        yield from _csv_records(path, reader)
    except csv.Error as exc:  # a field past csv's limit (131072 characters)
        # DictReader's own line_num is the last row it gave; its reader's, the line that failed.
        raise DataFileError(path, f"not CSV ruler reads ({exc})", reader.reader.line_num or 1) from None


def _csv_records(path: Path, reader: csv.DictReader[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    fields = [f.strip() for f in reader.fieldnames or []]
    need = {"input_length", "output_length"}
    if not need <= set(fields) or not {"time", "timestamp"} & set(fields):
        raise DataFileError(path, "the header must name time (s) or timestamp (ms), input_length "
                              f"and output_length; it has {', '.join(fields) or 'nothing'}", 1)
    for row in reader:
        values = {k.strip(): v for k, v in row.items() if k is not None}
        if None in row or any(v is None for v in values.values()):
            raise DataFileError(path, f"expected {len(fields)} fields, as the header has",
                                  reader.line_num)
        yield reader.line_num, {k: _number(v) for k, v in values.items()}


def _number(value: str) -> Any:
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


def _request(path: Path, n: int, row: dict[str, Any], block_tokens: int) -> TraceRequest:
    def length(key: str) -> int:
        v = row.get(key)
        if v is None:
            raise DataFileError(path, f"no {key}", n)
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_LENGTH:
            raise DataFileError(path, f"{key} must be a whole number of tokens from 1 to "
                                  f"{MAX_LENGTH}, got {v!r}", n)
        return v

    if "timestamp" in row:
        t, unit = row["timestamp"], 1000.0  # Mooncake's milliseconds
    elif "time" in row:
        t, unit = row["time"], 1.0
    else:
        raise DataFileError(path, "no timestamp (ms) or time (s)", n)
    if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
        raise DataFileError(path, f"the time must be a number at least 0, got {t!r}", n)
    inp, out = length("input_length"), length("output_length")
    ids = row.get("hash_ids")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise DataFileError(path, "hash_ids must be a non-empty list of whole numbers", n)
        if inp > len(ids) * block_tokens:
            raise DataFileError(path, f"input_length {inp} is more than its {len(ids)} hash_ids "
                                  f"of {block_tokens} tokens hold", n)
    return TraceRequest(n, t / unit, inp, out, tuple(ids) if ids is not None else None)


def window(reqs: Sequence[TraceRequest], start: float = 0.0,
           seconds: float | None = None) -> list[TraceRequest]:
    """The requests from ``start`` seconds into the trace for ``seconds`` (None: to its end), their
    times from the window's start."""
    end = math.inf if seconds is None else start + seconds
    return [TraceRequest(r.line, r.t - start, r.input_length, r.output_length, r.hash_ids)
            for r in reqs if start <= r.t < end]


def blocks(req: TraceRequest, block_tokens: int) -> list[str]:
    """The keys of a request's blocks: its hash ids, or blocks of its own (keyed by its line)."""
    if req.hash_ids is not None:
        return [f"h{h}" for h in req.hash_ids]
    return [f"l{req.line}b{k}" for k in range(math.ceil(req.input_length / block_tokens))]


def prompt(req: TraceRequest, seed: int, block_tokens: int = BLOCK_TOKENS) -> str:
    """The request's prompt: its blocks' seeded words, cut to its input length."""
    out: list[str] = []
    for key in blocks(req, block_tokens):
        if len(out) >= req.input_length:
            break
        out += words(random.Random(f"{seed}:trace:{key}"), block_tokens).split(" ")
    return " ".join(out[:req.input_length])


def items(reqs: Sequence[TraceRequest], seed: int,
          block_tokens: int = BLOCK_TOKENS) -> list[dict[str, Any]]:
    """The requests as items: one user message each, the trace's output length, its time."""
    return [{"messages": [{"role": "user", "content": prompt(r, seed, block_tokens)}],
             "max_tokens": r.output_length, "at": r.t} for r in reqs]


def shared_fraction(reqs: Sequence[TraceRequest], block_tokens: int = BLOCK_TOKENS) -> float:
    """The share of the trace's input tokens in a prefix an earlier request already sent: what a
    prefix cache that kept everything would serve (a block counts only after a shared prefix, as
    a prefix cache matches; a partial last block counts its tokens)."""
    # The prefixes seen, as a trie: (its parent prefix's node, its last block) -> its node. A
    # prefix is one entry, not a tuple of its blocks: memory and time linear in the blocks.
    seen: dict[tuple[int, str], int] = {}
    shared = total = 0
    for r in reqs:
        node, k, matching = 0, 0, True
        for key in blocks(r, block_tokens):
            child = seen.get((node, key))
            if child is None:
                matching = False
                child = seen[(node, key)] = len(seen) + 1
            elif matching:
                k += 1
            node = child
        shared += min(k * block_tokens, r.input_length)
        total += r.input_length
    return shared / total if total else 0.0


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99 (interpolated, as numpy's default) and max of a series: the explanation's
    lengths. Without numpy: the report imports the campaign's schema, not the run's statistics."""
    if not values:
        return {}
    if len(values) == 1:
        return {"p50": values[0], "p90": values[0], "p99": values[0], "max": values[0]}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98], "max": max(values)}


def summary(reqs: Sequence[TraceRequest], time_scale: float = 1.0,
            block_tokens: int = BLOCK_TOKENS) -> dict[str, Any]:
    """What a trace class becomes: its requests, their lengths, its shared-prefix fraction, its
    duration as replayed (scaled) and its mean rate."""
    duration = (reqs[-1].t - reqs[0].t) * time_scale if reqs else 0.0
    return {"requests": len(reqs),
            "input_length": percentiles([r.input_length for r in reqs]),
            "output_length": percentiles([r.output_length for r in reqs]),
            "shared_prefix": round(shared_fraction(reqs, block_tokens), 4),
            "duration_s": round(duration, 3),
            "mean_rps": round((len(reqs) - 1) / duration, 3) if duration > 0 else None}


def spec_requests(spec: TraceSpec, path: Path) -> list[TraceRequest]:
    """The requests of a trace class: its file's, in its window (a window with none is an error)."""
    reqs = window(read_trace(path, spec.block_tokens), spec.start, spec.seconds)
    if not reqs:
        _empty_window(spec, path)
    return reqs


def check_requests(spec: TraceSpec, path: Path) -> None:
    """What :func:`spec_requests` would raise, reading the file a line at a time and keeping no
    request: validate's check of a trace of any length in the memory of one line."""
    end = math.inf if spec.seconds is None else spec.start + spec.seconds
    first: float | None = None
    found = False
    for r in _requests(path, spec.block_tokens):
        first = r.t if first is None else first
        found = found or spec.start <= r.t - first < end
    if not found:
        _empty_window(spec, path)


def _empty_window(spec: TraceSpec, path: Path) -> NoReturn:
    end = "its end" if spec.seconds is None else f"{spec.start + spec.seconds:g} s"
    raise DataFileError(path, f"no requests in the window ({spec.start:g} s to {end} into the trace)")


def spec_items(spec: TraceSpec, path: Path) -> list[dict[str, Any]]:
    return items(spec_requests(spec, path), spec.seed, spec.block_tokens)


def lengths_text(p: dict[str, float]) -> str:
    """Percentiles as the explanation gives them: ``p50 636 / p90 846 / p99 885 / max 893``."""
    return " / ".join(f"{k} {v:.0f}" for k, v in p.items())


def describe(spec: TraceSpec, path: Path) -> list[str]:
    """What a trace class becomes, for ``ruler validate --explain``."""
    reqs = spec_requests(spec, path)
    s = summary(reqs, spec.time_scale, spec.block_tokens)
    end = "its end" if spec.seconds is None else f"{spec.start + spec.seconds:g} s"
    rate = f", {s['mean_rps']:g} req/s on average" if s["mean_rps"] else ""
    return [f"replayed: {s['requests']} requests from {spec.start:g} s to {end} of the trace at time "
            f"scale {spec.time_scale:g}, over {s['duration_s']:g} s{rate}, open loop at their own times "
            "(the workload's concurrency and rate do not apply)",
            f"trace lengths: input tokens {lengths_text(s['input_length'])}; output tokens "
            f"{lengths_text(s['output_length'])}",
            f"shared blocks: {s['shared_prefix']:.1%} of input tokens are in a prefix of blocks of "
            f"{spec.block_tokens} an earlier request sent (what a prefix cache may serve); text "
            f"synthesised, seed {spec.seed}"]


class TraceSource(Source):
    """``trace:``: a trace file replayed at its own times (the class's one load)."""

    key, what = "trace", "trace file"

    def file(self, spec: Any) -> str | None:
        return str(spec.file)

    def items(self, spec: Any, path: Path | None) -> list[Item]:
        assert path is not None  # file() always names one
        return cast(list[Item], spec_items(spec, path))

    def check(self, spec: Any, path: Path | None) -> None:
        assert path is not None  # file() always names one
        check_requests(spec, path)  # every record and the window; the prompts cannot fail

    def describe(self, spec: Any, path: Path | None) -> list[str]:
        assert path is not None  # file() always names one
        return describe(spec, path)
