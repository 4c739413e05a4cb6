"""SGLang's log: boot facts, which model a rank is loading, errors and warnings, the ready line.

Log shape
---------
``configure_logger`` prints ``[%(asctime)s{.ms}{ prefix}] %(message)s`` with a prefix such as
`` TP0`` or `` DP1 TP1``, and *no level name*: errors and warnings are told apart by wording.
A Ray wrapper may put ``(SGLangEngine pid=41820) `` in front. Every rank prints its own copy of
the per-model lines; facts are keyed without the rank (the copies agree) but the rank decides
which model a line belongs to, see below.

Fact keys
---------
Model-level keys (``weights.*``, ``kv.*``, ``mamba.*``, ``pool.*``, ``graph.*`` of the older
unnamed capture) take the prefix ``draft.`` when they belong to the speculative drafter. SGLang
prints the same wording for the drafter's ModelRunner, which loads after the target's: the scope
counts ``Load weight begin`` per rank, and a rank's second model is the drafter.

- ``Load weight end. elapsed=1.97 s, type=Qwen3ForCausalLM, avail mem=162.30 GB, mem usage=15.28
  GB.`` (0.5.23 adds ``quant=modelopt_fp4, quant_algo=NVFP4, `` before ``avail``; older
  ``Load weight end. type=..., dtype=torch.bfloat16, avail mem=..., mem usage=...``):
  ``weights.load_s``, ``weights.arch``, ``weights.quant`` (the ``quant=...`` text as printed),
  ``weights.dtype``, ``weights.avail_gb``, ``weights.mem_gb``; ``weights.begin_avail_gb`` from
  ``Load weight begin. avail mem=177.57 GB``.
- ``KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1106304, K size: 25.32 GB, V size:
  25.32 GB`` (MLA: ``KV size: ... GB``; older without ``dtype:``; oldest ``KV Cache is allocated.
  K size: ..., V size: ...`` without ``#tokens``; a label may prefix ``KV Cache``, and after
  capture it reads ``VA upper bound``): ``kv.dtype``, ``kv.tokens``, ``kv.k_gb``, ``kv.v_gb``,
  ``kv.kv_gb``; a labelled pool's keys are ``kv.<label>.*`` (label lower-cased, ``_`` for
  spaces); ``kv.va_upper_bound`` = True for the VA line. ``Post-capture KV sizing: KV cache
  allocated. dtype: ..., #tokens: N, KV size: X GB, avail mem=Y GB`` gives ``kv.post_capture.*``.
- ``Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: 0.10GB, ssm_state size:
  1.20GB intermediate_ssm_state_cache size: 9.57GB ...``: ``mamba.max_size``, ``mamba.conv_gb``,
  ``mamba.ssm_gb``, ``mamba.intermediate_ssm_gb``, ``mamba.intermediate_conv_window_gb``.
  ``GDN ReplaySSM ring buffers allocated (...)``: ``replayssm.ring_allocated`` = True.
- ``SWAKVPool mem usage: 79.94 GB, swa size: 798276, full size: 997846``: ``kv.swa_pool_gb``,
  ``kv.swa_tokens``, ``kv.full_tokens``.
- ``Memory pool end. avail mem=25.26 GB``: ``pool.avail_gb``.
- ``Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=7, avail mem=...``
  and ``... end. bs=[1, 2], elapsed=22.18 s, mem usage=1.91 GB, avail mem=14.18 GB.`` (``bs=``
  absent in earlier 0.5.x): ``graph.<role>_<kind>.backend``, ``.num_tokens_per_req``,
  ``.elapsed_s``, ``.mem_gb``, ``.avail_gb`` (role target|draft, kind decode|verify|prefill).
  Older: ``Capture cuda graph begin. This can take up to several minutes. avail mem=12.01 GB`` /
  ``Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.``:
  ``graph.begin_avail_gb``, ``graph.elapsed_s``, ``graph.mem_gb``, ``graph.avail_gb``.
- ``max_total_num_tokens=992896, chunked_prefill_size=8192, max_prefill_tokens=16384,
  max_running_requests=48, context_len=131072, available_gpu_mem=25.26 GB``: ``sched.<name>``
  (``available_gpu_mem`` -> ``sched.available_gpu_mem_gb``; older ``max_total_num_tokens=...,
  available_gpu_mem=...`` with fewer fields parse the same way).
- ``server_args=ServerArgs(model_path='...', ...)``: ``args.<name>`` for the fields in
  :data:`SERVER_ARGS_KEPT` (what windows change: speculative settings, backends, dtypes).
- ``Engine startup timings (s): load_weight=..., kv_cache_allocation=..., scheduler_e2e=...,
  cuda_graph={...}, tokenizer_e2e=...``: ``startup.<name>_s``.
- ``KDA fused chain-verify kernel enabled (topk==1 path).``: ``kda.fused_chain_verify`` = True
  (the notes' W3 "engaged: the boot log said so").
- ``The server is fired up and ready to roll!``: ``ready`` = True. uvicorn's earlier
  ``Application startup complete.`` is *not* ready: SGLang's own warm-up request runs after it.
- Failures: ``exit.error.<Type>`` = message, one key per exception type (the root cause and
  its wrapper both stay), from the ``XxxError: message`` line, e.g. ``RuntimeError: Not enough
  memory. Please try to increase --mem-fraction-static.`` or the ReplaySSM guard's
  ``ValueError``), ``exit.scheduler_exception`` = True (``Scheduler hit an exception:``),
  ``exit.init_failed`` = True (``Initialization failed.``), ``exit.rank_died`` and
  ``exit.code`` (``Rank 0 scheduler died during initialization (exit code: -9)``).
- Periodic (per request batch, never part of a boot diff): ``Decode batch, #running-req: 8,
  #token: 1234, token usage: 0.05, accept len: 3.12, accept rate: 0.53, cuda graph: True, gen
  throughput (token/s): 812.40, #queue-req: 0`` (older ``Decode batch. ...`` without accept
  rate): ``periodic.running_req``, ``periodic.tokens``, ``periodic.token_usage``,
  ``periodic.accept_len``, ``periodic.accept_rate``, ``periodic.cuda_graph``,
  ``periodic.gen_tps``, ``periodic.queue_req``. These are windowed by the log interval, so a
  rep's acceptance comes from ``/metrics`` deltas instead.
- Anything else that looks like a boot fact (mentions KV, memory, GB, graph, pool, tokens...) is
  kept verbatim as ``unparsed.<8 hex>`` (see :func:`engine.servers.common.unparsed_fact`).
"""

from __future__ import annotations

import ast
import re

from engine.servers import common
from engine.servers.common import NUMBER, Add, line_facts, num, num_or_str, repr_value
from engine.servers.logs import Fact, FactValue, LogReader, torch_dtype

# "(SGLangEngine pid=41820) " from Ray; "[2026-04-27 02:36:03 DP0 TP0] " or "[... .123]" from
# configure_logger. The rank tag is kept apart: it decides which model a line belongs to.
_PREFIX_RE = re.compile(
    r"^(?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*)?"
    r"(?:\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?P<rank>(?: [A-Z]+\d+)*)\]\s*)?"
)

_MODEL_LEVEL = ("weights.", "kv.", "mamba.", "pool.", "graph.", "replayssm.")
_DRAFT = "draft."
_UNSCOPED = ("graph.target_", "graph.draft_", "kv.post_capture.")

# Server args worth diffing between windows; the repr holds hundreds, most never change.
SERVER_ARGS_KEPT = (
    "model_path", "revision", "quantization", "dtype", "kv_cache_dtype", "mem_fraction_static",
    "context_length", "tp_size", "max_running_requests", "attention_backend",
    "moe_runner_backend", "dsa_prefill_backend", "dsa_decode_backend", "linear_attn_backend",
    "linear_attn_verify_backend", "enable_linear_replayssm_spec", "speculative_algorithm",
    "speculative_draft_model_path", "speculative_draft_model_revision", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_dflash_block_size",
    "reasoning_parser", "enable_metrics", "enable_deterministic_inference",
)

# -- boot-fact patterns ------------------------------------------------------------------

_LOAD_BEGIN_RE = re.compile(r"^Load weight begin\. avail mem=(?P<avail>" + NUMBER + r") GB")
_LOAD_END_RE = re.compile(r"^Load weight end\.\s*(?P<rest>.*)$")
_KV_RE = re.compile(
    r"^(?:(?P<label>.+?) )?KV Cache (?P<va>is allocated|VA upper bound)\.\s*"
    r"(?:dtype: (?P<dtype>[^,]+),\s*)?(?:#tokens: (?P<tokens>\d+),\s*)?"
    r"(?:K size: (?P<k>" + NUMBER + r") GB,\s*V size: (?P<v>" + NUMBER + r") GB"
    r"|KV size: (?P<kv>" + NUMBER + r") GB)"
)
_POST_KV_RE = re.compile(
    r"^Post-capture KV sizing: KV cache allocated\. dtype: (?P<dtype>[^,]+), #tokens: "
    r"(?P<tokens>\d+), KV size: (?P<kv>" + NUMBER + r") GB, avail mem=(?P<avail>" + NUMBER + r") GB"
)
_MAMBA_RE = re.compile(r"^Mamba Cache is allocated\.\s*(?P<rest>.*)$")
_MAMBA_PART_RE = re.compile(r"(?P<k>[a-z_]+)(?: size)?: (?P<v>" + NUMBER + r")\s*(?P<gb>GB)?")
_SWA_RE = re.compile(
    r"^SWAKVPool mem usage: (?P<gb>" + NUMBER + r") GB, swa size: (?P<swa>\d+), full size: (?P<full>\d+)"
)
_POOL_END_RE = re.compile(r"^Memory pool end\. avail mem=(?P<avail>" + NUMBER + r") GB")
_GRAPH_NEW_RE = re.compile(
    r"^Capture (?P<role>target|draft) (?P<kind>\w+) \w+ graph (?P<when>begin|end)\.\s*(?P<rest>.*)$"
)
_GRAPH_OLD_BEGIN_RE = re.compile(r"^Capture cuda graph begin\..*?avail mem=(?P<avail>" + NUMBER + r") GB")
_GRAPH_OLD_END_RE = re.compile(
    r"^Capture cuda graph end\. Time elapsed: (?P<s>" + NUMBER + r") s\. mem usage=(?P<mem>" + NUMBER
    + r") GB\. avail mem=(?P<avail>" + NUMBER + r") GB"
)
_SCHED_RE = re.compile(r"^max_total_num_tokens=\d+")
_SERVER_ARGS_RE = re.compile(r"^server_args=ServerArgs\((?P<body>.*)\)\s*$")
_STARTUP_RE = re.compile(r"^Engine startup timings \(s\): (?P<rest>.*)$")
_KDA_CHAIN_RE = re.compile(r"KDA fused chain-verify kernel enabled")
_REPLAYSSM_RE = re.compile(r"^GDN ReplaySSM ring buffers allocated")
_READY_RE = re.compile(r"The server is fired up and ready to roll!")
_EXC_RE = re.compile(r"^(?P<exc>(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)): (?P<msg>\S.*)$")
_SCHED_EXC_RE = re.compile(r"\bScheduler hit an exception\b")
_INIT_FAILED_RE = re.compile(r"\bInitialization failed\b")
_RANK_DIED_RE = re.compile(
    r"\bRank (?P<rank>\d+) scheduler died during initialization \(exit code: (?P<code>-?\d+)\)"
)
_DECODE_RE = re.compile(r"^Decode batch(?: \[\d+\])?[.,]\s*(?P<rest>.*)$")
_PAIR_RE = re.compile(r"(?P<k>[#\w][\w \-/()#.]*?)[:=]\s*(?P<v>[^,]+)")
_KV_PAIR_RE = re.compile(r"(?P<k>\w+)=(?P<v>\{[^}]*\}|[^,]+)")

# -- error / warning wording (SGLang prints no level name) ----------------------------------

_ERROR_RE = re.compile(
    r"^Traceback \(most recent call last\)|^(?:[\w.]+\.)?\w*(?:Error|Exception): |"
    r"\bScheduler hit an exception\b|\bInitialization failed\b|\bscheduler died\b|"
    r"\bCUDA out of memory\b|\bHealth check failed\b|\bcore dumped\b|\bSegmentation fault\b|"
    r"^Killed\b|^ERROR\b|\berror:",
)
_WARNING_RE = re.compile(r"\bwarn(?:ing)?\b|\bdeprecat|^WARN", re.IGNORECASE)


def split_prefix(line: str) -> tuple[str, str]:
    """(rank tag such as ``"DP0 TP0"`` or ``""``, message without colour codes and prefix)."""
    m, msg = common.split_prefix(line, _PREFIX_RE)
    return (m.group("rank") or "").strip(), msg.strip()


def key_name(text: str) -> str:
    """A printed label as a key part: ``gen throughput (token/s)`` -> ``gen_throughput_token_s``."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "unknown"


def _literal(text: str) -> FactValue | None:
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value if value is not None else "None"
    return None


class SGLangLogs(LogReader):
    ready_text = "The server is fired up and ready to roll!"
    periodic_marks = ("Decode batch",)
    # What a window's boot is diffed on first (the dry run lists them).
    watched_facts = ("weights.mem_gb", "kv.tokens", "kv.*_gb", "kv.<label>.*", "mamba.*_gb",
                     "pool.avail_gb", "graph.<role>_<kind>.mem_gb", "sched.max_total_num_tokens",
                     "args.speculative_*", "kda.fused_chain_verify", "draft.*", "exit.*",
                     "unparsed.*")

    def common_facts(self, facts: dict[str, FactValue]) -> dict[str, FactValue]:
        algo = facts.get("args.speculative_algorithm")
        steps = facts.get("args.speculative_num_steps")
        found: dict[str, FactValue | None] = {
            "kv.tokens": facts.get("sched.max_total_num_tokens", facts.get("kv.tokens")),
            "kv.dtype": torch_dtype(facts.get("kv.dtype")),
            "slots": facts.get("sched.max_running_requests", facts.get("args.max_running_requests")),
            "context": facts.get("sched.context_len"),
            "spec.method": None if algo is None else "off" if algo == "None" else str(algo).lower(),
            "spec.depth": steps if isinstance(steps, int) else facts.get(
                "args.speculative_num_draft_tokens") if algo not in (None, "None") else None}
        return {k: v for k, v in found.items() if v is not None}

    # -- scope: which model a rank is loading ---------------------------------------------

    def scope(self, line: str, current: str) -> str | None:
        rank, msg = split_prefix(line)
        if not _LOAD_BEGIN_RE.search(msg):
            return None
        counts = dict(_scope_counts(current))
        counts[rank] = counts.get(rank, 0) + 1
        return ";".join(f"{r}={n}" for r, n in sorted(counts.items()))

    def parse_line(self, line: str, scope: str = "") -> list[Fact]:
        line = line.rstrip("\r\n")
        rank, msg = split_prefix(line)
        draft = dict(_scope_counts(scope)).get(rank, 0) >= 2

        def key(name: str) -> str:
            # Lines that name their model (capture role) or the whole server are never scoped.
            if draft and name.startswith(_MODEL_LEVEL) and not name.startswith(_UNSCOPED):
                return _DRAFT + name
            return name

        return line_facts(line, msg, (self._weights, self._kv, self._graph, self._server,
                                      self._exit, self._periodic),
                          key, unparsed=lambda x: not self.is_error(x))

    def _weights(self, msg: str, add: Add) -> bool:
        if m := _LOAD_BEGIN_RE.search(msg):
            add("weights.begin_avail_gb", num(m["avail"]))
            return True
        if m := _LOAD_END_RE.search(msg):
            rest = m["rest"].rstrip(".")
            quant = re.search(r"\b(quant=.*?)(?=, (?:avail mem|mem usage)=|$)", rest)
            if quant:
                add("weights.quant", quant.group(1))
                rest = rest.replace(quant.group(1), "")
            for k, v in _KV_PAIR_RE.findall(rest):
                v = v.strip().removesuffix(" GB").removesuffix(" s")
                key = {"elapsed": "weights.load_s", "type": "weights.arch", "dtype": "weights.dtype",
                       "avail mem": "weights.avail_gb", "mem usage": "weights.mem_gb"}.get(k)
                if key:
                    add(key, num_or_str(v))
            for k, v in re.findall(r"(avail mem|mem usage)=(" + NUMBER + ")", rest):
                add("weights.avail_gb" if k == "avail mem" else "weights.mem_gb", num(v))
            return True
        return False

    def _kv(self, msg: str, add: Add) -> bool:
        if m := _KV_RE.search(msg):
            label = m["label"]
            pre = f"kv.{key_name(label)}." if label else "kv."
            if m["dtype"]:
                add(pre + "dtype", m["dtype"].strip())
            if m["tokens"]:
                add(pre + "tokens", int(m["tokens"]))
            for g in ("k", "v", "kv"):
                if m[g]:
                    add(f"{pre}{g}_gb", num(m[g]))
            if m["va"] == "VA upper bound":
                add(pre + "va_upper_bound", True)
            return True
        if m := _POST_KV_RE.search(msg):
            add("kv.post_capture.dtype", m["dtype"].strip())
            add("kv.post_capture.tokens", int(m["tokens"]))
            add("kv.post_capture.kv_gb", num(m["kv"]))
            add("kv.post_capture.avail_gb", num(m["avail"]))
            return True
        if m := _MAMBA_RE.search(msg):
            for part in _MAMBA_PART_RE.finditer(m["rest"]):
                k = part["k"].removesuffix("_cache").removesuffix("_state")
                if k == "max_mamba_cache_size":
                    add("mamba.max_size", int(num(part["v"])))
                else:
                    add(f"mamba.{k.replace('_state', '')}_gb", num(part["v"]))
            return True
        if m := _SWA_RE.search(msg):
            add("kv.swa_pool_gb", num(m["gb"]))
            add("kv.swa_tokens", int(m["swa"]))
            add("kv.full_tokens", int(m["full"]))
            return True
        if m := _POOL_END_RE.search(msg):
            add("pool.avail_gb", num(m["avail"]))
            return True
        if _REPLAYSSM_RE.search(msg):
            add("replayssm.ring_allocated", True)
            return True
        return False

    def _graph(self, msg: str, add: Add) -> bool:
        if m := _GRAPH_NEW_RE.search(msg):
            # Role and kind are in the line, so no draft scope applies: use plain keys.
            pre = f"graph.{m['role']}_{m['kind']}."
            rest = m["rest"].rstrip(".")
            if m["when"] == "begin":
                for k, v in _KV_PAIR_RE.findall(rest):
                    if k == "backend":
                        add(pre + "backend", v.strip())
                    elif k == "num_tokens_per_req":
                        add(pre + "num_tokens_per_req", int(num(v)))
                    elif k == "num_tokens":
                        add(pre + "num_tokens", v.strip())
                return True
            for k, v in re.findall(r"(elapsed|mem usage|avail mem)=(" + NUMBER + ")", rest):
                add(pre + {"elapsed": "elapsed_s", "mem usage": "mem_gb", "avail mem": "avail_gb"}[k],
                    num(v))
            return True
        if m := _GRAPH_OLD_BEGIN_RE.search(msg):
            add("graph.begin_avail_gb", num(m["avail"]))
            return True
        if m := _GRAPH_OLD_END_RE.search(msg):
            add("graph.elapsed_s", num(m["s"]))
            add("graph.mem_gb", num(m["mem"]))
            add("graph.avail_gb", num(m["avail"]))
            return True
        return False

    def _server(self, msg: str, add: Add) -> bool:
        if _SCHED_RE.search(msg):
            for k, v in _KV_PAIR_RE.findall(msg):
                v = v.strip()
                if v.endswith(" GB"):
                    add(f"sched.{k}_gb", num(v[:-3]))
                else:
                    add(f"sched.{k}", num_or_str(v))
            return True
        if m := _SERVER_ARGS_RE.search(msg):
            for name in SERVER_ARGS_KEPT:
                text = repr_value(m["body"], name)
                if text is not None and (value := _literal(text)) is not None:
                    add(f"args.{name}", value)
            return True
        if m := _STARTUP_RE.search(msg):
            for k, v in _KV_PAIR_RE.findall(m["rest"]):
                if not v.startswith("{"):
                    add(f"startup.{k}_s", num(v))
            return True
        if _KDA_CHAIN_RE.search(msg):
            add("kda.fused_chain_verify", True)
            return True
        if _READY_RE.search(msg):
            add("ready", True)
            return True
        return False

    def _exit(self, msg: str, add: Add) -> bool:
        if m := _RANK_DIED_RE.search(msg):
            add("exit.rank_died", int(m["rank"]))
            add("exit.code", int(m["code"]))
            if m2 := _EXC_RE.search(msg):
                add(f"exit.error.{m2['exc']}", m2["msg"])
            return True
        if _SCHED_EXC_RE.search(msg):
            add("exit.scheduler_exception", True)
            return True
        if _INIT_FAILED_RE.search(msg):
            add("exit.init_failed", True)
            return True
        if m := _EXC_RE.search(msg):
            # Keyed by type: the root cause (often the first) and the wrapper that follows it
            # (a RuntimeError about a dead rank) both stay.
            add(f"exit.error.{m['exc']}", m["msg"])
            return True
        return False

    def _periodic(self, msg: str, add: Add) -> bool:
        m = _DECODE_RE.search(msg)
        if not m:
            return False
        names = {"#running-req": "running_req", "#token": "tokens", "token usage": "token_usage",
                 "accept len": "accept_len", "accept rate": "accept_rate", "cuda graph": "cuda_graph",
                 "gen throughput (token/s)": "gen_tps", "#queue-req": "queue_req"}
        for part in _PAIR_RE.finditer(m["rest"]):
            k = part["k"].strip()
            if k in names:
                add(f"periodic.{names[k]}", num_or_str(part["v"]))
        return True

    # -- classification ---------------------------------------------------------------------

    def is_error(self, line: str) -> bool:
        _, msg = split_prefix(line)
        return bool(_ERROR_RE.search(msg))

    def is_warning(self, line: str) -> bool:
        _, msg = split_prefix(line)
        return not _ERROR_RE.search(msg) and bool(_WARNING_RE.search(msg))

    def is_ready_line(self, line: str) -> bool:
        return bool(_READY_RE.search(split_prefix(line)[1]))


def _scope_counts(scope: str) -> list[tuple[str, int]]:
    out = []
    for part in scope.split(";") if scope else []:
        rank, _, n = part.rpartition("=")
        if n.isdigit():
            out.append((rank, int(n)))
    return out

