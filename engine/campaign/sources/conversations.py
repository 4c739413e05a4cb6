"""Multi-turn conversations as items: one item a user turn, sent with the whole history before it.

A conversation comes from a dataset's multi-turn records (ShareGPT's ``conversations`` of
``from``/``value``, or ``messages`` of ``role``/``content``, one a JSONL line or a JSON list) or is
generated (turns, user and reply lengths, think time: each a number or a [low, high] range drawn
seeded). The history a turn carries has the data's replies, or replies synthesised to the reply
length, never the server's: every rep sends the same requests, so its later turns meet the same
prefixes in the cache. Each item says its conversation, its turn (0-based) and the think time
before it (after the previous turn's reply ends).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import Field, Strict, model_validator

from engine.campaign.prompts import DataFileError, json_elements, json_lines
from engine.campaign.sources.base import Count, Frozen, Source, reading
from engine.campaign.sources.item import Item
from engine.campaign.sources.shared_prefix import words
from engine.campaign.yamlmarks import describe as describe_value

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
         "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system"}

Range = int | float | tuple[float, float]

Secs = Annotated[float, Strict(), Field(ge=0, le=3600, allow_inf_nan=False)]
# User turns a conversation sends: each turn carries the whole history before it, so a
# conversation's requests hold turns^2 / 2 messages (items.json too).
MAX_TURNS = 256
Turns = Annotated[int, Strict(), Field(ge=1, le=MAX_TURNS)]


def _ordered(value: Any) -> Any:
    if isinstance(value, tuple) and value[0] > value[1]:
        raise ValueError(f"a range is [low, high], got [{value[0]}, {value[1]}]")
    return value


class GenerateSpec(Frozen):
    """Generated conversations: each length a number or a [low, high] range drawn per use."""

    conversations: Count
    turns: Turns | tuple[Turns, Turns]
    user_tokens: Count | tuple[Count, Count]
    reply_tokens: Count | tuple[Count, Count]
    system_tokens: Annotated[int, Strict(), Field(ge=0, le=1 << 20)] = 0

    @model_validator(mode="after")
    def _ranges(self) -> GenerateSpec:
        for v in (self.turns, self.user_tokens, self.reply_tokens):
            _ordered(v)
        return self


class ConversationsSpec(Frozen):
    """A multi-turn class: conversations from a dataset file or generated (exactly one)."""

    file: Annotated[str, Strict()] | None = None
    generate: GenerateSpec | None = None
    sample: Count | None = None  # conversations drawn from the file (None: every one)
    max_turns: Count | None = None  # per conversation, its first turns
    think_s: Secs | tuple[Secs, Secs] = 0.0  # before each turn after the first
    seed: Annotated[int, Strict(), Field(ge=0, lt=1 << 63)] = 0

    @model_validator(mode="after")
    def _one_source(self) -> ConversationsSpec:
        if (self.file is None) == (self.generate is None):
            raise ValueError("give exactly one of file and generate")
        _ordered(self.think_s)
        return self


@dataclass(frozen=True)
class Conversation:
    line: int  # where it is in its file (0: generated)
    messages: tuple[dict[str, str], ...]  # system first if any, then user and assistant in turn
    reply_tokens: tuple[int | None, ...]  # per user turn: its reply's length (None: the workload's)


def read_conversations(path: Path, max_turns: int | None = None) -> list[Conversation]:
    """Every conversation of a dataset file (.jsonl: one a line; .json: a list), each to its first
    ``max_turns`` user turns; a record ruler cannot send is a DataFileError reading
    ``path:line: problem``."""
    text = reading(path)
    jsonl = path.suffix.lower() == ".jsonl"
    records = (json_lines(path, text, DataFileError) if jsonl else
               json_elements(path, text, "expected a JSON list of conversations"))
    out = [_conversation(path, n, rec, max_turns) for n, rec in records]
    if not out:
        raise DataFileError(path, "no conversations: the file has none")
    return out


def _conversation(path: Path, n: int, rec: Any, max_turns: int | None) -> Conversation:
    if not isinstance(rec, dict):
        raise DataFileError(path, f"expected a conversation object, got {describe_value(rec)}", n)
    if isinstance(rec.get("conversations"), list):
        turns, role_key, text_key = rec["conversations"], "from", "value"
    elif isinstance(rec.get("messages"), list):
        turns, role_key, text_key = rec["messages"], "role", "content"
    else:
        raise DataFileError(path, "expected 'conversations' (from/value) or 'messages' "
                              "(role/content), a list", n)
    messages: list[dict[str, str]] = []
    for k, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            raise DataFileError(path, f"message {k} is {describe_value(turn)}, not an object", n)
        role, content = ROLES.get(str(turn.get(role_key, "")).lower()), turn.get(text_key)
        if role is None:
            raise DataFileError(path, f"message {k}: {role_key} {turn.get(role_key)!r} is not "
                                  f"one of {', '.join(sorted(ROLES))}", n)
        if not isinstance(content, str) or not content.strip():
            raise DataFileError(path, f"message {k}: {text_key} must be non-empty text", n)
        want = "system" if role == "system" else ("user" if not messages or
                                                  messages[-1]["role"] != "user" else "assistant")
        if role == "system" and messages:
            raise DataFileError(path, f"message {k}: a system message comes first only", n)
        if role != "system" and role != want:
            raise DataFileError(path, f"message {k} is from the {role} after the {messages[-1]['role']}"
                                  if messages else f"message {k} is from the {role}: a conversation "
                                  "starts with the user", n)
        messages.append({"role": role, "content": content})
    user_at = [k for k, m in enumerate(messages) if m["role"] == "user"]
    if max_turns is not None and len(user_at) > max_turns:
        del messages[user_at[max_turns]:]  # its first turns and their replies: what it sends
    users = min(len(user_at), max_turns or len(user_at))
    if not users:
        raise DataFileError(path, "a conversation without a user message", n)
    if users > MAX_TURNS:
        raise DataFileError(path, f"a conversation of {users} user turns; ruler sends at most "
                                  f"{MAX_TURNS} (max_turns sends each conversation's first)", n)
    return Conversation(n, tuple(messages), (None,) * users)


@dataclass(frozen=True)
class Generated:
    """Generated conversations: each figure a value or a (low, high) range drawn per use."""

    conversations: int
    turns: Range
    user_tokens: Range
    reply_tokens: Range
    system_tokens: int = 0  # a system prompt of its own at each conversation's start


def _draw(rng: random.Random, value: Range, whole: bool = True) -> float:
    """A value, or one drawn from a (low, high) range: a whole number, or any (think times)."""
    if isinstance(value, tuple):
        lo, hi = value
        return rng.randint(int(lo), int(hi)) if whole else rng.uniform(lo, hi)
    return value


def _text(n: int, key: str) -> str:
    """``n`` words, one token each (engine.campaign.sources.shared_prefix), seeded by ``key``."""
    return words(random.Random(key), n)


def generate(spec: Generated, seed: int) -> list[Conversation]:
    """Conversations made to the spec; the same seed gives the same ones, word for word."""
    out = []
    for c in range(spec.conversations):
        rng = random.Random(f"{seed}:conversation:{c}")
        msgs: list[dict[str, str]] = []
        if spec.system_tokens:
            msgs.append({"role": "system", "content": _text(spec.system_tokens, f"{seed}:c{c}:system")})
        replies = []
        for t in range(max(1, int(_draw(rng, spec.turns)))):
            msgs.append({"role": "user", "content": _text(max(1, int(_draw(rng, spec.user_tokens))),
                                                                f"{seed}:c{c}:u{t}")})
            reply = max(1, int(_draw(rng, spec.reply_tokens)))
            msgs.append({"role": "assistant", "content": _text(reply, f"{seed}:c{c}:a{t}")})
            replies.append(reply)
        out.append(Conversation(0, tuple(msgs), tuple(replies)))
    return out


def sample(convs: Sequence[Conversation], n: int | None, seed: int) -> list[Conversation]:
    """``n`` conversations drawn without replacement, seeded, in the file's order (None: all)."""
    if n is None or n >= len(convs):
        return list(convs)
    picked = sorted(random.Random(f"{seed}:sample").sample(range(len(convs)), n))
    return [convs[i] for i in picked]


def items(convs: Sequence[Conversation], think: Range, seed: int,
          max_turns: int | None = None) -> list[dict[str, Any]]:
    """One item a user turn, conversation by conversation, turn by turn: its messages are the
    history before it (replies from the conversation) and itself; its think time is drawn seeded
    (0 before a conversation's first turn)."""
    out: list[dict[str, Any]] = []
    for c, conv in enumerate(convs):
        rng = random.Random(f"{seed}:think:{c}")
        turn = 0
        for k, m in enumerate(conv.messages):
            if m["role"] != "user" or (max_turns is not None and turn >= max_turns):
                continue
            think_s = round(float(_draw(rng, think, whole=False)), 3) if turn else 0.0
            # The history's messages are shared between a conversation's turns, never copied:
            # a copy per turn would hold turns^2 message objects.
            out.append({"messages": list(conv.messages[:k + 1]),
                        "max_tokens": conv.reply_tokens[turn], "conversation": c,
                        "turn": turn, "think_s": think_s})
            turn += 1
    return out


def history_shared(items_: Sequence[dict[str, Any]]) -> float:
    """The share of the items' message characters that repeat the conversation's previous turn
    (its history): what a prefix cache can serve a later turn, in characters."""
    prev: dict[int, int] = {}
    shared = total = 0
    for it in items_:
        size = sum(len(m["content"]) for m in it["messages"])
        shared += prev.get(it["conversation"], 0)
        total += size
        prev[it["conversation"]] = size
    return shared / total if total else 0.0


def spec_conversations(spec: ConversationsSpec, path: Path | None) -> list[Conversation]:
    if spec.generate is not None:
        g = spec.generate
        return generate(Generated(g.conversations, g.turns, g.user_tokens, g.reply_tokens,
                                  g.system_tokens), spec.seed)
    assert path is not None  # a file spec always names one
    return sample(read_conversations(path, spec.max_turns), spec.sample, spec.seed)


def spec_items(spec: ConversationsSpec, path: Path | None) -> list[dict[str, Any]]:
    return items(spec_conversations(spec, path), spec.think_s, spec.seed, spec.max_turns)


def order(items_: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The items' indices per conversation, turn by turn, conversations in their first item's
    order: what a multi-turn pass's workers draw from."""
    convs: dict[int, list[int]] = {}
    for i, it in enumerate(items_):
        convs.setdefault(int(it.get("conversation", i)), []).append(i)
    return [sorted(ix, key=lambda i: int(items_[i].get("turn", 0))) for ix in convs.values()]


def describe(spec: ConversationsSpec, path: Path | None) -> list[str]:
    """What a multi-turn class becomes, for ``ruler validate --explain``."""
    from engine.campaign.sources.trace import lengths_text, percentiles

    its = spec_items(spec, path)
    groups = order(its)
    turns = [len(g) for g in groups]
    replies = [float(it["max_tokens"]) for it in its if it.get("max_tokens")]
    think = (f"{spec.think_s[0]:g}-{spec.think_s[1]:g} s" if isinstance(spec.think_s, tuple)
             else f"{spec.think_s:g} s")
    where = f"from {spec.file}" if spec.file else "generated"
    reply = f"{lengths_text(percentiles(replies))} tokens" if replies else "up to the workload's max_tokens"
    return [f"conversations {where}: {len(groups)}, {len(its)} turns ({min(turns)}-{max(turns)} a "
            f"conversation), think {think} before each later turn; a worker owns a conversation and "
            "sends its turns in order, each with its history",
            f"replies: {reply}; history: {history_shared(its):.1%} of the turns' text is the previous "
            "turn's prompt (what the prefix cache may serve; flushed between reps, never between turns)"]


class ConversationsSource(Source):
    """``conversations:``: multi-turn conversations, from a dataset file or generated."""

    key, what = "conversations", "conversations file"

    def file(self, spec: Any) -> str | None:
        return None if spec.file is None else str(spec.file)

    def items(self, spec: Any, path: Path | None) -> list[Item]:
        return cast(list[Item], spec_items(spec, path))

    def describe(self, spec: Any, path: Path | None) -> list[str]:
        return describe(spec, path)
