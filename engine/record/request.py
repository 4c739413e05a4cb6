"""The per-request record: one per request a pass sends, filled by the load generator
(engine.run.client) and written, one JSON line each after the rep's header, into the rep's
receipt (engine.record.receipts). Every rep figure is computed from these.

Declared field by field, as a TypedDict: a plain dict at run time (the hot path pays nothing for
it), its keys and their types checked where records are made and read. The keys' order in a
receipt is the order they are set in, not this declaration's.
"""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] only from evaluated
# annotations.
from typing import NotRequired, TypedDict


class RequestRecord(TypedDict):
    worker: int  # the closed loop's worker that sent it; -1 in an open loop (each request its own)
    index: int  # the request's number in its pass
    prompt_index: int
    first_token: float | None  # when its first token arrived (time.monotonic)
    completion_tokens: int | None  # the stream's usage
    chunks: int  # JSON chunks the stream carried
    error: str | None  # why the request failed; None for one that counts
    scheduled: NotRequired[float]  # open loop: when it was due (time.monotonic)
    start: NotRequired[float]  # when it was sent
    finish_reason: NotRequired[str]
    prompt_tokens: NotRequired[int | None]
    cached_tokens: NotRequired[int | None]  # prompt tokens served from the prefix cache
    acceptance: NotRequired[dict[str, int]]  # speculative decoding: drafted and accepted tokens
    end: NotRequired[float]  # when its last byte arrived, or when it was given up
    text_chars: NotRequired[int]  # characters of content and reasoning content
    gaps_ms: NotRequired[list[float]]  # between one token's arrival and the next's
    conversation: NotRequired[int]  # multi-turn: the conversation it is a turn of
    turn: NotRequired[int]  # ... and which, 0 the first
