"""Server-adapter interface: what every LLM server adapter must tell the engine.

An adapter knows one server's command line (how to make it listen), its health endpoint, and
its log wording. It is stateless so one instance can read many logs; the little state a log
needs (which model section a line belongs to, e.g. the drafter's) lives in :class:`BootFacts`,
which accumulates one boot log.

Facts keep the verbatim line they came from: a window's boot facts are diffed against the
control's, and a reader must be able to check a number against the server's own words.
"""

from __future__ import annotations

import enum
import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.servers.prometheus import summed_samples

FactValue = int | float | str | bool

# A failing boot can print thousands of near-identical lines (one per tensor, per retry); the
# first ones carry the cause, so keep those and count the rest instead of growing without bound.
MAX_ERRORS = 200
MAX_WARNINGS = 200

_NUMBER_RE = re.compile(r"[-+]?(?:\d[\d,_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def parse_number(text: str) -> int | float:
    """Parse a number as servers print it: ``2,042,016`` -> 2042016, ``3.81`` -> 3.81.

    Thousands separators (``,`` or ``_``) are dropped; a value with a decimal point or an
    exponent is a float, anything else an int. Surrounding whitespace is ignored.
    Raises ValueError when ``text`` is not one number.
    """
    s = text.strip()
    if not _NUMBER_RE.fullmatch(s):
        raise ValueError(f"not a number: {text!r}")
    s = s.replace(",", "").replace("_", "")
    if any(c in s for c in ".eE"):
        return float(s)
    return int(s)


@dataclass(frozen=True)
class Fact:
    """One fact extracted from a server log line."""

    key: str  # stable dotted name, e.g. "kv.cells"; documented per adapter
    value: FactValue
    line: str  # the verbatim log line it came from


class Readiness(enum.Enum):
    LOADING = "loading"  # not answering yet, or answering "still loading"
    READY = "ready"  # health endpoint says it can serve
    DEAD = "dead"  # answered with a state that will not turn into READY


class Unsupported(NotImplementedError):
    """The server (or this adapter) cannot answer a quality request; the receipt says so."""


@dataclass(frozen=True)
class Generation:
    """A greedy continuation, in token ids so that no retokenisation sits between two servers."""

    text: str
    token_ids: list[int]
    stop: str  # "eos", "length", or the server's own word


@dataclass(frozen=True)
class NextToken:
    """The next-token distribution after a forced prefix, as far as the server shows it."""

    top: list[tuple[int, float]]  # (token id, logprob), best first, at most top_k
    pieces: dict[int, str]  # token id -> text, for receipts a person can read


@dataclass(frozen=True)
class ChatReply:
    """One non-streamed chat answer, reduced to what the ruler and tool checks read."""

    content: str
    reasoning: str | None  # reasoning the server split out of content, if it did
    completion_tokens: int | None
    reasoning_tokens: int | None  # None: the server reports no reasoning count
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    raw: dict[str, Any]


def chat_reply(body: dict[str, Any]) -> ChatReply:
    """Parse an OpenAI chat completion body (non-streamed)."""
    choice = (body.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    usage = body.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    reasoning_tokens = details.get("reasoning_tokens", usage.get("reasoning_tokens"))
    return ChatReply(
        content=msg.get("content") or "",
        reasoning=msg.get("reasoning_content") or msg.get("reasoning"),
        completion_tokens=usage.get("completion_tokens"),
        reasoning_tokens=reasoning_tokens if isinstance(reasoning_tokens, int) else None,
        tool_calls=list(msg.get("tool_calls") or []),
        finish_reason=choice.get("finish_reason"),
        raw=body,
    )


def post_json(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST and return the JSON answer; a non-200 raises with the server's own words."""
    r = client.post(path, json=body)
    if r.status_code != 200:
        raise httpx.HTTPStatusError(f"{path}: HTTP {r.status_code}: {r.text[:300]}",
                                    request=r.request, response=r)
    return dict(r.json())


class ServerAdapter(ABC):
    """What the engine needs to know about one kind of LLM server."""

    name: str
    default_container_port: int
    health_path: str
    chat_path: str = "/v1/chat/completions"
    metrics_path: str = "/metrics"
    metrics_flag: str = ""  # the server flag without which metrics_path has no spec counters

    @abstractmethod
    def listen_args(self, host: str, port: int) -> list[str]:
        """Command-line arguments that make the server listen on ``host:port``."""

    def log_args(self) -> list[str]:
        """Extra arguments needed for the boot log to contain the facts parse_line reads.

        Empty unless the server hides them at its default verbosity.
        """
        return []

    def scope(self, line: str, current: str) -> str | None:
        """Return a new key scope when ``line`` opens a new section, else None.

        A server that loads several models into one log (a speculative drafter after the
        target) prints the same wording for each; :class:`BootFacts` keeps the current scope
        and hands it back to :meth:`parse_line` (and here as ``current``) so the facts of
        each model stay apart. The scope string is the adapter's own; the target's is ``""``.
        """
        return None

    @abstractmethod
    def parse_line(self, line: str, scope: str = "") -> list[Fact]:
        """Facts found on one log line (empty when none); ``scope`` is from :meth:`scope`."""

    @abstractmethod
    def is_error(self, line: str) -> bool:
        """True when the line reports an error (kept verbatim in the boot record)."""

    @abstractmethod
    def is_warning(self, line: str) -> bool:
        """True when the line is a warning; never True for a line is_error accepts."""

    @abstractmethod
    def is_ready_line(self, line: str) -> bool:
        """True when the line says the server now accepts requests."""

    @abstractmethod
    def readiness(self, status: int | None, body: bytes) -> Readiness:
        """Classify one health-endpoint answer; ``status`` None means connection refused."""

    def spec_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        """Speculative-decoding counters from one scrape of :attr:`metrics_path`.

        ``samples`` maps unlabelled sample names to values. Returns ``{"drafts": verify
        steps, "drafted": draft tokens, "accepted": accepted draft tokens}`` (lifetime
        counters: callers take the delta across a rep), or None when not exposed.
        """
        return None

    def request_acceptance(self, chunk: dict[str, Any]) -> dict[str, int] | None:
        """``{"drafted": n, "accepted": m}`` from one response body or stream chunk, or None."""
        return None

    def metric_samples(self, text: str) -> dict[str, float]:
        """Samples of one scrape of :attr:`metrics_path` as :meth:`spec_counters` reads them."""
        return summed_samples(text)

    def missing_metrics(self, status: int | None, samples: dict[str, float] | None) -> str | None:
        """Why a rep's acceptance cannot come from the metrics delta, naming the flag; None if it can."""
        if status is None:
            return f"no answer on {self.metrics_path}"
        if status != 200 or samples is None:
            return f"{self.metrics_path} answered HTTP {status}: the server needs {self.metrics_flag}"
        if self.spec_counters(samples) is None:
            return "no speculative-decoding counters: speculation is off or no draft has run yet"
        return None

    def metrics_requirement(self, argv: list[str]) -> str | None:
        """A warning when the command line cannot give per-rep acceptance from the metrics delta."""
        if self.metrics_flag and self.metrics_flag not in argv:
            return f"{self.metrics_flag} missing: acceptance falls back to per-request counts"
        return None

    def load_fields(self) -> dict[str, Any]:
        """Extra fields of every load-generator request (e.g. per-request acceptance details)."""
        return {}

    # -- quality requests (engine.quality) -------------------------------------------------
    # Each takes an httpx.Client whose base_url is the server's (no /v1): adapters stay
    # stateless and the caller owns the connection pool and the timeout.

    def render_chat(self, client: httpx.Client, messages: list[dict[str, Any]],
                    knobs: dict[str, Any]) -> str:
        """The prompt text the chat endpoint would build from ``messages`` and ``knobs``."""
        raise Unsupported(f"{self.name}: rendering the chat template is not implemented")

    def tokenize(self, client: httpx.Client, text: str) -> list[int]:
        """Token ids of ``text`` exactly as the chat endpoint tokenizes a rendered prompt."""
        raise Unsupported(f"{self.name}: tokenizing is not implemented")

    def chat_tokens(self, client: httpx.Client, body: dict[str, Any]) -> tuple[ChatReply, list[int]]:
        """A non-streamed chat completion (as :meth:`chat`) and the token ids it generated.

        Preferred for greedy equivalence: the reply is the served endpoint's own. Without it the
        engine renders, tokenizes and calls :meth:`generate`.
        """
        raise Unsupported(f"{self.name}: token ids of a chat completion are not available")

    def generate(self, client: httpx.Client, prompt_ids: list[int], max_tokens: int,
                 seed: int) -> Generation:
        """Greedy continuation (temperature 0) of a prompt given as token ids."""
        raise Unsupported(f"{self.name}: greedy generation from token ids is not implemented")

    def next_token(self, client: httpx.Client, ids: list[int], top_k: int,
                   fresh: bool) -> NextToken:
        """Teacher forcing, one position: the top-k next-token logprobs after ``ids``.

        ``fresh`` asks the server to compute the whole prefix again; otherwise it may reuse the
        prefix it kept from the previous call. The caller sends the same sequence of calls to
        every server it compares, so both sides see the same batches.
        """
        raise Unsupported(f"{self.name}: teacher-forced scoring is not implemented")

    def score_sequence(self, client: httpx.Client, ids: list[int], start: int,
                       top_k: int) -> list[NextToken | None]:
        """Teacher forcing in one request: element j is the top-k that predicted ``ids[start + j]``
        (None where the server gave none). Optional: without it, :meth:`next_token` per position."""
        raise Unsupported(f"{self.name}: prompt logprobs are not available")

    def quality_fields(self) -> dict[str, Any]:
        """Request fields that make a chat request reproducible (e.g. no cached prefix)."""
        return {}

    def chat(self, client: httpx.Client, body: dict[str, Any]) -> ChatReply:
        """One non-streamed OpenAI chat completion (knob and tool checks)."""
        payload = {**body, "stream": False, **self.quality_fields()}
        return chat_reply(post_json(client, self.chat_path, payload))

    def reasoning_counts(self) -> bool:
        """Whether the server reports reasoning token counts at all (a missing count is then a sign)."""
        return True


def tool_arguments(call: dict[str, Any]) -> dict[str, Any] | None:
    """The parsed JSON arguments of one OpenAI tool call, or None when they do not parse."""
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if not fn.get("name"):
        return None
    if isinstance(args, dict):
        return args
    try:
        parsed = json.loads(args) if isinstance(args, str) else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


@dataclass
class BootFacts:
    """Facts, errors and warnings accumulated over one boot log."""

    facts: dict[str, Fact] = field(default_factory=dict)  # last value wins per key
    errors: list[str] = field(default_factory=list)  # verbatim, in log order, capped
    warnings: list[str] = field(default_factory=list)  # verbatim, in log order, capped
    dropped_errors: int = 0
    dropped_warnings: int = 0
    scope: str = ""  # current model section, see ServerAdapter.scope

    def feed(self, adapter: ServerAdapter, line: str) -> list[Fact]:
        """Read one log line; return the facts found on it."""
        line = line.rstrip("\r\n")
        new_scope = adapter.scope(line, self.scope)
        if new_scope is not None:
            self.scope = new_scope
        found = adapter.parse_line(line, self.scope)
        for fact in found:
            self.facts[fact.key] = fact
        if adapter.is_error(line):
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(line)
            else:
                self.dropped_errors += 1
        elif adapter.is_warning(line):
            if len(self.warnings) < MAX_WARNINGS:
                self.warnings.append(line)
            else:
                self.dropped_warnings += 1
        return found

    def feed_text(self, adapter: ServerAdapter, text: str) -> list[Fact]:
        """Feed a whole captured log; return every fact found, in order."""
        found: list[Fact] = []
        for line in text.splitlines():
            found.extend(self.feed(adapter, line))
        return found

    def value(self, key: str, default: FactValue | None = None) -> FactValue | None:
        fact = self.facts.get(key)
        return default if fact is None else fact.value

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "facts": {k: f.value for k, f in self.facts.items()},
            "lines": {k: f.line for k, f in self.facts.items()},
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }
        # Only mention truncation when it happened, so ordinary records stay small.
        if self.dropped_errors:
            out["dropped_errors"] = self.dropped_errors
        if self.dropped_warnings:
            out["dropped_warnings"] = self.dropped_warnings
        return out

    def diff(self, other: BootFacts) -> dict[str, Any]:
        """Compare fact values with another boot (typically this window vs the control)."""
        changed: dict[str, list[FactValue]] = {}
        equal: list[str] = []
        for key in sorted(self.facts.keys() & other.facts.keys()):
            a, b = self.facts[key].value, other.facts[key].value
            if a == b and type(a) is type(b):
                equal.append(key)
            else:
                changed[key] = [a, b]
        return {
            "changed": changed,
            "only_here": {
                k: self.facts[k].value for k in sorted(self.facts.keys() - other.facts.keys())
            },
            "only_there": {
                k: other.facts[k].value for k in sorted(other.facts.keys() - self.facts.keys())
            },
            "equal": equal,
        }
