"""Helpers more than one adapter uses: where the server listens, reading a log line, numbers as
servers print them, boot-looking lines no pattern knows, the health probe's common answers, and
the rendered-prompt memory with the client that renders through it.

An adapter package imports from here and from the part modules (:mod:`engine.servers.launch`,
:mod:`~engine.servers.logs`, :mod:`~engine.servers.client`), never from another adapter, so that
loading one adapter loads no other.
"""

from __future__ import annotations

import hashlib
import re
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from typing import Any

from engine.servers.client import Http, Readiness, ServerClient, post_json
from engine.servers.data import token_ids
from engine.servers.logs import Fact, FactValue, parse_number

# A log part's collector, add(key, value): each part of a parse_line hands it the facts of its line
# and returns whether the line was its own (True stops the other parts).
Add = Callable[[str, FactValue], None]
Part = Callable[[str, Add], bool]

ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")

# A number as SGLang and vLLM print it in their log lines: thousands commas allowed, no exponent.
NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"


def host_port_args(host: str, port: int | str) -> list[str]:
    """``--host H --port P``: how llama-server, SGLang and vLLM are told where to listen."""
    return ["--host", host, "--port", str(port)]


def split_prefix(line: str, prefix: re.Pattern[str]) -> tuple[re.Match[str], str]:
    """(the match of a server's log-prefix pattern, the rest of the line), colour codes and line
    end dropped first; every part of ``prefix`` must be optional."""
    clean = ANSI_RE.sub("", line.rstrip("\r\n"))
    m = prefix.match(clean)
    assert m is not None  # every part of the pattern is optional
    return m, clean[m.end():]


def num(text: str) -> int | float:
    return parse_number(text.strip())


def num_or_str(text: str) -> FactValue:
    text = text.strip()
    try:
        return parse_number(text)
    except ValueError:
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        return text


def repr_value(body: str, name: str) -> str | None:
    """The text of ``name=...`` in a ``repr``-style ``a=1, b='x', c=Obj(d=2)`` list, or None.

    Scans to the next top-level comma, so nested calls and quoted commas stay whole.
    """
    m = re.search(r"(?:^|[,(]\s*)" + re.escape(name) + r"=", body)
    if m is None:
        return None
    depth, quote, i = 0, "", m.end()
    for j in range(m.end(), len(body)):
        c = body[j]
        if quote:
            quote = "" if c == quote and body[j - 1] != "\\" else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return body[i:j].strip()
            depth -= 1
        elif c == "," and depth == 0:
            return body[i:j].strip()
    return body[i:].strip()


# Lines that read like a boot fact but are per-request chatter or progress bars.
_BOOTISH_RE = re.compile(
    r"\bKV\b|kv.?cache|\bmem(?:ory)?\b|\bGi?B\b|\bgraph\b|\bpool\b|#tokens|\btokens?\b|"
    r"\bweights?\b|\ballocat",
    re.IGNORECASE,
)
_CHATTER_RE = re.compile(
    r"^(?:Prefill batch|Decode batch|INFO:|Capturing batches|Capture cuda graph bs|File \"|"
    r"Capture cuda graph num tokens)|\d+it/s\]|it/s\]|%\|| - \"(?:GET|POST) "
)


def looks_like_boot_fact(message: str) -> bool:
    return bool(_BOOTISH_RE.search(message)) and not _CHATTER_RE.search(message)


def line_facts(line: str, msg: str, parts: Sequence[Part], key: Callable[[str], str] = str,
               unparsed: Callable[[str], bool] | None = None) -> list[Fact]:
    """The facts of one log line (``msg``: its message, the server's prefix cut off): the parts
    in turn, until one says the line was its own; each fact's key through ``key`` (a scope's
    prefix). A boot-looking line no part claims is kept as :func:`unparsed_fact` when
    ``unparsed`` is given and says yes to the line (not an error, say)."""
    out: list[Fact] = []

    def add(name: str, value: FactValue) -> None:
        out.append(Fact(key(name), value, line))

    for part in parts:
        if part(msg, add):
            return out
    if unparsed is not None and looks_like_boot_fact(msg) and unparsed(line):
        out.append(unparsed_fact(msg, line))
    return out


def unparsed_fact(message: str, line: str) -> Fact:
    """A boot-looking line no pattern knows, kept verbatim instead of dropped.

    The key is a hash of the message without its timestamp and rank, so the same unknown line in
    the control and in a window diffs as equal, and a new one shows as ``only_here``.
    """
    digest = hashlib.sha1(message.encode("utf-8")).hexdigest()[:8]
    return Fact(f"unparsed.{digest}", message, line)


def readiness(status: int | None, loading: Collection[int] = ()) -> Readiness:
    """One health-endpoint answer as every server gives it: refused (None) is not listening yet,
    200 serves, a status in ``loading`` is the server's "not yet", and any other status will not
    turn into READY by waiting."""
    if status is None:
        return Readiness.LOADING
    if status == 200:
        return Readiness.READY
    return Readiness.LOADING if status in loading else Readiness.DEAD


class RenderedPrompts:
    """Rendered prompt text -> the ids ``/tokenize`` gave for it, the last ``size`` of them:
    detokenizing and tokenizing again is not always the identity, and the ids are what the chat
    endpoint would have used, so ``tokenize(render_chat(...))`` answers them."""

    def __init__(self, size: int = 256) -> None:
        self._ids: OrderedDict[str, list[int]] = OrderedDict()
        self._size = size

    def remember(self, text: str, ids: list[int]) -> None:
        self._ids[text] = ids
        self._ids.move_to_end(text)
        while len(self._ids) > self._size:
            self._ids.popitem(last=False)

    def tokenize(self, client: Http, text: str) -> list[int]:
        """The ids rendered as ``text`` when it is a remembered rendering, else what ``/tokenize``
        (SGLang's and vLLM's, which share its shape) gives for it as plain text."""
        if text in self._ids:
            return list(self._ids[text])
        body = {"prompt": text, "add_special_tokens": False}
        return token_ids(post_json(client, "/tokenize", body)["tokens"], "/tokenize tokens")


class RenderingClient(ServerClient):
    """A server that renders a chat by its ``/tokenize`` and ``/detokenize`` endpoints (SGLang,
    vLLM): each rendering's ids are remembered, so ``tokenize(render_chat(...))`` answers the ids
    its chat endpoint used. A subclass says what its ``/tokenize`` is sent (:meth:`_render_body`)
    and how its ``/detokenize`` answers (:meth:`_detokenize`)."""

    health_path = "/health"

    def __init__(self) -> None:
        self._rendered = RenderedPrompts()

    @abstractmethod
    def _render_body(self, messages: list[dict[str, Any]], knobs: dict[str, Any]) -> dict[str, Any]:
        """The body of ``/tokenize`` that renders ``messages`` with the chat template."""

    @abstractmethod
    def _detokenize(self, client: Http, ids: list[int]) -> str:
        """The text of ``ids``, as the server's ``/detokenize`` answers it."""

    def render_chat(self, client: Http, messages: list[dict[str, Any]],
                    knobs: dict[str, Any]) -> str:
        body = self._render_body(messages, knobs)
        ids = token_ids(post_json(client, "/tokenize", body)["tokens"], "/tokenize tokens")
        text = self._detokenize(client, ids)
        self._rendered.remember(text, ids)
        return text

    def tokenize(self, client: Http, text: str) -> list[int]:
        return self._rendered.tokenize(client, text)
