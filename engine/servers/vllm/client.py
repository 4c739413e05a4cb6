"""vLLM's HTTP API: readiness, metrics, the prefix cache, acceptance, quality requests.

Acceptance
----------
``/metrics`` (always on) carries ``vllm:spec_decode_num_drafts_total``,
``..._num_draft_tokens_total`` and ``..._num_accepted_tokens_total`` once a speculative config is
set, labelled per engine and model: summed over label sets. Rate = Δaccepted / Δdraft_tokens,
length = 1 + Δaccepted / Δdrafts; per position from ``..._num_accepted_tokens_per_pos_total``.
Per request only with ``--per-request-spec-decode-metrics
summary``: ``metrics.speculative_decoding`` on the final response / usage chunk, per position
from its ``acceptance_histogram``.

Quality requests
----------------
Teacher forcing: ``/v1/completions`` with the ids as ``prompt``, ``prompt_logprobs`` = k,
``max_tokens: 1`` (not streamed) -> ``choices[0].prompt_logprobs``: first entry null, then
``{token_id: {logprob, rank, decoded_token}}`` holding the top-k and the prompt's own token.
The next-token distribution after a prefix: ``logprobs`` = k with ``return_tokens_as_token_ids``,
so ``top_logprobs`` keys read ``token_id:N``. More than 20 needs ``--max-logprobs``.
"""

from __future__ import annotations

import json
from typing import Any

from engine.servers.client import (
    ChatReply,
    FlushFailed,
    Http,
    NextToken,
    Readiness,
    Unsupported,
    post_json,
)
from engine.servers.common import RenderingClient, readiness
from engine.servers.data import acceptance, mapping, number, token_ids
from engine.servers.data import text as as_text
from engine.servers.prometheus import per_position

_METRICS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "drafted": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
}
# Prefix cache counters, in tokens (v1/metrics/loggers.py): queried and found cached. A KV
# connector's tier (CPU offload, LMCache) serves tokens the local cache missed, and a reset leaves
# it full (vllm#57727): its hits count as cached too, where the server exports them.
# Drafts whose token at each position was accepted (v1/spec_decode/metrics.py, observe_draft:
# position i counts once per draft that accepted more than i tokens), labelled position="i".
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_CACHE_METRICS = {"prompt": "vllm:prefix_cache_queries_total", "cached": "vllm:prefix_cache_hits_total"}
_EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"


class VLLMClient(RenderingClient):
    def readiness(self, status: int | None, body: bytes) -> Readiness:
        # Refused until the engine is built (only then does the API server listen). 503 is
        # EngineDeadError (health.py); anything else is not a vLLM that will come up.
        return readiness(status)

    # -- acceptance ---------------------------------------------------------------------------

    metric_families = (*_METRICS.values(), _PER_POS, *_CACHE_METRICS.values(), _EXTERNAL_HITS)

    def spec_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        if not all(name in samples for name in _METRICS.values()):
            return None
        return {**{key: samples[name] for key, name in _METRICS.items()},
                **per_position(samples, _PER_POS)}

    def missing_metrics(self, status: int | None, samples: dict[str, float] | None) -> str | None:
        if status is None:
            return "no answer on /metrics"
        if status != 200 or samples is None:
            return f"/metrics answered HTTP {status} (vLLM serves it by default)"
        if not all(name in samples for name in _METRICS.values()):
            return ("no vllm:spec_decode_* counters: vLLM exports them only with a speculative "
                    "config (--speculative-config)")
        return None
    # -- the prefix cache ---------------------------------------------------------------------

    flush_path = "/reset_prefix_cache"  # served only with VLLM_SERVER_DEV_MODE=1

    def flush_answer(self, status: int, body: str) -> str:
        """vLLM answers HTTP 200 even when the reset failed (blocks still held by a request or an
        offload): its body ``{"success": false}`` says so. Releases before that answered an
        empty 200 whatever happened: taken as done, and said to be unconfirmed."""
        if status == 404:
            raise FlushFailed("POST /reset_prefix_cache: HTTP 404: vLLM serves it only with "
                              "VLLM_SERVER_DEV_MODE=1 in the server's environment (control.env)")
        if status != 200:
            raise FlushFailed(f"POST /reset_prefix_cache answered HTTP {status}: {body.strip()[:200]}")
        if not body.strip():
            return "POST /reset_prefix_cache: HTTP 200, empty body (this vLLM does not confirm the reset)"
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        success = answer.get("success") if isinstance(answer, dict) else None
        if success is True:
            return 'POST /reset_prefix_cache: HTTP 200 {"success": true}'
        if success is False:
            raise FlushFailed('POST /reset_prefix_cache answered HTTP 200 {"success": false}: vLLM '
                              "did not reset its prefix cache (blocks still held)")
        raise FlushFailed(f"POST /reset_prefix_cache answered HTTP 200 {body.strip()[:200]!r}, not "
                          'the {"success": true} of a reset')

    def exact_length_fields(self, max_tokens: int) -> dict[str, Any]:
        # ChatCompletionRequest (entrypoints/openai/chat_completion/protocol.py): ignore_eos skips
        # the EOS token, min_tokens holds back every stop token (the generation config's too).
        return {"ignore_eos": True, "min_tokens": max_tokens}

    def cache_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        if not all(name in samples for name in _CACHE_METRICS.values()):
            return None
        return {"prompt": samples[_CACHE_METRICS["prompt"]],
                "cached": samples[_CACHE_METRICS["cached"]] + samples.get(_EXTERNAL_HITS, 0.0)}

    acceptance_fields = frozenset({"metrics"})

    def request_acceptance(self, chunk: dict[str, Any]) -> dict[str, int] | None:
        spec = mapping(mapping(chunk.get("metrics"), "metrics").get("speculative_decoding"),
                       "metrics.speculative_decoding")
        # acceptance_histogram: entry n counts the steps that accepted n drafts (docs/design/
        # per-request spec decode metrics: [39, 1, 0, 3] with 43 steps, 10 tokens accepted).
        return acceptance(spec.get("num_draft_tokens"), spec.get("num_accepted_draft_tokens"),
                          spec.get("num_spec_steps"), "metrics.speculative_decoding",
                          spec.get("acceptance_histogram"))

    # -- quality requests -----------------------------------------------------------------------

    def _render_body(self, messages: list[dict[str, Any]], knobs: dict[str, Any]) -> dict[str, Any]:
        # /tokenize renders with chat_template_kwargs and takes tools as the chat endpoint does;
        # other knobs ride along as the chat endpoint would merge them into the template variables.
        top = ("chat_template_kwargs", "tools")
        kwargs = dict(knobs.get("chat_template_kwargs") or {})
        kwargs.update({k: v for k, v in knobs.items() if k not in top})
        return {"messages": messages, "add_generation_prompt": True, "chat_template_kwargs": kwargs,
                **({"tools": knobs["tools"]} if "tools" in knobs else {})}

    def _detokenize(self, client: Http, ids: list[int]) -> str:
        return as_text(post_json(client, "/detokenize", {"tokens": ids})["prompt"], "/detokenize prompt")

    def chat_tokens(self, client: Http, body: dict[str, Any]) -> tuple[ChatReply, list[int]]:
        # return_token_ids puts the generated ids on the choice (chat_completion/protocol.py).
        reply = self.chat(client, {**body, "return_token_ids": True})
        choice = (reply.raw.get("choices") or [{}])[0]
        ids = choice.get("token_ids")
        if not isinstance(ids, list):
            raise Unsupported("vllm: no choices[0].token_ids in the chat answer (vLLM before 0.10.2?)")
        return reply, token_ids(ids, "choices[0].token_ids")

    def next_token(self, client: Http, ids: list[int], top_k: int,
                   fresh: bool) -> NextToken:
        out = post_json(client, "/v1/completions", next_token_body(ids, top_k))
        lp = (out["choices"][0].get("logprobs") or {}).get("top_logprobs") or []
        if not lp or not lp[0]:
            raise ValueError(f"/v1/completions answered without top_logprobs: {str(out)[:300]}")
        pairs = sorted(((int(k.removeprefix("token_id:")), number(v, "logprob")) for k, v in lp[0].items()),
                       key=lambda p: -p[1])[:top_k]
        return NextToken(pairs, {t: "" for t, _ in pairs})

    def score_sequence(self, client: Http, ids: list[int], start: int,
                       top_k: int) -> list[NextToken | None]:
        """Teacher forcing in one request; element j predicted ``ids[start + j]``."""
        out = post_json(client, "/v1/completions", teacher_forced_body(ids, top_k))
        rows = out["choices"][0].get("prompt_logprobs") or []
        return [_prompt_row(r, top_k) if r else None for r in rows[start:]]

    def reasoning_counts(self) -> bool:
        return True  # completion_tokens_details.reasoning_tokens with --reasoning-parser


def _prompt_row(row: dict[str, Any], top_k: int) -> NextToken:
    # {token_id: {logprob, rank, decoded_token}}: the top-k by rank plus the prompt's own token.
    items = sorted(((int(t), d) for t, d in row.items()), key=lambda p: p[1].get("rank") or 1 << 30)
    top = [(t, d["logprob"]) for t, d in items if (d.get("rank") or 1 << 30) <= top_k]
    return NextToken(top, {t: as_text(d.get("decoded_token"), "decoded_token") for t, d in items})


def next_token_body(ids: list[int], top_k: int) -> dict[str, Any]:
    return {"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": top_k,
            "return_tokens_as_token_ids": True}


def teacher_forced_body(ids: list[int], top_k: int) -> dict[str, Any]:
    """Prompt logprobs of every position of ``ids`` (not streamed: vLLM refuses that)."""
    return {"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": top_k,
            "stream": False}

