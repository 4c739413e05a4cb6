"""The HTTP part of a server adapter: readiness, metrics, load requests and quality requests.

Everything ruler asks a running server goes through a :class:`ServerClient`:

* readiness: :attr:`~ServerClient.health_path` and :meth:`~ServerClient.readiness`, polled
  until the boot is READY or DEAD;
* load: :func:`request_body` (the streamed chat request every load worker sends, plus
  :meth:`~ServerClient.load_fields`) and :meth:`~ServerClient.request_acceptance` on each chunk;
* metrics: :meth:`~ServerClient.metric_samples` and :meth:`~ServerClient.spec_counters` on a
  scrape of :attr:`~ServerClient.metrics_path` before and after each rep, and
  :meth:`~ServerClient.missing_metrics` when the delta cannot give the acceptance;
* quality (``engine.quality``): the chat template, tokens and logprobs the server shows.

A new server must implement :meth:`~ServerClient.readiness` and set ``health_path``; the rest
has defaults that speak OpenAI chat and plain Prometheus, and quality calls the server cannot
answer raise :class:`Unsupported`, which the receipt records instead of a number.

A client holds no connection: each call takes an ``httpx.Client`` whose ``base_url`` is the
server's (no ``/v1``), so the caller owns the pool and the timeout (typed :class:`Http`: the
adapters import without httpx). It may keep a small cache (SGLang's rendered prompts), which is
why :func:`engine.servers.get_adapter` makes a fresh one.
"""

from __future__ import annotations

import enum
import functools
import json
import ssl
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from engine.servers.data import (
    BadServerData,
    count,
    mapping,
    number,
    optional_count,
    show,
    strict_json,
    token_ids,
)
from engine.servers.data import text as as_text
from engine.servers.prometheus import summed_samples

# A logprob is at most 0; servers computing in half precision round the top one a little above.
LOGPROB_SLACK = 1e-3


class Http(Protocol):
    """The ``httpx.Client`` a caller hands an adapter, as the adapters use it. A protocol rather
    than httpx's class: reading a server's log through its adapter (the console, ``ruler facts``)
    must not import httpx (with the Prometheus parser, 0.15 s of the console's start); only a call
    that talks HTTP does."""

    def post(self, url: str, *, json: Any = None) -> Any: ...


class Readiness(enum.Enum):
    LOADING = "loading"  # not answering yet, or answering "still loading"
    READY = "ready"  # health endpoint says it can serve
    DEAD = "dead"  # answered with a state that will not turn into READY


class Unsupported(Exception):
    """The server (or this adapter) cannot answer a quality request; the receipt says so. A finding
    about the server, not a gap in ruler: an "unsupported" verdict, never an error."""


class FlushFailed(Exception):
    """The server did not empty its prefix cache (or could not say it did): the rep that was to
    follow is void, with this reason."""


@dataclass(frozen=True)
class Generation:
    """A greedy continuation, in token ids so that no retokenisation sits between two servers."""

    text: str
    token_ids: list[int]
    stop: str  # "eos", "length", or the server's own word

    def __post_init__(self) -> None:
        token_ids(self.token_ids, "generated token ids")
        as_text(self.stop, "stop")


@dataclass(frozen=True)
class NextToken:
    """The next-token distribution after a forced prefix, as far as the server shows it."""

    top: list[tuple[int, float]]  # (token id, logprob), best first, at most top_k
    pieces: dict[int, str]  # token id -> text, for receipts a person can read
    # Why the server showed no distribution at this position ("": it did): what it gave is
    # kept (its token, if it said), and the position is left out of every comparison.
    unscored: str = ""

    def __post_init__(self) -> None:
        """Built from a server's answer: ids are counts and logprobs finite, or it is bad data."""
        for tid, lp in self.top:
            count(tid, "top token id")
            if number(lp, f"logprob of token {tid}") > LOGPROB_SLACK:
                raise BadServerData(f"logprob of token {tid} is {lp}: a probability above 1")
        for tid, piece in self.pieces.items():
            count(tid, "token id")
            as_text(piece, f"text of token {tid}")


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
    """Parse an OpenAI chat completion body (non-streamed); a field of the wrong type is bad data."""
    choices = body.get("choices") or [{}]
    if not isinstance(choices, list):
        raise BadServerData(f"choices is {show(choices)}, not a list")
    choice = mapping(choices[0], "choices[0]")
    msg = mapping(choice.get("message"), "message")
    usage = mapping(body.get("usage"), "usage")
    details = mapping(usage.get("completion_tokens_details"), "usage.completion_tokens_details")
    reasoning_tokens = details.get("reasoning_tokens", usage.get("reasoning_tokens"))
    tool_calls = msg.get("tool_calls") or []
    if not isinstance(tool_calls, list) or not all(isinstance(c, dict) for c in tool_calls):
        raise BadServerData(f"message.tool_calls is {show(tool_calls)}, not a list of objects")
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    return ChatReply(
        content=as_text(msg.get("content"), "message.content"),
        reasoning=as_text(reasoning, "message.reasoning_content") if reasoning else None,
        completion_tokens=optional_count(usage.get("completion_tokens"), "usage.completion_tokens"),
        reasoning_tokens=optional_count(reasoning_tokens, "usage reasoning_tokens"),
        tool_calls=list(tool_calls),
        finish_reason=as_text(choice.get("finish_reason"), "finish_reason") or None,
        raw=body,
    )


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, built once: building it (certifi's bundle) took 0.1 s of CPU
    per client, and a rep scrapes twice."""
    import certifi  # here: only a scrape or the load generator builds one (see Http)

    return ssl.create_default_context(cafile=certifi.where())


def post_json(client: Http, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST and return the JSON answer; a non-200 raises with the server's own words, an answer
    that is not a JSON object raises :class:`BadServerData`."""
    r = client.post(path, json=body)
    if r.status_code != 200:
        import httpx  # here, not at the top: see Http

        raise httpx.HTTPStatusError(f"{path}: HTTP {r.status_code}: {r.text[:300]}",
                                    request=r.request, response=r)
    return mapping(strict_json(r.text, path), f"{path} answer")


class ServerClient(ABC):
    """The requests ruler sends a running server, and how it reads the answers."""

    name: str  # the adapter's name, in Unsupported messages
    health_path: str
    chat_path: str = "/v1/chat/completions"
    metrics_path: str = "/metrics"
    metrics_flag: str = ""  # named by missing_metrics; the launch part checks the command line for it
    # Whether the load generator may send a worker's next request on the connection of its last.
    # A kept connection saves the connect (a round trip in each request's time to first token
    # on a remote server); a server that drops it after a stream must say False.
    keep_alive: bool = True

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

    # The top-level fields of a stream chunk that request_acceptance reads: the load generator
    # passes it only the chunks that have one (it reads tens of thousands of chunks a second).
    acceptance_fields: frozenset[str] = frozenset()

    def request_acceptance(self, chunk: dict[str, Any]) -> dict[str, int] | None:
        """``{"drafted": n, "accepted": m}`` from one response body or stream chunk, or None.

        It reads only the chunk's :attr:`acceptance_fields`."""
        return None

    # The metric families :meth:`spec_counters`, :meth:`cache_counters` and
    # :meth:`missing_metrics` read, each by the start of its sample names; empty: every family.
    metric_families: tuple[str, ...] = ()

    def metric_samples(self, text: str) -> dict[str, float]:
        """Samples of one scrape of :attr:`metrics_path` as :meth:`spec_counters` reads them
        (those of :attr:`metric_families` only)."""
        return summed_samples(text, self.metric_families)

    def missing_metrics(self, status: int | None, samples: dict[str, float] | None) -> str | None:
        """Why a rep's acceptance cannot come from the metrics delta, naming the flag; None if it can."""
        if status is None:
            return f"no answer on {self.metrics_path}"
        if status != 200 or samples is None:
            return f"{self.metrics_path} answered HTTP {status}: the server needs {self.metrics_flag}"
        if self.spec_counters(samples) is None:
            return "no speculative-decoding counters: speculation is off or no draft has run yet"
        return None

    def load_fields(self) -> dict[str, Any]:
        """Extra fields of every load-generator request (e.g. per-request acceptance details).

        :func:`request_body` merges them under the campaign's sampling and knobs.
        """
        return {}

    def exact_length_fields(self, max_tokens: int) -> dict[str, Any]:
        """Request fields that make the server generate exactly ``max_tokens`` tokens, past its
        end of sequence: how an output length from the data is honoured. The default has none
        (OpenAI's API has no such field): the length is then only a limit, and the receipts'
        completion tokens say what the server did."""
        return {}

    # -- the prefix cache (workload.cache) ---------------------------------------------------
    # Every rep sends the same prompts, so a server that keeps a prefix cache serves later reps
    # from it. With ``cache: flush`` ruler empties it before each pass (or, where the server has
    # no endpoint for that, asks it per request not to reuse a prefix), and with either policy it
    # reports per rep how many prompt tokens the server served from its cache.

    flush_path: str | None = None  # the endpoint that empties the prefix cache (POST), if any

    def flush_cache(self, client: Http) -> str:
        """Empty the server's prefix cache; the words of its answer, or :class:`FlushFailed`.

        The default POSTs :attr:`flush_path` and takes any 200 as done; an adapter whose server
        says more than its status overrides :meth:`flush_answer`.
        """
        if self.flush_path is None:
            raise FlushFailed(f"{self.name} has no endpoint that empties its prefix cache")
        import httpx  # here, not at the top: see Http

        try:
            r = client.post(self.flush_path)
        except httpx.HTTPError as e:
            raise FlushFailed(f"POST {self.flush_path}: {type(e).__name__}: {e}"[:300]) from e
        return self.flush_answer(r.status_code, r.text)

    def flush_answer(self, status: int, body: str) -> str:
        """What one answer of :attr:`flush_path` means: a receipt line, or :class:`FlushFailed`."""
        if status != 200:
            raise FlushFailed(f"POST {self.flush_path} answered HTTP {status}: {body.strip()[:200]}")
        return f"POST {self.flush_path}: HTTP 200"

    def cache_fields(self, policy: str) -> dict[str, Any]:
        """Request fields a pass sends under ``policy`` (keep | flush): for a server without a
        flush endpoint, the field that stops each request from reusing a cached prefix. They go
        over the campaign's knobs: the policy decides the cache, not a knob."""
        return {}

    def cache_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        """``{"prompt": prompt tokens, "cached": of which served from the prefix cache}`` from one
        scrape of :attr:`metrics_path` (lifetime counters: callers take the delta across a pass),
        or None when the server does not export them."""
        return None

    # -- quality requests (engine.quality) -------------------------------------------------
    # Each takes an httpx.Client (an Http) whose base_url is the server's (no /v1); see the module
    # docstring.

    def render_chat(self, client: Http, messages: list[dict[str, Any]],
                    knobs: dict[str, Any]) -> str:
        """The prompt text the chat endpoint would build from ``messages`` and ``knobs``."""
        raise Unsupported(f"{self.name}: rendering the chat template is not implemented")

    def tokenize(self, client: Http, text: str) -> list[int]:
        """Token ids of ``text`` exactly as the chat endpoint tokenizes a rendered prompt."""
        raise Unsupported(f"{self.name}: tokenizing is not implemented")

    def chat_tokens(self, client: Http, body: dict[str, Any]) -> tuple[ChatReply, list[int]]:
        """A non-streamed chat completion (as :meth:`chat`) and the token ids it generated.

        Preferred for greedy equivalence: the reply is the served endpoint's own. Without it the
        engine renders, tokenizes and calls :meth:`generate`.
        """
        raise Unsupported(f"{self.name}: token ids of a chat completion are not available")

    def generate(self, client: Http, prompt_ids: list[int], max_tokens: int,
                 seed: int) -> Generation:
        """Greedy continuation (temperature 0) of a prompt given as token ids."""
        raise Unsupported(f"{self.name}: greedy generation from token ids is not implemented")

    def next_token(self, client: Http, ids: list[int], top_k: int,
                   fresh: bool) -> NextToken:
        """Teacher forcing, one position: the top-k next-token logprobs after ``ids``.

        ``fresh`` asks the server to compute the whole prefix again; otherwise it may reuse the
        prefix it kept from the previous call. The caller sends the same sequence of calls to
        every server it compares, so both sides see the same batches.
        """
        raise Unsupported(f"{self.name}: teacher-forced scoring is not implemented")

    def score_sequence(self, client: Http, ids: list[int], start: int,
                       top_k: int) -> list[NextToken | None]:
        """Teacher forcing in one request: element j is the top-k that predicted ``ids[start + j]``
        (None where the server gave none). Optional: without it, :meth:`next_token` per position."""
        raise Unsupported(f"{self.name}: prompt logprobs are not available")

    def quality_fields(self) -> dict[str, Any]:
        """Request fields that make a chat request reproducible (e.g. no cached prefix)."""
        return {}

    def chat(self, client: Http, body: dict[str, Any]) -> ChatReply:
        """One non-streamed OpenAI chat completion (knob and tool checks)."""
        payload = {**body, "stream": False, **self.quality_fields()}
        return chat_reply(post_json(client, self.chat_path, payload))

    def reasoning_counts(self) -> bool:
        """Whether the server reports reasoning token counts at all (a missing count is then a sign)."""
        return True


def cached_tokens(usage: dict[str, Any]) -> int | None:
    """Prompt tokens served from the prefix cache, from a chat answer's ``usage``: OpenAI's
    ``prompt_tokens_details.cached_tokens`` (llama.cpp always sends it; vLLM with
    --enable-prompt-tokens-details, SGLang with --enable-cache-report). None when absent."""
    details = mapping(usage.get("prompt_tokens_details"), "usage.prompt_tokens_details")
    return optional_count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens")


def tool_arguments(call: dict[str, Any]) -> dict[str, Any] | None:
    """The parsed JSON arguments of one OpenAI tool call, or None when they do not parse."""
    fn = call.get("function")
    if not isinstance(fn, dict):
        return None
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


def request_body(messages: str | Sequence[Mapping[str, Any]], max_tokens: int,
                 sampling: dict[str, Any], knobs: dict[str, Any],
                 adapter_fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """The streamed chat request a load worker sends (and the dry run shows): ``messages``, or a
    prompt string as the one user message.

    Sampling is always explicit (server defaults come from the model otherwise); knobs verbatim.
    ``adapter_fields`` (:meth:`ServerClient.load_fields`, and for an item with its own length
    :meth:`ServerClient.exact_length_fields`) go first so a campaign's knob wins.
    """
    return {
        "messages": ([{"role": "user", "content": messages}] if isinstance(messages, str)
                     else [dict(m) for m in messages]),
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(adapter_fields or {}),
        **sampling,
        **knobs,
    }
