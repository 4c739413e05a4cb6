"""Parity: whether two or more server stacks turn the campaign's prompts into the same token ids.

A number measured on one stack means the same on another only if both served the same tokens. So
each stack renders every prompt of every class itself (its own chat template, through its own
endpoints, with the knobs that shape rendering) and tokenizes it with its own tokenizer, exactly as
its chat endpoint would (``ServerClient.render_chat`` then ``tokenize``); then every stack's ids are
compared, prompt by prompt, with the first stack's (the reference). A prompt is identical, or it
differs at a first token position, shown with both sides' ids around it and both renderings around
their first differing character (escaped, so a space, a tab or a newline is visible). The answer
per class and stack is "token-identical" or "differs on N of M prompts".

A stack that cannot render a prompt (the adapter has no rendering, the server answers an HTTP error
or data the adapter cannot read) is said per stack and prompt, never raised: a stack whose server
has no such endpoint at all, or that cannot be reached, is asked nothing more and every prompt left
says why.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from engine.campaign.launch import campaign_items
from engine.campaign.sources.item import Message
from engine.campaign.spec import Campaign
from engine.servers.client import Http, ServerClient, Unsupported
from engine.servers.data import BadServerData, reading, tokenized
from engine.words import CONTROL

IDENTICAL = "token-identical"
TOKEN_CONTEXT = 4  # ids shown on each side of the first differing position
TEXT_CONTEXT = 24  # characters shown on each side of the first differing character
# Answers that say the endpoint is not there at all: asking the next prompt would say the same.
ABSENT_STATUS = frozenset({404, 405, 501})


@dataclass(frozen=True)
class Stack:
    """One server to compare: its name in the output, its adapter and a client on its base URL."""

    name: str
    adapter: ServerClient
    client: Http


@dataclass(frozen=True)
class Rendering:
    """One prompt as one stack's chat endpoint would see it: the text and its ids. A rendering
    read back from a record that withheld its ids (its text holds a secret, which the ids would
    spell: the server's /detokenize gives it back) has only their count and digest."""

    text: str
    ids: tuple[int, ...]
    withheld: str = ""  # the ids' digest (ids_digest) where the record kept no ids
    count: int = 0  # and how many there were

    @property
    def tokens(self) -> int:
        return self.count if self.withheld else len(self.ids)

    @property
    def digest(self) -> str:
        return self.withheld or ids_digest(self.ids)


def ids_digest(ids: Sequence[int]) -> str:
    """What a record keeps of ids it must not hold: enough to tell two renderings apart."""
    return hashlib.sha256(json.dumps(list(ids), separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Divergence:
    """Where a stack's ids first part from the reference's, and the renderings around it."""

    position: int  # the first token index whose ids differ (or where the shorter one ends)
    start: int  # the token index of the first id in each window below
    reference_ids: tuple[int, ...]
    ids: tuple[int, ...]
    reference_tokens: int
    tokens: int
    char: int | None  # the first differing character of the renderings; None: same text
    reference_text: str  # repr of the rendering around ``char`` (the start when the same)
    text: str

    def as_json(self) -> dict[str, Any]:
        return {"position": self.position, "window_start": self.start,
                "reference_ids": list(self.reference_ids), "ids": list(self.ids),
                "reference_tokens": self.reference_tokens, "tokens": self.tokens,
                "char": self.char, "reference_text": self.reference_text, "text": self.text}


@dataclass(frozen=True)
class PromptParity:
    """One prompt of a class on one stack against the reference."""

    index: int  # the prompt's index in its class
    preview: str  # the start of its last message, for a person
    tokens: int | None  # the stack's token count, None where it could not render
    divergence: Divergence | None = None
    error: str | None = None  # which side could not render the prompt, and why

    @property
    def identical(self) -> bool:
        return self.error is None and self.divergence is None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "preview": self.preview,
                               "identical": self.identical, "tokens": self.tokens}
        if self.divergence is not None:
            out["divergence"] = self.divergence.as_json()
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class ClassParity:
    """One class on one stack against the reference: every prompt's result."""

    cls: str
    stack: str
    prompts: tuple[PromptParity, ...]

    @property
    def differing(self) -> list[PromptParity]:
        return [p for p in self.prompts if p.divergence is not None]

    @property
    def failed(self) -> list[PromptParity]:
        return [p for p in self.prompts if p.error is not None]

    @property
    def identical(self) -> bool:
        return all(p.identical for p in self.prompts)

    @property
    def verdict(self) -> str:
        """``token-identical``, ``differs on N of M prompts``, and how many could not be compared."""
        m, differing, failed = len(self.prompts), len(self.differing), len(self.failed)
        if differing == 0 and failed == 0:
            return IDENTICAL
        if failed == m:
            return f"not compared: {self.failed[0].error}"
        first = (f"differs on {differing} of {m} prompts" if differing
                 else f"identical on {m - failed} of {m} prompts")
        return first + (f"; {failed} not compared" if failed else "")

    def as_json(self) -> dict[str, Any]:
        return {"class": self.cls, "stack": self.stack, "verdict": self.verdict,
                "identical": self.identical, "prompts": len(self.prompts),
                "differing": len(self.differing), "failed": len(self.failed),
                "per_prompt": [p.as_json() for p in self.prompts]}


@dataclass(frozen=True)
class Parity:
    """Every class on every stack against the first stack (the reference)."""

    reference: str
    stacks: tuple[str, ...]
    classes: tuple[ClassParity, ...]  # class by class, each stack after the reference in order
    stack_errors: tuple[tuple[str, str], ...] = ()  # (stack, why it was asked nothing more)

    @property
    def differs(self) -> bool:
        """Whether some prompt was compared and differs (not only left uncompared)."""
        return any(c.differing for c in self.classes)

    @property
    def identical(self) -> bool:
        return all(c.identical for c in self.classes)

    def verdict(self, cls: str) -> str:
        """One class's word across the stacks: token-identical, else each stack's own."""
        rows = [c for c in self.classes if c.cls == cls]
        if all(c.identical for c in rows):
            return IDENTICAL
        return "; ".join(f"{c.stack}: {c.verdict}" for c in rows if not c.identical)

    def as_json(self) -> dict[str, Any]:
        names = list(dict.fromkeys(c.cls for c in self.classes))
        return {"reference": self.reference, "stacks": list(self.stacks),
                "identical": self.identical,
                "verdicts": {name: self.verdict(name) for name in names},
                "stack_errors": dict(self.stack_errors),
                "classes": [c.as_json() for c in self.classes]}


def campaign_prompts(campaign: Campaign,
                     variables: Mapping[str, str] | None = None) -> dict[str, list[list[Message]]]:
    """Each class's requests as the load generator sends them: every item's messages, history
    included. Raises what ``campaign_items`` raises for a class's file (file:line)."""
    items = campaign_items(campaign, dict(os.environ) | dict(variables or {}))
    return {cls: [item["messages"] for item in its] for cls, its in items.items()}


def rendering_knobs(campaign: Campaign) -> dict[str, Any]:
    """The control's request knobs: the load generator sends them on every request, and those that
    shape the prompt (``chat_template_kwargs``, ``tools``, a template variable) reach the template
    on the chat endpoint as they do on each adapter's rendering call."""
    return campaign.knobs_for(CONTROL)


def parity(classes: Mapping[str, Sequence[Sequence[Message]]], knobs: Mapping[str, Any],
           stacks: Sequence[Stack]) -> Parity:
    """Render and tokenize every prompt on every stack; compare each stack with the first."""
    if len(stacks) < 2:
        raise ValueError("parity compares two or more stacks")
    rendered = [render_all(classes, knobs, stack) for stack in stacks]
    return against(stacks[0].name, rendered[0], [(s.name, r) for s, r in zip(stacks[1:], rendered[1:],
                                                                            strict=True)], classes)


@dataclass(frozen=True)
class Rendered:
    """One stack's rendering of every prompt of every class (or why a prompt has none), and why it
    was asked nothing more, if it was not: what a run keeps of a boot to compare another with."""

    classes: dict[str, list[Rendering | str]]
    gone: str | None = None

    def as_json(self, holds_secret: Callable[[str], bool] = lambda _: False) -> dict[str, Any]:
        """The record of the renderings: a rendering whose text ``holds_secret`` keeps its ids'
        count and digest only (its text is redacted where it is written; its ids would spell
        the secret back)."""
        def one(r: Rendering | str) -> Any:
            if isinstance(r, str):
                return r
            if r.withheld or holds_secret(r.text):
                return {"text": r.text, "tokens": r.tokens, "ids_sha256": r.digest}
            return {"text": r.text, "ids": list(r.ids)}
        return {"gone": self.gone, "classes": {cls: [one(r) for r in rs] for cls, rs in self.classes.items()}}

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Rendered:
        def one(r: Any) -> Rendering | str:
            if isinstance(r, str):
                return r
            if "ids_sha256" in r:
                return Rendering(r["text"], (), str(r["ids_sha256"]), int(r["tokens"]))
            return Rendering(r["text"], tuple(r["ids"]))
        return cls({name: [one(r) for r in rs] for name, rs in data["classes"].items()}, data.get("gone"))


def render_all(classes: Mapping[str, Sequence[Sequence[Message]]], knobs: Mapping[str, Any],
               stack: Stack) -> Rendered:
    """Every prompt of every class as one stack's chat endpoint would see it."""
    renderer = _Renderer([stack], dict(knobs))
    out = {cls: [renderer.one(stack, list(messages)) for messages in prompts]
           for cls, prompts in classes.items()}
    return Rendered(out, renderer.gone.get(stack.name))


def against(reference: str, ref: Rendered, others: Sequence[tuple[str, Rendered]],
            classes: Mapping[str, Sequence[Sequence[Message]]]) -> Parity:
    """Each other stack's renderings compared with the reference's, prompt by prompt."""
    out: list[ClassParity] = []
    for cls, prompts in classes.items():
        mine = ref.classes.get(cls, [])
        for name, theirs in others:
            got = theirs.classes.get(cls, [])
            out.append(ClassParity(cls, name, tuple(
                compare(i, preview(prompts[i]), _at(mine, i, reference), _at(got, i, name))
                for i in range(len(prompts)))))
    gone = [(reference, ref.gone)] + [(n, r.gone) for n, r in others]
    return Parity(reference, (reference, *(n for n, _ in others)), tuple(out),
                  tuple((n, why) for n, why in gone if why))


def _at(rendered: Sequence[Rendering | str], i: int, stack: str) -> Rendering | str:
    return rendered[i] if i < len(rendered) else f"{stack}: no rendering of this prompt was kept"


class _Renderer:
    """Each stack's rendering of a prompt, or why there is none; a stack whose endpoint is absent
    or unreachable is asked nothing more."""

    def __init__(self, stacks: Sequence[Stack], knobs: dict[str, Any]) -> None:
        self.stacks, self.knobs = stacks, knobs
        self.gone: dict[str, str] = {}

    def one(self, stack: Stack, messages: list[Message]) -> Rendering | str:
        if stack.name in self.gone:
            return f"{stack.name}: {self.gone[stack.name]}"
        sent: list[dict[str, Any]] = [dict(m) for m in messages]
        try:
            with reading(f"{stack.name} render_chat"):
                text = stack.adapter.render_chat(stack.client, sent, self.knobs)
                rendering(text, sent, self.knobs)
            with reading(f"{stack.name} tokenize"):
                ids = tokenized(stack.adapter.tokenize(stack.client, text), text, "its ids")
        except Unsupported as e:
            return self.give_up(stack, f"cannot render: {e}")
        except httpx.TransportError as e:
            return self.give_up(stack, f"no answer: {type(e).__name__}: {e}")
        except httpx.HTTPStatusError as e:
            if e.response.status_code in ABSENT_STATUS:
                return self.give_up(stack, str(e))
            return f"{stack.name}: {e}"
        except BadServerData as e:
            return f"{stack.name}: {e}"
        return Rendering(text, tuple(ids))

    def give_up(self, stack: Stack, why: str) -> str:
        self.gone[stack.name] = why[:400]
        return f"{stack.name}: {self.gone[stack.name]}"


# A chat template's own text around the messages: roles, markers, a default system prompt.
TEMPLATE_BYTES = 64 << 10


def rendering(text: str, messages: Sequence[Mapping[str, Any]], knobs: Mapping[str, Any]) -> str:
    """``text`` as a rendering of ``messages``: the messages and the knobs a template shows (its
    tools) and a template's own text at most; a rendering past that is not one of this prompt
    (a server answering megabytes for it), refused before it is tokenized or kept."""
    bound = len(json.dumps([list(messages), dict(knobs)], default=str)) + TEMPLATE_BYTES
    if len(text) > bound:
        raise BadServerData(f"a rendering of {len(text):,} characters for a prompt of "
                            f"{bound - TEMPLATE_BYTES:,}: no rendering of it")
    return text


def compare(index: int, shown: str, reference: Rendering | str, other: Rendering | str) -> PromptParity:
    """One prompt: the other stack's rendering against the reference's."""
    if isinstance(reference, str) or isinstance(other, str):
        tokens = None if isinstance(other, str) else other.tokens
        return PromptParity(index, shown, tokens,
                            error=reference if isinstance(reference, str) else str(other))
    if reference.withheld or other.withheld:  # a record without the ids: their digests compared
        if reference.digest == other.digest:
            return PromptParity(index, shown, other.tokens)
        return PromptParity(index, shown, other.tokens, error=(
            "its ids differ, where is not known: the record keeps no ids of a prompt that holds a "
            "secret"))
    return PromptParity(index, shown, len(other.ids), divergence=divergence(reference, other))


def divergence(reference: Rendering, other: Rendering) -> Divergence | None:
    """None when the ids are identical; else the first differing position and both sides."""
    a, b = reference.ids, other.ids
    if a == b:
        return None
    position = _common_prefix(a, b)
    start = max(0, position - TOKEN_CONTEXT)
    end = position + TOKEN_CONTEXT + 1
    char = _common_prefix(reference.text, other.text)
    same_text = reference.text == other.text
    at = 0 if same_text else char
    return Divergence(position, start, a[start:end], b[start:end], len(a), len(b),
                      None if same_text else char, excerpt(reference.text, at), excerpt(other.text, at))


def excerpt(text: str, at: int, context: int = TEXT_CONTEXT) -> str:
    """``text`` around character ``at`` as a Python literal (whitespace and control characters
    escaped), with ``…`` where it was cut."""
    start, end = max(0, at - context), at + context
    return ("…" if start > 0 else "") + repr(text[start:end]) + ("…" if end < len(text) else "")


def preview(messages: Sequence[Message], width: int = 40) -> str:
    """The start of a request's last message, on one line."""
    content = messages[-1]["content"] if messages else ""
    flat = " ".join(content.split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)
