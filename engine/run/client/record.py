"""A stream's events into its request record: tokens, gaps, finish reason, usage, acceptance.

Whatever the bytes, the outcome is the record's fields or its error, never an exception.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from engine.record.request import RequestRecord
from engine.run.client.sse import SseEvents
from engine.servers.client import ServerClient, cached_tokens
from engine.servers.data import (
    PARSE_ERRORS,
    BadServerData,
    bad_data,
    mapping,
    optional_count,
    show,
    text,
)

# A server may batch tokens into one chunk (speculative steps, a stream interval), but not
# thousands: a count beyond this per chunk is not a count the stream carried.
MAX_TOKENS_PER_CHUNK = 1024


def new_record(worker: int, index: int, prompt_index: int) -> RequestRecord:
    return {"worker": worker, "index": index, "prompt_index": prompt_index, "first_token": None,
            "completion_tokens": None, "chunks": 0, "error": None}


# The longest SSE event taken: a chat chunk is a few hundred bytes, one with logprobs a few KiB.
MAX_EVENT = 1 << 20

class Events:
    """A stream's SSE events into its record, fed body bytes with their reads' arrival times.

    Whatever the bytes, the outcome is the record's fields or its error, never an exception. The
    stream ends at ``[DONE]`` or at its first error; later events are not read. This runs once
    per chunk, in bulk: fast type checks on the shapes servers send, and the checkers of
    engine.servers.data to name the field of any other.
    """

    def __init__(self, record: RequestRecord, adapter: ServerClient) -> None:
        self.record, self.adapter = record, adapter
        self.acceptance_fields = adapter.acceptance_fields
        self.sse = SseEvents()
        self.ended = False
        self.chunks = 0
        self.first: float | None = None  # when the first token arrived
        self.last = 0.0  # when the previous one did
        self.gaps: list[float] = []
        self.chars = 0

    def feed(self, bodies: list[bytes], times: list[float]) -> None:
        """The events completed by ``bodies`` (each the body bytes of one read, which arrived at
        the same place in ``times``), each at the arrival time of the read its last byte came in."""
        if self.ended:
            return
        payloads, stamps = self.sse.feed(bodies, times)
        if payloads:
            self._read(payloads, stamps)
        if not self.ended and len(self.sse.rest) > MAX_EVENT:
            # Each read would copy the whole unfinished event again: memory and time without end.
            size = len(self.sse.rest)
            self.sse.rest = b""
            self.fail(f"a stream event of {size:,} bytes with no end yet (more than {MAX_EVENT:,}): "
                      "not a chat stream's chunk")

    def _read(self, payloads: list[bytes], stamps: list[float]) -> None:  # noqa: C901 - one frame a batch
        """SSE data payloads into the record, until ``[DONE]`` or the stream's first error.

        One loop for a whole batch, its state in locals: this runs once per chunk."""
        record, loads, fields = self.record, orjson.loads, self.acceptance_fields
        chunks, chars, first, last, gap = self.chunks, self.chars, self.first, self.last, self.gaps.append
        try:
            for payload, now in zip(payloads, stamps, strict=True):
                if payload == b"[DONE]":
                    self.ended = True
                    return
                try:
                    chunk = loads(payload)
                except orjson.JSONDecodeError:
                    self.fail(f"malformed stream chunk: {payload[:200]!r}")
                    return
                if type(chunk) is not dict:
                    self.fail(f"malformed stream chunk (not an object): {payload[:200]!r}")
                    return
                if "error" in chunk:
                    self.fail(f"stream error: {json.dumps(chunk['error'])[:300]}")
                    return
                chunks += 1
                try:
                    choices = chunk.get("choices")
                    if choices:
                        if type(choices) is not list:
                            raise BadServerData(f"choices is {show(choices)}, not a list")
                        for i, choice in enumerate(choices):
                            if type(choice) is not dict:
                                choice = mapping(choice, f"choices[{i}]")
                            delta = choice.get("delta")
                            n = 0
                            if delta:
                                if type(delta) is not dict:
                                    delta = mapping(delta, f"choices[{i}].delta")
                                content = delta.get("content")
                                n = (len(content) if type(content) is str
                                     else len(text(content, "delta.content")))
                                reasoning = delta.get("reasoning_content")
                                if reasoning is not None:
                                    n += len(text(reasoning, "delta.reasoning_content"))
                            elif delta is not None:
                                mapping(delta, f"choices[{i}].delta")  # raises: not an object
                            if n:
                                chars += n
                                if first is None:
                                    first = now
                                else:
                                    gap(now - last)
                                last = now
                            if finish := choice.get("finish_reason"):
                                record["finish_reason"] = text(finish, "finish_reason")
                    elif choices is not None and type(choices) is not list:
                        raise BadServerData(f"choices is {show(choices)}, not a list")
                    if (usage := chunk.get("usage")) is not None:
                        self._usage(usage)
                    if fields and not fields.isdisjoint(chunk):
                        self._acceptance(chunk)
                except BadServerData as e:
                    self.fail(f"bad stream chunk: {e}"[:300])
                    return
        finally:
            self.chunks, self.chars, self.first, self.last = chunks, chars, first, last

    def _acceptance(self, chunk: dict[str, Any]) -> None:
        try:
            acc = self.adapter.request_acceptance(chunk)
        except PARSE_ERRORS as e:  # as engine.servers.data.reading, without a context per chunk
            raise bad_data(f"{self.adapter.name} acceptance fields", e) from e
        if acc:
            self.record["acceptance"] = acc

    def _usage(self, usage: Any) -> None:
        usage = mapping(usage, "usage")
        if usage:
            tokens = optional_count(usage.get("completion_tokens"), "usage.completion_tokens")
            if tokens is not None:
                self.record["completion_tokens"] = tokens
            self.record["prompt_tokens"] = optional_count(usage.get("prompt_tokens"), "usage.prompt_tokens")
            self.record["cached_tokens"] = cached_tokens(usage)

    def fail(self, error: str) -> None:
        if not self.record.get("error"):
            self.record["error"] = error
        self.ended = True

    def finish(self, end: float, limit: int | None) -> None:
        """The record once its stream ended: no usage or an implausible one is its error."""
        record = self.record
        record["end"] = end
        record["chunks"] = self.chunks
        record["first_token"] = self.first
        record["text_chars"] = self.chars
        record["gaps_ms"] = [round(g * 1000, 2) for g in self.gaps]
        if not record.get("error"):
            if (tokens := record.get("completion_tokens")) is None:
                record["error"] = "no usage in the stream: completion tokens unknown"
            else:
                record["error"] = implausible(tokens, self.chunks, limit)


def token_limit(body: dict[str, Any]) -> int | None:
    """The most completion tokens the request allows (a knob may set either OpenAI name)."""
    limits = [v for k in ("max_tokens", "max_completion_tokens")
              if isinstance(v := body.get(k), int) and not isinstance(v, bool) and v > 0]
    return min(limits) if limits else None


def implausible(tokens: int, chunks: int, limit: int | None) -> str | None:
    """Why a finished request's count of ``tokens`` in ``chunks`` cannot be true, or None.

    A request cannot return more tokens than it allowed, nor many more than its chunks could
    carry: such a count (10^12 for a two-chunk reply) would otherwise be a row of 10^13 tok/s.
    """
    if limit is not None and tokens > limit:
        return f"usage says {tokens} completion tokens, more than the request's limit of {limit}"
    if tokens > MAX_TOKENS_PER_CHUNK * max(chunks, 1):
        return f"usage says {tokens} completion tokens, more than {chunks} stream chunks can carry"
    return None
