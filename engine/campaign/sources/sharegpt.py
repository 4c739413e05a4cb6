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

import math
from pathlib import Path
from typing import Any

from engine.campaign.prompts import DataFileError, json_elements
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
    found = json_elements(path, text, "expected a JSON list of ShareGPT records "
                                      "([{\"conversations\": [...]}, ...])")
    if not found:
        raise DataFileError(path, "no records: the list is empty", text.count("\n", 0, text.find("[")) + 1)
    return [_record(path, line, raw, output_field, category_field) for line, raw in found]


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
