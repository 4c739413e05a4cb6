"""llama-server's HTTP API: readiness, metrics, the prefix cache, acceptance, quality requests.

Quality requests (``tools/server/server-context.cpp``, ``server-common.cpp``, ``server-task.cpp``)
----------------------------------------------------------------------------------------------
llama-server has no prompt logprobs and rejects ``echo``, so teacher forcing scores one position
per request: ``POST /completion`` with the prefix as a list of token ids, ``n_predict: 1`` and
``n_probs: k`` answers ``completion_probabilities[0].top_logprobs`` = ``[{id, token, bytes,
logprob}]``, a softmax over the whole vocabulary taken before sampling (``post_sampling_probs``
false). The chat template is rendered by ``POST /apply-template`` (the same
``oaicompat_chat_params_parse`` the chat endpoint runs, knobs included) and tokenized by ``POST
/tokenize`` with ``add_special`` and ``parse_special`` true, as the chat endpoint tokenizes its
prompt; an array of ids sent as ``prompt`` is used verbatim (``tokenize_mixed``).

Greedy continuations come from the chat endpoint itself with ``logprobs: true, top_logprobs: 1``:
every ``choices[0].logprobs.content`` entry carries the token ``id`` (the end-of-generation token
included), so the continuation is known in ids without tokenizing text again.

Reproducibility: the logits of a position depend on the state of the slot's KV cache (a prefix
evaluated in one batch vs. a cached prefix plus one new token differ in the last digits, and on the
testbed a greedy continuation flips on that: "Hello there! How can I..." vs "Hello, I'shine!").
So chat requests send ``cache_prompt: false`` (the whole prompt is evaluated again), and scoring
pins slot 0 (``id_slot``): the first position of a text is evaluated fresh, the following ones
extend the cached prefix, so every server compared sees the same sequence of batches. The
server reports no reasoning token counts.
"""

from __future__ import annotations

from typing import Any

from engine.servers.client import (
    ChatReply,
    Generation,
    Http,
    NextToken,
    Readiness,
    ServerClient,
    post_json,
)
from engine.servers.common import readiness
from engine.servers.data import acceptance, mapping, token_ids
from engine.servers.data import text as as_text
from engine.servers.prometheus import per_position

# /metrics counters (served with --metrics); "drafts" counts verification steps.
_SPEC_METRICS = {
    "drafts": "llamacpp:spec_decode_num_drafts_total",
    "drafted": "llamacpp:spec_decode_num_draft_tokens_total",
    "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
}

# Verify steps whose draft token at position i was accepted, labelled position="i": what
# tests/fixtures/logs/llamacpp_draft_metrics.txt shows the testbed's build exporting (its
# positions sum to the accepted tokens). Per request, timings has no position and no step count.
_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"

# A logit bias no model's logits overcome: the token it is given is sampled at temperature 0.
_FORCE = 1e4
# Prompt tokens computed (cached ones excluded) and reused from the cache (server-task.cpp,
# server_task_result_metrics::to_metrics; server-common.h, server_metrics).
_PROMPT_METRIC = "llamacpp:prompt_tokens_total"
_CACHED_METRIC = "llamacpp:prompt_tokens_cached_total"


class LlamaCppClient(ServerClient):
    health_path = "/health"
    # llama-server answers a stream with "Keep-Alive: timeout=5, max=100" and then closes the
    # connection: the next request on it is refused (every second one, with the testbed's build).
    keep_alive = False

    def readiness(self, status: int | None, body: bytes) -> Readiness:
        # 200 answers {"status":"ok"}: any 200 means it serves. 503 answers {"error":{"code":503,
        # "message":"Loading model","type":"unavailable_error"}}; older builds also answered 503
        # {"status":"loading model"} or "no slot available" (busy, not dead), so every 503 means
        # "not yet". 500 "Model failed to load" (older builds kept serving after a failed load),
        # 404 (not a llama-server): neither will become ready by waiting.
        return readiness(status, loading=(503,))

    # -- speculative-decoding counters --------------------------------------------------

    metric_families = (*_SPEC_METRICS.values(), _PER_POS, _PROMPT_METRIC, _CACHED_METRIC)

    def spec_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        if not all(name in samples for name in _SPEC_METRICS.values()):
            return None  # started without --metrics, or a build without these counters
        return {**{key: samples[name] for key, name in _SPEC_METRICS.items()},
                **per_position(samples, _PER_POS)}

    # -- the prefix cache ---------------------------------------------------------------

    def flush_cache(self, client: Http) -> str:
        # llama-server has no endpoint that empties its caches: POST /slots/N?action=erase needs
        # --slot-save-path and clears one slot, while the host-memory prompt cache (--cache-ram,
        # 8192 MiB by default) hands a cleared slot its prompt back. A request with cache_prompt
        # false reuses nothing (server-context.cpp: n_past stays 0), so flush is that field.
        return "no flush endpoint: every request of the pass is sent with cache_prompt: false"

    def cache_fields(self, policy: str) -> dict[str, Any]:
        return {"cache_prompt": False} if policy == "flush" else {}

    def exact_length_fields(self, max_tokens: int) -> dict[str, Any]:
        # server-task.cpp params_from_json_cmpl: ignore_eos biases every end-of-generation token
        # to -inf, so generation runs to n_predict (max_tokens).
        return {"ignore_eos": True}

    def cache_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        if _PROMPT_METRIC not in samples or _CACHED_METRIC not in samples:
            return None  # started without --metrics
        cached = samples[_CACHED_METRIC]
        return {"prompt": samples[_PROMPT_METRIC] + cached, "cached": cached}

    # -- quality requests (see the module docstring) -------------------------------------

    def render_chat(self, client: Http, messages: list[dict[str, Any]],
                    knobs: dict[str, Any]) -> str:
        return as_text(post_json(client, "/apply-template", {"messages": messages, **knobs})["prompt"],
                       "/apply-template prompt")

    def tokenize(self, client: Http, text: str) -> list[int]:
        body = {"content": text, "add_special": True, "parse_special": True}
        return token_ids(post_json(client, "/tokenize", body)["tokens"], "/tokenize tokens")

    def chat_tokens(self, client: Http, body: dict[str, Any]) -> tuple[ChatReply, list[int]]:
        # Every generated id, the end-of-generation token included, is __verbose.tokens (asked
        # with verbose and return_tokens). logprobs.content is the fallback for a server without
        # them: it lacks each token that left the text an incomplete UTF-8 sequence (the first
        # bytes of an emoji), so it is taken only when it covers every token the usage counts.
        # top_logprobs 1 keeps the per-token softmax the cheapest the server offers.
        reply = self.chat(client, {**body, "logprobs": True, "top_logprobs": 1,
                                   "return_tokens": True, "verbose": True})
        verbose = reply.raw.get("__verbose")
        if isinstance(verbose, dict) and verbose.get("tokens"):
            return reply, token_ids(verbose["tokens"], "__verbose.tokens")
        choice = (reply.raw.get("choices") or [{}])[0]
        entries = (choice.get("logprobs") or {}).get("content") or []
        ids = token_ids([e["id"] for e in entries], "logprobs.content ids")
        if reply.completion_tokens is not None and len(ids) != reply.completion_tokens:
            raise ValueError(f"logprobs.content has {len(ids)} of the {reply.completion_tokens} tokens "
                             "generated (multi-byte characters) and the answer has no __verbose.tokens")
        return reply, ids

    def generate(self, client: Http, prompt_ids: list[int], max_tokens: int,
                 seed: int) -> Generation:
        out = post_json(client, "/completion", {
            "prompt": prompt_ids, "n_predict": max_tokens, "temperature": 0, "seed": seed,
            "return_tokens": True, "cache_prompt": False})
        stop = out.get("stop_type") or ""
        return Generation(as_text(out.get("content"), "content"), token_ids(out.get("tokens", []), "tokens"),
                          {"limit": "length"}.get(stop, stop))

    def next_token(self, client: Http, ids: list[int], top_k: int,
                   fresh: bool) -> NextToken:
        body = {"prompt": ids, "n_predict": 1, "temperature": 0, "n_probs": top_k,
                "cache_prompt": not fresh, "id_slot": 0, "return_tokens": True}
        out = post_json(client, "/completion", body)
        first = out
        if not (out.get("completion_probabilities") or []):
            # A sampled token that leaves the text an incomplete UTF-8 sequence (the lead bytes
            # of an emoji, a random-weight model's first choice) is never added to the slot's
            # answer, so its probabilities are not sent (server-context.cpp process_token). Asked
            # again with a whole-character token forced by logit_bias: the bias acts in the
            # sampler and the probabilities are the logits' before it, so they are the same; the
            # prefix is evaluated in the same batches (a cached prompt re-evaluates its last token).
            whole = token_ids(post_json(client, "/tokenize", {"content": "a", "add_special": False})
                              .get("tokens"), "/tokenize tokens")
            if whole:
                out = post_json(client, "/completion", {**body, "logit_bias": [[whole[-1], _FORCE]]})
        probs = out.get("completion_probabilities") or []
        if not probs or "top_logprobs" not in probs[0]:
            # No distribution even so (a build that drops it whatever is forced, a vocabulary
            # without a whole-character "a"): the position is answered with what the server gave,
            # its token id, and left out of the comparisons, rather than failing the whole check.
            sampled = token_ids(first.get("tokens") or [], "tokens")
            said = f"its token {sampled[0]}" if sampled else "no token"
            return NextToken([], {}, unscored=(
                f"llama-server gave no probabilities at this position ({said}: a byte of a "
                "character not yet whole), not even with a whole-character token forced"))
        top = probs[0]["top_logprobs"]
        return NextToken([(t["id"], t["logprob"]) for t in top],
                         {t["id"]: as_text(t.get("token"), "token") for t in top})

    def quality_fields(self) -> dict[str, Any]:
        return {"cache_prompt": False}

    def reasoning_counts(self) -> bool:
        return False  # no reasoning_tokens in usage (server-task.cpp)

    acceptance_fields = frozenset({"timings"})

    def request_acceptance(self, chunk: dict[str, Any]) -> dict[str, int] | None:
        # "timings" rides on the final response / last stream chunk; draft_n and
        # draft_n_accepted are only present when something was drafted (server-common.cpp).
        timings = mapping(chunk.get("timings"), "timings")
        return acceptance(timings.get("draft_n"), timings.get("draft_n_accepted"), None, "timings")
