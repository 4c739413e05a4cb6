"""JSONL data: one record per line, an object with ``prompt`` (a string, sent as the one user
message) or ``messages`` (the chat to send, ``[{"role", "content"}, ...]``), and optionally the
answer's length in tokens (``output_tokens``, or the class's output field) and a category field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.campaign.prompts import DataFileError, json_line
from engine.campaign.sources.base import Record, category_of, output_length, reading
from engine.campaign.sources.item import Message
from engine.campaign.yamlmarks import describe

CHAT_ROLES = ("system", "user", "assistant")


def records(path: Path, output_field: str, category_field: str) -> list[Record]:
    """Every record of a JSONL file, each at its line; a bad one is an error naming that line."""
    out = []
    for n, line in enumerate(reading(path).split("\n"), 1):
        if not line.strip():
            continue
        out.append(_record(path, n, json_line(path, n, line, DataFileError), output_field,
                           category_field))
    return out


def _record(path: Path, n: int, raw: Any, output_field: str, category_field: str) -> Record:
    if not isinstance(raw, dict):
        raise DataFileError(path, f"a record is {describe(raw)}, not an object", n)
    prompt, chat = raw.get("prompt"), raw.get("messages")
    if (prompt is None) == (chat is None):
        state = "has both" if prompt is not None else "has neither"
        raise DataFileError(path, f"a record {state} \"prompt\" and \"messages\"; give one", n)
    messages: list[Message]
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise DataFileError(path, f"prompt must be a non-empty string, got {describe(prompt)}", n)
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = _messages(path, n, chat)
    tokens = raw.get(output_field)
    return Record(n, messages, None if tokens is None else output_length(path, n, tokens, output_field),
                  category_of(path, n, raw, category_field))


def _messages(path: Path, n: int, chat: Any) -> list[Message]:
    if not isinstance(chat, list) or not chat:
        raise DataFileError(path, f"messages must be a non-empty list, got {describe(chat)}", n)
    out: list[Message] = []
    for k, m in enumerate(chat):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES \
                or not isinstance(m.get("content"), str):
            raise DataFileError(path, f"messages[{k}] must be {{\"role\": {' | '.join(CHAT_ROLES)}, "
                                      "\"content\": text}", n)
        if not m["content"].strip():  # as an empty prompt: a request of nothing measures nothing
            raise DataFileError(path, f"messages[{k}]: content must be non-empty text", n)
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise DataFileError(path, "messages must end with a user message (the one the answer is to)", n)
    return out
