"""SGLang's HTTP API: readiness, metrics, the radix cache, acceptance, quality requests.

Acceptance
----------
``/metrics`` (only with ``--enable-metrics``) has ``sglang:generation_tokens_total`` and
``sglang:spec_verify_calls_total``, labelled (model name, ``is_streaming``...): samples are summed
over label sets (:func:`summed_samples`). Per rep: length = Δgeneration_tokens / Δverify_calls,
so ``drafts`` = Δverify, ``accepted`` = Δgen − Δverify (each step commits its accepted drafts
plus one bonus token), ``drafted`` = Δverify × (B − 1) with B = ``sglang:spec_num_draft_tokens``
(DFlash: the block size). ``/server_info``'s ``avg_spec_accept_length`` is never used: it is a
lifetime figure of rank 0. Per request: native ``meta_info.spec_verify_ct`` /
``spec_num_correct_drafts`` / ``spec_num_proposed_drafts``, or with ``"return_spec_tokens_details":
true`` on OpenAI endpoints ``sglext.spec_tokens_details`` with the same names; per draft position
from the request's ``spec_accept_histogram``. ``/metrics`` has no per-position counter.

Quality requests
----------------
Teacher forcing is one native ``/generate`` per sequence: ``input_ids`` = prompt + continuation,
``return_logprob``, ``logprob_start_len`` = len(prompt), ``max_new_tokens: 0``,
``top_logprobs_num`` = k -> ``meta_info.input_top_logprobs`` (``[logprob, token_id, text]``).
The chat template is rendered by ``/tokenize`` with ``messages`` and the knobs (0.5.23 renders
them exactly as a chat completion would), and decoded by ``/detokenize`` for a readable text.
"""

from __future__ import annotations

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
from engine.servers.data import acceptance, mapping, token_ids
from engine.servers.data import text as as_text

_METRIC_GEN = "sglang:generation_tokens_total"
_METRIC_VERIFY = "sglang:spec_verify_calls_total"
_METRIC_BLOCK = "sglang:spec_num_draft_tokens"
# Prompt tokens and those served from the radix cache (metrics/collector.py; --enable-metrics).
_METRIC_PROMPT = "sglang:prompt_tokens_total"
_METRIC_CACHED = "sglang:cached_tokens_total"


class SGLangClient(RenderingClient):
    def readiness(self, status: int | None, body: bytes) -> Readiness:
        # Refused until the tokenizer manager serves HTTP. An empty 503 while ServerStatus.Starting,
        # i.e. until SGLang's own warm-up request ends; a later health-check failure also answers
        # 503, and the boot timeout and the process liveness decide that case. 404 (not SGLang),
        # 500: waiting will not help.
        return readiness(status, loading=(503,))

    # -- acceptance ---------------------------------------------------------------------------

    metric_families = (_METRIC_GEN, _METRIC_VERIFY, _METRIC_BLOCK, _METRIC_PROMPT, _METRIC_CACHED)

    def spec_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        if _METRIC_GEN not in samples or _METRIC_VERIFY not in samples:
            return None
        return sglang_counters(samples[_METRIC_GEN], samples[_METRIC_VERIFY], samples.get(_METRIC_BLOCK))

    def missing_metrics(self, status: int | None, samples: dict[str, float] | None) -> str | None:
        """Why the rep's acceptance cannot come from ``/metrics``, naming the flag; None if it can."""
        if status is None:
            return "no answer on /metrics"
        if status == 404 or samples is None:
            return "SGLang serves /metrics only with --enable-metrics: add it to control.args"
        if _METRIC_VERIFY not in samples:
            return ("no sglang:spec_verify_calls_total yet: speculative decoding is off "
                    "(--speculative-algorithm) or no request has finished")
        if _METRIC_GEN not in samples:
            return f"no {_METRIC_GEN}: the committed tokens a verify step's length needs"
        if _METRIC_BLOCK not in samples:
            return ("no sglang:spec_num_draft_tokens: acceptance length only; the rate needs the "
                    "block size (a newer SGLang exports it)")
        return None

    # -- the prefix cache ---------------------------------------------------------------------

    flush_path = "/flush_cache"

    def flush_answer(self, status: int, body: str) -> str:
        # http_server.py: 200 when flushed, 400 when requests were running or waiting (the same
        # text either way: "Cache flushed. Please check backend logs...").
        if status == 400:
            raise FlushFailed("POST /flush_cache answered HTTP 400: SGLang did not flush its radix "
                              "cache (requests were running or waiting)")
        return super().flush_answer(status, body)

    def cache_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        if _METRIC_PROMPT not in samples or _METRIC_CACHED not in samples:
            return None
        return {"prompt": samples[_METRIC_PROMPT], "cached": samples[_METRIC_CACHED]}

    def load_fields(self) -> dict[str, Any]:
        """Request fields for the load generator: per-request acceptance on OpenAI endpoints."""
        return {"return_spec_tokens_details": True}

    def exact_length_fields(self, max_tokens: int) -> dict[str, Any]:
        # ChatCompletionRequest (srt/entrypoints/openai/protocol.py): ignore_eos and min_tokens,
        # as for vLLM; bench_serving sends ignore_eos for the same reason.
        return {"ignore_eos": True, "min_tokens": max_tokens}

    acceptance_fields = frozenset({"sglext", "meta_info"})

    def request_acceptance(self, chunk: dict[str, Any]) -> dict[str, int] | None:
        details = mapping(chunk.get("sglext"), "sglext").get("spec_tokens_details")
        if isinstance(details, list):
            details = details[0] if details else None
        if details is None:
            details = chunk.get("meta_info")  # native /generate
        details = mapping(details, "spec_tokens_details")
        if not details.get("spec_num_proposed_drafts"):
            return None  # nothing drafted (yet): no acceptance to count
        # The histogram (Req.update_spec_acceptance_histogram, srt/managers/schedule_batch.py:
        # entry n = verify steps that accepted n drafts) is sent only when not empty; its older
        # name is spec_correct_drafts_histogram.
        histogram = details.get("spec_accept_histogram", details.get("spec_correct_drafts_histogram"))
        return acceptance(details.get("spec_num_proposed_drafts"), details.get("spec_num_correct_drafts"),
                          details.get("spec_verify_ct"), "spec_tokens_details", histogram)

    # -- quality requests -----------------------------------------------------------------------

    def _render_body(self, messages: list[dict[str, Any]], knobs: dict[str, Any]) -> dict[str, Any]:
        return {"messages": messages, **knobs}

    def _detokenize(self, client: Http, ids: list[int]) -> str:
        body = {"tokens": ids, "skip_special_tokens": False}
        return as_text(post_json(client, "/detokenize", body)["text"], "/detokenize text")

    def chat_tokens(self, client: Http, body: dict[str, Any]) -> tuple[ChatReply, list[int]]:
        # 0.5.23 returns the generated ids in sglext when asked (serving_chat.py); they include
        # the stop token, so the continuation is known without tokenizing text again.
        reply = self.chat(client, {**body, "return_output_ids_in_sglext": True})
        ids = (reply.raw.get("sglext") or {}).get("output_ids") or []
        if ids and isinstance(ids[0], list):  # one list per choice
            ids = ids[0]
        if not ids:
            raise Unsupported("sglang: no sglext.output_ids in the chat answer (SGLang before 0.5.2x?)")
        return reply, token_ids(ids, "sglext.output_ids")

    def next_token(self, client: Http, ids: list[int], top_k: int,
                   fresh: bool) -> NextToken:
        # SGLang has no per-request cache bypass; ``fresh`` cannot be honoured (the radix cache
        # reuses any prefix), which is the same for every SGLang window compared.
        out = post_json(client, "/generate", next_token_body(ids, top_k))
        tops = (out.get("meta_info") or {}).get("output_top_logprobs") or []
        if not tops or not tops[0]:
            raise ValueError(f"/generate answered without output_top_logprobs: {str(out)[:300]}")
        return _next_token(tops[0])

    def score_sequence(self, client: Http, ids: list[int], start: int,
                       top_k: int) -> list[NextToken | None]:
        """Teacher forcing in one request: the top-k at every position ``start..len(ids)-1``.

        Element j is the distribution that predicted ``ids[start + j]``; None where the server
        gave none. A batched alternative to :meth:`next_token` (one request per sequence).
        """
        out = post_json(client, "/generate", teacher_forced_body(ids, start, top_k))
        tops = (out.get("meta_info") or {}).get("input_top_logprobs") or []
        want = len(ids) - start
        tops = list(tops)[-want:] if want else []
        return [_next_token(t) if t else None for t in tops]

    def quality_fields(self) -> dict[str, Any]:
        return {}

    def reasoning_counts(self) -> bool:
        return True  # usage.reasoning_tokens with --reasoning-parser (usage_processor.py)


def _next_token(top: list[list[Any]]) -> NextToken:
    # SGLang entries are [logprob, token_id, text-or-None], best first.
    return NextToken([(t[1], t[0]) for t in top], {t[1]: as_text(t[2], "token text") for t in top})


def sglang_counters(gen_tokens: float, verify_calls: float,
                    block: float | None) -> dict[str, float]:
    """Lifetime counters in the engine's vocabulary (callers take the delta across a rep).

    Δgen / Δverify is the acceptance length with the bonus token; accepted drafts are the
    committed tokens minus one bonus per verify step; a block of B tokens drafts B - 1 a step.
    """
    drafted = verify_calls * (block - 1) if block and block > 1 else 0.0
    return {"drafts": verify_calls, "drafted": drafted, "accepted": gen_tokens - verify_calls}


def next_token_body(ids: list[int], top_k: int) -> dict[str, Any]:
    # logprob_start_len -1: logprobs of the generated token only, not of the prompt.
    return {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True, "logprob_start_len": -1, "top_logprobs_num": top_k}


def teacher_forced_body(ids: list[int], start: int, top_k: int) -> dict[str, Any]:
    """Score ``ids[start:]`` under the prefix, generating nothing (SERVERS.md)."""
    return {"input_ids": ids, "sampling_params": {"max_new_tokens": 0, "temperature": 0},
            "return_logprob": True, "logprob_start_len": start, "top_logprobs_num": top_k}
