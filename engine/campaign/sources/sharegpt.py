"""ShareGPT-format data: a JSON list of records, each with ``conversations``, a list of turns
``{"from": "human" | "gpt" | "system" | ..., "value": text}``.

A record becomes one request, as vLLM's and SGLang's benchmarks take it: its system turn (if it
opens with one) and its first human turn; the reply that follows is the answer, whose length is
the record's ``output_tokens`` (or the class's output field) where it has one, else estimated from
the reply's text at :data:`CHARS_PER_TOKEN` characters a token (the server's tokenizer is not
running when a run freezes its items; the estimate is stated wherever it is used). Later turns are
multi-turn's (engine.campaign.sources.conversations), not a dataset class's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from engine.campaign.prompts import DataFileError
from engine.campaign.sources.base import Record, category_of, output_length, reading
from engine.campaign.sources.item import Message
from engine.campaign.yamlmarks import describe

CHARS_PER_TOKEN = 4  # OpenAI's rule of thumb for English text
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
         "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system"}


def records(path: Path, output_field: str, category_field: str) -> list[Record]:
    """Every record of a ShareGPT file, each with the line it starts on; a bad one is an error
    naming that line."""
    text = reading(path)
    return [_record(path, line, raw, output_field, category_field)
            for line, raw in _elements(path, text)]


def _elements(path: Path, text: str) -> list[tuple[int, Any]]:
    """The elements of the JSON list ``text``, each with its first line: decoded one at a time, so a
    record's line is known (``json.loads`` of the whole list would tell none)."""
    decoder = json.JSONDecoder()
    lines = _line_starts(text)

    def line_of(pos: int) -> int:
        lo, hi = 0, len(lines)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if lines[mid] <= pos else (lo, mid)
        return lo + 1

    pos = _skip(text, 0)
    if not text.startswith("[", pos):
        raise DataFileError(path, "expected a JSON list of ShareGPT records ([{\"conversations\": "
                                  "[...]}, ...])", line_of(pos))
    out: list[tuple[int, Any]] = []
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        raise DataFileError(path, "no records: the list is empty", line_of(pos))
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DataFileError(path, f"not JSON ({exc.msg}, column {exc.colno})", exc.lineno) from None
        except RecursionError:
            raise DataFileError(path, "not JSON ruler reads (nested too deeply)", line_of(pos)) from None
        out.append((line_of(pos), value))
        pos = _skip(text, end)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
            continue
        if text.startswith("]", pos):
            break
        raise DataFileError(path, "not JSON (expected ',' or ']' after a record)", line_of(pos))
    if text[_skip(text, pos + 1):].strip():
        raise DataFileError(path, "not JSON (text after the list)", line_of(_skip(text, pos + 1)))
    return out


def _line_starts(text: str) -> list[int]:
    starts = [0]
    i = text.find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = text.find("\n", i + 1)
    return starts


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _record(path: Path, line: int, raw: Any, output_field: str, category_field: str) -> Record:
    if not isinstance(raw, dict):
        raise DataFileError(path, f"a record is {describe(raw)}, not an object", line)
    turns = raw.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise DataFileError(path, "a record needs \"conversations\": a non-empty list of turns", line)
    chat: list[tuple[str, str]] = []
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("from"), str) \
                or not isinstance(turn.get("value"), str):
            raise DataFileError(path, f"conversations[{k}] must be {{\"from\": role, \"value\": text}}",
                                line)
        role = ROLES.get(turn["from"].lower())
        if role is None:
            raise DataFileError(path, f"conversations[{k}] is from {turn['from']!r}: ruler reads "
                                      f"{', '.join(ROLES)}", line)
        chat.append((role, turn["value"]))
    messages: list[Message] = []
    if chat[0][0] == "system":
        messages.append({"role": "system", "content": chat.pop(0)[1]})
    first = next((k for k, (role, _) in enumerate(chat) if role == "user"), None)
    if first is None:
        raise DataFileError(path, "a record has no human turn to send", line)
    if not chat[first][1].strip():
        raise DataFileError(path, "the record's human turn is empty", line)
    messages.append({"role": "user", "content": chat[first][1]})
    if raw.get(output_field) is not None:
        tokens: int | None = output_length(path, line, raw[output_field], output_field)
    else:
        reply = next((text for role, text in chat[first + 1:first + 2] if role == "assistant"), "")
        tokens = max(1, math.ceil(len(reply) / CHARS_PER_TOKEN)) if reply.strip() else None
    return Record(line, messages, tokens, category_of(path, line, raw, category_field))
