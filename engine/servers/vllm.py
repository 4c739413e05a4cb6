"""vLLM (``vllm serve``) adapter: command line, readiness, boot facts from its log.

Formats were checked against vLLM 0.33.0's own source (the PyPI wheel): ``logger.py`` (line
shape), ``model_executor/model_loader/default_loader.py`` (``Loading weights took``),
``v1/worker/gpu_model_runner.py`` (``Model loading took``, ``Graph capturing finished``),
``v1/worker/gpu_worker.py`` (``Available KV cache memory``), ``v1/core/kv_cache_utils.py``
(``GPU KV cache size``), ``v1/core/kv_cache_planning.py`` (``No available memory for the cache
blocks``), ``v1/engine/core.py`` (``EngineCore failed to start.``), ``v1/spec_decode/metrics.py``
(``SpecDecoding metrics``, counter names), ``entrypoints/serve/instrumentator/health.py`` (503
on a dead engine) and ``entrypoints/launchers/api_server/entry.py``. Older wordings come from
logs pasted in vLLM issues and PRs (tests/fixtures/logs/README.md).

Log shape
---------
``(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [gpu_worker.py:456] message``: process tag,
level, date, ``[file:line]``; older builds ``INFO 01-30 03:18:12 gpu_model_runner.py:848]
message``; CI relays may add ``[2025-08-12T08:42:32Z] `` in front. The level decides
error/warning; bare lines (tracebacks, ``ValueError: ...`` from a child process) go by wording.
uvicorn's lines read ``(APIServer pid=1) INFO:     Application startup complete.``

Fact keys
---------
- ``Loading weights took 5.43 seconds``: ``weights.load_s``.
- ``Model loading took 2.8871 GiB memory and 5.965132 seconds`` (older ``... GiB and ...
  seconds``; V1 of early 2025 ``Loading model weights took 67.7229 GB``): ``weights.mem_gib``
  (``weights.mem_gb`` for the GB form), ``weights.total_s``.
- ``Available KV cache memory: 17.36 GiB``: ``kv.available_gib``.
- ``GPU KV cache size: 188,640 tokens, Maximum concurrency for 131,072 tokens per request:
  5.23x`` (older: the two halves on two lines; early 2025 ``# GPU blocks: 1381``; V0 ``# cuda
  blocks: 7191, # CPU blocks: 512``): ``kv.tokens``, ``kv.max_model_len``,
  ``kv.max_concurrency``, ``kv.blocks``, ``kv.cpu_blocks``; ``kv.pools`` when the pools are not
  just ``GPU`` (``GPU + host``).
- ``Graph capturing finished in 7 secs, took 0.95 GiB``: ``graph.elapsed_s``, ``graph.mem_gib``.
- ``init engine (profile, create kv cache, warmup model) took 25.99 seconds`` (or ``took 13.70 s
  (compilation: 7.28 s)``): ``engine.init_s``; ``torch.compile takes 7.14 s in total``:
  ``engine.compile_s``.
- ``Initializing a V1 LLM engine (v0.9.2) with config: model='...', speculative_config=None, ...``:
  ``engine.version`` and ``config.<name>`` for :data:`CONFIG_KEPT`.
- ``Starting vLLM server on http://0.0.0.0:8000`` (older ``Starting vLLM API server 0 on ...``):
  ``server.url``; ``Application startup complete.``: ``ready`` = True.
- Failures: ``exit.error.<Type>`` = message (``ValueError: No available memory for the cache blocks. ...``,
  ``RuntimeError: Engine core initialization failed. ...``), ``exit.engine_core_failed`` = True
  (``EngineCore failed to start.``, older ``EngineCore hit an exception``).
- Periodic (never part of a boot diff): ``SpecDecoding metrics: Mean acceptance length: 3.12,
  Accepted throughput: ..., Drafted throughput: ..., Accepted: 262 tokens, Drafted: 295 tokens,
  Per-position acceptance rate: 0.983, 0.949, Avg Draft acceptance rate: 88.8%`` (Sept 2025 order
  ``Draft acceptance rate: 88.8%, Mean acceptance length: ...``; April 2025 ``SpecDecoding
  metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens, Drafted: 66 tokens``; V0
  ``Speculative metrics: Draft acceptance rate: 0.607, ..., Number of accepted tokens: 32594,
  Number of draft tokens: 53716, ...``): ``periodic.accept_len``, ``periodic.accept_rate``
  (a fraction), ``periodic.accepted``, ``periodic.drafted``, ``periodic.acc_per_pos`` (string).
  ``Engine 000: Avg prompt throughput: ..., Avg generation throughput: 10.0 tokens/s, ...``:
  ``periodic.gen_tps``.
- Other boot-looking lines: ``unparsed.<8 hex>`` (see :func:`engine.servers.sglang.unparsed_fact`).

Acceptance
----------
``/metrics`` (always on) carries ``vllm:spec_decode_num_drafts_total``,
``..._num_draft_tokens_total`` and ``..._num_accepted_tokens_total`` once a speculative config is
set, labelled per engine and model: summed over label sets. Rate = Δaccepted / Δdraft_tokens,
length = 1 + Δaccepted / Δdrafts. Per request only with ``--per-request-spec-decode-metrics
summary``: ``metrics.speculative_decoding`` on the final response / usage chunk.

Quality requests
----------------
Teacher forcing: ``/v1/completions`` with the ids as ``prompt``, ``prompt_logprobs`` = k,
``max_tokens: 1`` (not streamed) -> ``choices[0].prompt_logprobs``: first entry null, then
``{token_id: {logprob, rank, decoded_token}}`` holding the top-k and the prompt's own token.
The next-token distribution after a prefix: ``logprobs`` = k with ``return_tokens_as_token_ids``,
so ``top_logprobs`` keys read ``token_id:N``. More than 20 needs ``--max-logprobs``.
"""

from __future__ import annotations

import ast
import json
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from engine.servers.adapter import ServerAdapter
from engine.servers.client import (
    ChatReply,
    FlushFailed,
    Http,
    NextToken,
    Readiness,
    Unsupported,
    post_json,
)
from engine.servers.data import acceptance, mapping, number, token_ids
from engine.servers.data import text as as_text
from engine.servers.logs import Fact, FactValue
from engine.servers.sglang import (
    looks_like_boot_fact,
    num,
    num_or_str,
    repr_value,
    unparsed_fact,
)

_Add = Callable[[str, FactValue], None]

_NUM = r"[-+]?\d[\d,]*(?:\.\d+)?"
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX_RE = re.compile(
    r"^(?:\[\d{4}-\d{2}-\d{2}T[\d:.]+Z\]\s*)?"  # CI relay timestamp
    r"(?:\(\w+(?: rank=\d+)? pid=\d+\)\s*)?"  # (EngineCore_DP0 pid=387)
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)(?::\s+|\s+\d{2}-\d{2} [\d:]+\s+"
    r"\[?[\w./-]+:\d+\]\s*))?"
)

CONFIG_KEPT = ("model", "speculative_config", "dtype", "max_seq_len", "quantization",
               "kv_cache_dtype", "tensor_parallel_size", "enforce_eager", "enable_prefix_caching")

_WEIGHTS_RE = re.compile(r"^Loading weights took (?P<s>" + _NUM + r") seconds")
_MODEL_LOAD_RE = re.compile(
    r"^Model loading took (?P<mem>" + _NUM + r") (?P<unit>GiB|GB)(?: memory)? and (?P<s>" + _NUM
    + r") seconds"
)
_OLD_MODEL_LOAD_RE = re.compile(r"^Loading model weights took (?P<mem>" + _NUM + r") (?P<unit>GiB|GB)")
_KV_MEM_RE = re.compile(r"^Available KV cache memory: (?P<gib>" + _NUM + r") GiB")
_KV_SIZE_RE = re.compile(r"^(?P<pools>.+?) KV cache size: (?P<tokens>" + _NUM + r") tokens")
_CONCURRENCY_RE = re.compile(
    r"Maximum concurrency for (?P<len>" + _NUM + r") tokens per request: (?P<x>" + _NUM + r")x"
)
_BLOCKS_RE = re.compile(r"^# (?:GPU|cuda) blocks: (?P<n>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?")
_GRAPH_RE = re.compile(
    r"^Graph capturing finished in (?P<s>" + _NUM + r") secs?, took (?P<gib>" + _NUM + r") GiB"
)
_INIT_RE = re.compile(
    r"^init engine \(profile, create kv cache, warmup model\) took (?P<s>" + _NUM + r") (?:seconds|s)"
)
_COMPILE_RE = re.compile(r"^torch\.compile (?:takes|took) (?P<s>" + _NUM + r") s in total")
_ENGINE_CFG_RE = re.compile(r"^Initializing a \w+ LLM engine \((?P<v>v[^)]+)\) with config: (?P<cfg>.*)$")
_URL_RE = re.compile(r"^Starting vLLM (?:API )?server (?:\d+ )?on (?P<url>\S+)")
_READY_RE = re.compile(r"Application startup complete\.")
_CORE_FAILED_RE = re.compile(r"\bEngineCore (?:failed to start|hit an exception)")
_EXC_RE = re.compile(r"^(?P<exc>(?:[\w.]+\.)?\w*(?:Error|Exception)): (?P<msg>\S.*)$")
_SPEC_RE = re.compile(r"^(?:SpecDecoding|Speculative) metrics: (?P<rest>.*)$")
_PER_POS_RE = re.compile(r"Per-position acceptance (?:rate|probabilities): (?P<v>[\d., ]+?)(?:, [A-Z]|$)")
_ENGINE_STATS_RE = re.compile(r"^Engine \d+: .*?Avg generation throughput: (?P<tps>" + _NUM + r") tokens/s")

_ERROR_WORDS_RE = re.compile(
    r"^Traceback \(most recent call last\)|^(?:[\w.]+\.)?\w*(?:Error|Exception): |"
    r"\bEngineCore failed to start\b|\bCUDA out of memory\b|\bcore dumped\b|^Killed\b"
)
_WARNING_WORDS_RE = re.compile(r"\bwarn(?:ing)?\b|\bdeprecat", re.IGNORECASE)

_METRICS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "drafted": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
}
_TEXT_CACHE = 256
# Prefix cache counters, in tokens (v1/metrics/loggers.py): queried and found cached. A KV
# connector's tier (CPU offload, LMCache) serves tokens the local cache missed, and a reset leaves
# it full (vllm#57727): its hits count as cached too, where the server exports them.
_CACHE_METRICS = {"prompt": "vllm:prefix_cache_queries_total", "cached": "vllm:prefix_cache_hits_total"}
_EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"


def split_prefix(line: str) -> tuple[str | None, str]:
    """(level name or None, message without colour codes and log prefix)."""
    clean = _ANSI_RE.sub("", line.rstrip("\r\n"))
    m = _PREFIX_RE.match(clean)
    assert m is not None
    return m.group("level"), clean[m.end():].strip()


class VLLMAdapter(ServerAdapter):
    name = "vllm"
    default_container_port = 8000  # vllm/vllm-openai images; `vllm serve --port` default
    health_path = "/health"
    metrics_flag = "--speculative-config"  # /metrics is always on; spec counters need this
    ready_text = "Application startup complete."
    periodic_marks = ("Avg generation throughput", "SpecDecoding metrics:",
                      "Speculative metrics:")
    watched_facts = ("weights.mem_gib", "kv.available_gib", "kv.tokens", "kv.max_concurrency",
                     "graph.mem_gib", "config.*", "exit.*", "unparsed.*")

    def __init__(self) -> None:
        self._rendered: OrderedDict[str, list[int]] = OrderedDict()

    def listen_args(self, host: str, port: int | str) -> list[str]:
        return ["--host", host, "--port", str(port)]

    def parse_line(self, line: str, scope: str = "") -> list[Fact]:
        line = line.rstrip("\r\n")
        _, msg = split_prefix(line)
        out: list[Fact] = []

        def add(key: str, value: FactValue) -> None:
            out.append(Fact(key, value, line))

        for part in (self._weights, self._kv, self._engine, self._exit, self._periodic):
            if part(msg, add):
                return out
        if looks_like_boot_fact(msg) and not self.is_error(line) and not self.is_warning(line):
            out.append(unparsed_fact(msg, line))
        return out

    def _weights(self, msg: str, add: _Add) -> bool:
        if m := _WEIGHTS_RE.search(msg):
            add("weights.load_s", num(m["s"]))
        elif m := _MODEL_LOAD_RE.search(msg):
            add("weights.mem_gib" if m["unit"] == "GiB" else "weights.mem_gb", num(m["mem"]))
            add("weights.total_s", num(m["s"]))
        elif m := _OLD_MODEL_LOAD_RE.search(msg):
            add("weights.mem_gib" if m["unit"] == "GiB" else "weights.mem_gb", num(m["mem"]))
        else:
            return False
        return True

    def _kv(self, msg: str, add: _Add) -> bool:
        found = False
        if m := _KV_MEM_RE.search(msg):
            add("kv.available_gib", num(m["gib"]))
            return True
        if m := _KV_SIZE_RE.search(msg):
            add("kv.tokens", num(m["tokens"]))
            if m["pools"] != "GPU":
                add("kv.pools", m["pools"])
            found = True
        if m := _CONCURRENCY_RE.search(msg):  # same line since 2026, its own line before
            add("kv.max_model_len", num(m["len"]))
            add("kv.max_concurrency", num(m["x"]))
            found = True
        if m := _BLOCKS_RE.search(msg):
            add("kv.blocks", int(m["n"]))
            if m["cpu"] is not None:
                add("kv.cpu_blocks", int(m["cpu"]))
            found = True
        if m := _GRAPH_RE.search(msg):
            add("graph.elapsed_s", num(m["s"]))
            add("graph.mem_gib", num(m["gib"]))
            found = True
        return found

    def _engine(self, msg: str, add: _Add) -> bool:
        if m := _INIT_RE.search(msg):
            add("engine.init_s", num(m["s"]))
        elif m := _COMPILE_RE.search(msg):
            add("engine.compile_s", num(m["s"]))
        elif m := _ENGINE_CFG_RE.search(msg):
            add("engine.version", m["v"])
            for name in CONFIG_KEPT:
                text = repr_value(m["cfg"], name)
                if text is not None:
                    add(f"config.{name}", _config_value(text))
        elif m := _URL_RE.search(msg):
            add("server.url", m["url"])
        elif _READY_RE.search(msg):
            add("ready", True)
        else:
            return False
        return True

    def _exit(self, msg: str, add: _Add) -> bool:
        if _CORE_FAILED_RE.search(msg):
            add("exit.engine_core_failed", True)
        elif m := _EXC_RE.search(msg):
            add(f"exit.error.{m['exc']}", m["msg"])
        else:
            return False
        return True

    def _periodic(self, msg: str, add: _Add) -> bool:
        if m := _ENGINE_STATS_RE.search(msg):
            add("periodic.gen_tps", num(m["tps"]))
            return True
        m = _SPEC_RE.search(msg)
        if not m:
            return False
        rest = m["rest"].rstrip(".")
        if p := _PER_POS_RE.search(rest):
            add("periodic.acc_per_pos", p["v"].strip().rstrip(","))
        for k, v in re.findall(r"([A-Z][\w ]*?): (" + _NUM + r"%?)", rest):
            key = {"Mean acceptance length": "accept_len", "Accepted": "accepted",
                   "Drafted": "drafted", "Number of accepted tokens": "accepted",
                   "Number of draft tokens": "drafted", "Draft acceptance rate": "accept_rate",
                   "Avg Draft acceptance rate": "accept_rate"}.get(k.strip())
            if key is None:
                continue
            if v.endswith("%"):
                add(f"periodic.{key}", round(float(num(v[:-1])) / 100, 6))
            else:
                add(f"periodic.{key}", num(v))
        return True

    # -- classification ---------------------------------------------------------------------

    def is_error(self, line: str) -> bool:
        level, msg = split_prefix(line)
        if level is not None:
            return level in ("ERROR", "CRITICAL")
        return bool(_ERROR_WORDS_RE.search(msg))

    def is_warning(self, line: str) -> bool:
        level, msg = split_prefix(line)
        if level is not None:
            return level == "WARNING"
        return not _ERROR_WORDS_RE.search(msg) and bool(_WARNING_WORDS_RE.search(msg))

    def is_ready_line(self, line: str) -> bool:
        return bool(_READY_RE.search(split_prefix(line)[1]))

    def readiness(self, status: int | None, body: bytes) -> Readiness:
        if status is None:
            return Readiness.LOADING  # the API server listens only once the engine is built
        if status == 200:
            return Readiness.READY
        # 503 is EngineDeadError (health.py); anything else is not a vLLM that will come up.
        return Readiness.DEAD

    # -- acceptance ---------------------------------------------------------------------------

    def spec_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        if not all(name in samples for name in _METRICS.values()):
            return None
        return {key: samples[name] for key, name in _METRICS.items()}

    def missing_metrics(self, status: int | None, samples: dict[str, float] | None) -> str | None:
        if status is None:
            return "no answer on /metrics"
        if status != 200 or samples is None:
            return f"/metrics answered HTTP {status} (vLLM serves it by default)"
        if not all(name in samples for name in _METRICS.values()):
            return ("no vllm:spec_decode_* counters: vLLM exports them only with a speculative "
                    "config (--speculative-config)")
        return None

    def metrics_requirement(self, argv: list[str]) -> str | None:
        if self.metrics_flag not in argv:
            return "no --speculative-config: no spec-decode counters, acceptance is not measured"
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

    def cache_counters(self, samples: dict[str, float]) -> dict[str, float] | None:
        if not all(name in samples for name in _CACHE_METRICS.values()):
            return None
        return {"prompt": samples[_CACHE_METRICS["prompt"]],
                "cached": samples[_CACHE_METRICS["cached"]] + samples.get(_EXTERNAL_HITS, 0.0)}

    acceptance_fields = frozenset({"metrics"})

    def request_acceptance(self, chunk: dict[str, Any]) -> dict[str, int] | None:
        spec = mapping(mapping(chunk.get("metrics"), "metrics").get("speculative_decoding"),
                       "metrics.speculative_decoding")
        return acceptance(spec.get("num_draft_tokens"), spec.get("num_accepted_draft_tokens"),
                          spec.get("num_spec_steps"), "metrics.speculative_decoding")

    # -- quality requests -----------------------------------------------------------------------

    def render_chat(self, client: Http, messages: list[dict[str, Any]],
                    knobs: dict[str, Any]) -> str:
        # /tokenize renders with chat_template_kwargs; other knobs ride along as the chat
        # endpoint would merge them into the template variables.
        kwargs = dict(knobs.get("chat_template_kwargs") or {})
        kwargs.update({k: v for k, v in knobs.items() if k != "chat_template_kwargs"})
        body = {"messages": messages, "add_generation_prompt": True, "chat_template_kwargs": kwargs}
        ids = token_ids(post_json(client, "/tokenize", body)["tokens"], "/tokenize tokens")
        text = as_text(post_json(client, "/detokenize", {"tokens": ids})["prompt"], "/detokenize prompt")
        self._rendered[text] = ids
        self._rendered.move_to_end(text)
        while len(self._rendered) > _TEXT_CACHE:
            self._rendered.popitem(last=False)
        return text

    def tokenize(self, client: Http, text: str) -> list[int]:
        if text in self._rendered:
            return list(self._rendered[text])
        body = {"prompt": text, "add_special_tokens": False}
        return token_ids(post_json(client, "/tokenize", body)["tokens"], "/tokenize tokens")

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


def _config_value(text: str) -> FactValue:
    text = text.strip()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return num_or_str(text)
    return value if isinstance(value, bool | int | float | str) else str(value)


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
