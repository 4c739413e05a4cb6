"""llama.cpp's log: boot facts, sections, errors and warnings, the ready line.

Log shape
---------
``common_init()`` turns on a timestamp and a level letter, so a line reads
``0.00.423.206 I llama_kv_cache: size = ...``. The prefix (and any ANSI colour) is stripped
before matching, while facts keep the verbatim line. The letter, when present, decides
error/warning: ``E`` is an error, ``W`` a warning, ``I``/``D`` neither. Bare lines (argument
errors printed with ``fprintf`` before logging starts, the continuation lines of multi-line
messages, logs of builds without the prefix) are classified by wording.

This build maps libllama's INFO messages to *trace* verbosity (4) while the default threshold
is 3: without ``-lv 4`` the KV-cache, buffer, ``print_info`` and ``llama_context`` lines are
not printed at all. :meth:`~engine.servers.llamacpp.launch.LlamaCppLaunch.log_args` returns ``["-lv", "4"]``.

Fact keys (examples are real lines from the fixtures, prefix dropped)
--------------------------------------------------------------------
Model-level keys (``model.*``, ``weights.*``, ``kv.*``, ``ctx.*``, ``compute.*``,
``output.*``) get the prefix ``draft.`` once the log says the draft model is loading
(``common_speculative_init_result: loading draft model '/tmp/models/q2k.gguf'``; older
``srv load_model: loading draft model '...'``; MTP: ``creating MTP draft context ...``). The
drafter is loaded after the target, in the same log, and prints the same wording.

KV cache, ``llama_kv_cache: size =   45.00 MiB (  1024 cells,  30 layers,  2/2 seqs),
K (f16):   22.50 MiB, V (f16):   22.50 MiB`` (older prefix ``llama_kv_cache_unified:``, older
``1 seqs`` and ``1/ 1 seqs``; 2024 ``llama_new_context_with_model: KV self size  = ...``):
``kv.size_mib``, ``kv.cells``, ``kv.layers``, ``kv.seqs``, ``kv.streams``, ``kv.tokens``,
``kv.k_type``, ``kv.k_mib``, ``kv.v_type``, ``kv.v_mib``. ``cells`` is per stream: without a
unified cache each sequence has its own stream (``-c 2048 -np 2`` prints ``1024 cells, 2/2
seqs``), so the tokens the cache holds are ``kv.tokens`` = cells x streams.
``kv.<BUF>_mib`` from ``llama_kv_cache:        CPU KV buffer size =    45.00 MiB``.
Sliding-window models build two caches (``llama_kv_cache_iswa: creating     SWA KV cache, size
= 768 cells``): the SWA cache's facts are ``kv.swa.*`` (indexer caches ``kv.indexer.*``), and
``kv.base_cells`` is the non-SWA size announced.

Weights: ``weights.<BUF>_mib`` from ``load_tensors:   CPU_Mapped model buffer size =    92.10
MiB`` (also ``CPU_REPACK``, ``CUDA0``...; older ``llm_load_tensors: CPU buffer size = ...``);
``weights.offloaded_layers`` / ``weights.offloadable_layers`` from ``load_tensors: offloaded
25/25 layers to GPU`` (CPU builds print no such line).

Model metadata, ``print_info: file type   = Q4_1`` (older ``llm_load_print_meta:``):
``model.file_format``, ``model.file_type``, ``model.file_size_mib`` and ``model.bpw`` (from
``file size   = 92.10 MiB (5.74 BPW)``, GiB converted), ``model.arch``, ``model.n_ctx_train``,
``model.n_embd``, ``model.n_layer``, ``model.n_head``, ``model.n_head_kv``, ``model.n_ff``,
``model.n_expert``, ``model.n_expert_used``, ``model.type`` (``256M``), ``model.params``
(string as printed, ``134.52 M``), ``model.name``, ``model.vocab_type``, ``model.n_vocab``;
from ``llama_model_loader: loaded meta data with 33 key-value pairs and 272 tensors from
/tmp/models/... (version GGUF V3 (latest))``: ``model.n_kv``, ``model.n_tensors``,
``model.path``.

Context, ``llama_context: n_ctx                 = 2048``: ``ctx.n_ctx``, ``ctx.n_ctx_seq``
(older ``n_ctx_per_seq``), ``ctx.n_seq_max``, ``ctx.n_batch``, ``ctx.n_ubatch``,
``ctx.causal_attn``, ``ctx.flash_attn`` (requested: ``auto``), ``ctx.kv_unified`` (bool);
``ctx.flash_attn_resolved`` from ``resolve_fused_ops: Flash Attention enabled``;
``compute.<BUF>_mib`` from ``sched_reserve:        CPU compute buffer size =    14.51 MiB``
(older prefix ``llama_context:``) and ``output.<BUF>_mib`` from ``llama_context:        CPU
output buffer size =     0.38 MiB``.

Server (never prefixed):
``server.model`` from ``srv    load_model: loading model '/tmp/models/...'``;
``slots.n``, ``slots.n_ctx_slot``, ``slots.kv_unified`` from ``srv    load_model:
initializing, n_slots = 2, n_ctx_slot = 1024, kv_unified = 'false'`` (older ``initializing
slots, n_slots = 1``); ``slots.n_ctx`` from ``slot   load_model: id  0 | task -1 | new slot,
n_ctx = 1024`` (older ``new slot n_ctx_slot = N``);
``chat.example_start`` (first line of ``srv          init: init: chat template,
example_format: '<|im_start|>system``), ``chat.thinking`` (``chat template, thinking = 0``,
older ``Enable thinking? 0``), ``chat.template`` (older ``main: chat template,
chat_template: ...``);
``ready`` = True from ``srv  llama_server: model loaded`` (older ``main: model loaded``) and
from ``srv  llama_server: listening on http://127.0.0.1:18080`` (older ``main: server is
listening on http://... - starting the main loop``), which also gives ``server.url``;
``exit.reason`` from ``srv  llama_server: exiting due to model loading error`` (-> ``model
loading error``) and from argument errors, ``error: invalid argument: --foo`` (-> ``invalid
argument: --foo``) or ``error while handling argument "--spec-type": unknown speculative type:
nonsense``, which also give ``exit.bad_arg``.

Speculative decoding (``spec.*``, never prefixed): ``spec.draft_model`` (path);
``spec.enabled`` (False on ``no implementations specified for speculative decoding``);
``spec.impl.<type>`` = True from ``spec common_specu: adding speculative implementation
'draft-simple'``; ``spec.n_max``, ``spec.n_min``, ``spec.p_min`` from ``- n_max=7, n_min=0,
p_min=0.000000``; ``spec.draft_gpu_layers``, ``spec.draft_cache_k``, ... from ``- gpu_layers=-1,
cache_k=f16, ...``; ``spec.ctx_initialized`` from ``speculative decoding context initialized``.
Per request (last request wins): ``spec.accept_rate``, ``spec.accepted``, ``spec.generated``,
``spec.mean_len`` from ``slot print_timing: id  1 | task 0 | draft acceptance = 0.53846 (   49
accepted /    91 generated), mean len =  4.77`` (older ``draft acceptance rate = ...`` without
mean len); ``spec.acc_per_pos`` (string) from ``acc per pos = (0.769, ...)``;
``timing.prompt_ms``/``_tokens``/``_tps`` and ``timing.eval_ms``/``_tokens``/``_tps`` from the
``prompt eval time`` / ``eval time`` lines of ``print_timing``. Lifetime counters (cumulative
over the server's life, not per request): ``spec.lifetime.<impl>.gen_drafts``, ``.acc_drafts``,
``.gen_tokens``, ``.acc_tokens`` from ``statistics     draft-simple: #calls(b,g,a) = ...``.
"""

from __future__ import annotations

import re

from engine.servers import common
from engine.servers.common import Add, line_facts
from engine.servers.llamacpp import patterns as pat
from engine.servers.logs import Fact, FactValue, LogReader, parse_number


def _split_prefix(line: str) -> tuple[str | None, str]:
    """Return (level letter or None, message without ANSI codes and log prefix)."""
    m, msg = common.split_prefix(line, pat.PREFIX_RE)
    # Some wrappers indent what they relay (" llama_kv_cache_unified: size = ..."): drop that too.
    return m.group("level"), msg.lstrip()


def _num_or_str(text: str) -> FactValue:
    try:
        return parse_number(text)
    except ValueError:
        return text


def _buf_name(name: str) -> str:
    # Buffer names like "CPU_Mapped", "CUDA0", "RPC[10.0.0.1:50052]": keep a key-safe spelling.
    return re.sub(r"[^A-Za-z0-9_]+", "_", name.strip()).strip("_") or "unknown"


def _bool(text: str) -> bool:
    return text.strip().strip("'\"").lower() in ("true", "1", "yes", "on", "enabled")


class LlamaCppLogs(LogReader):
    ready_text = "llama_server: model loaded"  # "main: model loaded" in older builds
    watched_facts = ("kv.cells", "kv.tokens", "kv.size_mib", "weights.*_mib", "slots.n", "spec.impl.*",
                     "draft.kv.*", "ready", "exit.reason")

    # -- scope ------------------------------------------------------------------------

    def scope(self, line: str, current: str) -> str | None:
        _, msg = _split_prefix(line)
        if pat.DRAFT_RE.search(msg) or pat.MTP_RE.search(msg):
            return pat.DRAFT_SCOPE  # a new model section; its kv sub-section starts empty
        model, _, _ = current.partition(pat.KV_SEP)
        m = pat.KV_ISWA_RE.search(msg)
        if m:
            return model if m.group("which") == "non-SWA" else f"{model}{pat.KV_SEP}swa"
        if pat.KV_INDEXER_RE.search(msg):
            return f"{model}{pat.KV_SEP}indexer"
        return None

    # -- facts ------------------------------------------------------------------------

    def common_facts(self, facts: dict[str, FactValue]) -> dict[str, FactValue]:
        impls = [k.removeprefix("spec.impl.") for k, v in facts.items()
                 if k.startswith("spec.impl.") and v is True]
        method = ",".join(impls) if impls else "off" if facts.get("spec.enabled") is not True else None
        found: dict[str, FactValue | None] = {
            "kv.tokens": facts.get("kv.tokens"), "kv.dtype": facts.get("kv.k_type"),
            "slots": facts.get("slots.n"), "context": facts.get("slots.n_ctx_slot"),
            "dtype": facts.get("model.file_type"), "spec.method": method,
            # The draft length: an n-gram implementation's size_m, a draft model's n_max.
            "spec.depth": facts.get("spec.ngram_size_m", facts.get("spec.n_max")) if impls else None}
        return {k: v for k, v in found.items() if v is not None}

    def parse_line(self, line: str, scope: str = "") -> list[Fact]:
        line = line.rstrip("\r\n")
        _, msg = _split_prefix(line)
        model_prefix, _, kv_part = scope.partition(pat.KV_SEP)
        kv_prefix = f"kv.{kv_part}." if kv_part else "kv."

        def key(name: str) -> str:
            if name.startswith("kv."):
                name = kv_prefix + name[len("kv.") :]
            if name.startswith(pat.MODEL_LEVEL):
                name = model_prefix + name
            return name

        return line_facts(line, msg, (self._kv, self._weights, self._model, self._ctx,
                                      self._server, self._spec, self._ngram), key)

    def _kv(self, msg: str, add: Add) -> bool:
        m = pat.KV_SIZE_RE.search(msg) or pat.KV_SELF_RE.search(msg)
        if m:
            g = m.groupdict()
            add("kv.size_mib", parse_number(g["size"]))
            if g.get("cells") is not None:
                cells, streams = int(g["cells"]), int(g.get("streams") or 1)
                add("kv.cells", cells)
                add("kv.layers", int(g["layers"]))
                add("kv.seqs", int(g["seqs"]))
                if g.get("streams") is not None:
                    add("kv.streams", streams)
                # Without a unified KV cache each sequence gets its own stream and "cells" is
                # per stream (-c 2048 -np 2 prints "1024 cells, 2/2 seqs"): tokens the cache
                # holds in all = cells x streams.
                add("kv.tokens", cells * streams)
            add("kv.k_type", g["kt"].strip())
            add("kv.k_mib", parse_number(g["k"]))
            add("kv.v_type", g["vt"].strip())
            add("kv.v_mib", parse_number(g["v"]))
            return True
        m = pat.KV_BUF_RE.search(msg)
        if m:
            add(f"kv.{_buf_name(m.group('buf'))}_mib", parse_number(m.group("mib")))
            return True
        m = pat.KV_ISWA_RE.search(msg)
        if m:
            # The scope already moved on for the SWA line, so "kv.cells" lands in kv.swa.*.
            add("kv.base_cells" if m.group("which") == "non-SWA" else "kv.cells", int(m["n"]))
            return True
        m = pat.KV_INDEXER_RE.search(msg)
        if m:
            add("kv.cells", int(m["n"]))
            return True
        return False

    def _weights(self, msg: str, add: Add) -> bool:
        m = pat.MODEL_BUF_RE.search(msg) or pat.OLD_TENSOR_BUF_RE.search(msg)
        if m:
            add(f"weights.{_buf_name(m.group('buf'))}_mib", parse_number(m.group("mib")))
            return True
        m = pat.OFFLOAD_RE.search(msg)
        if m:
            add("weights.offloaded_layers", int(m["n"]))
            add("weights.offloadable_layers", int(m["of"]))
            return True
        return False

    def _model(self, msg: str, add: Add) -> bool:
        m = pat.META_RE.search(msg)
        if m:
            k, v = m.group("k"), m.group("v")
            if k in ("file size", "model size"):
                s = pat.FILE_SIZE_RE.search(v)
                if s:
                    size = float(parse_number(s["size"]))
                    mib = round(size * 1024, 2) if s["unit"] == "GiB" else size
                    add("model.file_size_mib", mib)
                    add("model.bpw", float(parse_number(s["bpw"])))
            elif k in pat.META_KEYS:
                key = pat.META_KEYS[k]
                # model.params keeps its unit ("134.52 M"); the rest become numbers when they are.
                add(key, v if key == "model.params" else _num_or_str(v))
            return True
        m = pat.LOADER_RE.search(msg)
        if m:
            add("model.n_kv", int(m["kv"]))
            add("model.n_tensors", int(m["t"]))
            add("model.path", m["path"])
            return True
        return False

    def _ctx(self, msg: str, add: Add) -> bool:
        m = pat.CTX_RE.search(msg)
        if m:
            k, v = m.group("k"), m.group("v")
            if k == "n_ctx_per_seq":  # older name of n_ctx_seq
                k = "n_ctx_seq"
            add(f"ctx.{k}", _bool(v) if k == "kv_unified" else _num_or_str(v))
            return True
        m = pat.FA_RESOLVED_RE.search(msg)
        if m:
            add("ctx.flash_attn_resolved", m["a"] or m["b"] or m["c"])
            return True
        m = pat.CTX_BUF_RE.search(msg)
        if m:
            add(f"{m['kind']}.{_buf_name(m['buf'])}_mib", parse_number(m["mib"]))
            return True
        return False

    def _server(self, msg: str, add: Add) -> bool:  # noqa: C901 - a flat table of the lines
        if "chat template, " in msg:
            # One line can hold both the template and the start of its example (older builds).
            if m := pat.CHAT_TMPL_RE.search(msg):
                add("chat.template", m["t"])
            if m := pat.CHAT_EXAMPLE_RE.search(msg):
                add("chat.example_start", m["t"])
            if m := pat.CHAT_THINK_RE.search(msg):
                add("chat.thinking", m["t"] == "1")
        elif m := pat.OLD_THINK_RE.search(msg):
            add("chat.thinking", m["t"] == "1")
        elif m := pat.LOADING_MODEL_RE.search(msg):
            add("server.model", m["m"])
        elif m := pat.SLOTS_RE.search(msg):
            add("slots.n", int(m["n"]))
            add("slots.n_ctx_slot", int(m["ctx"]))
            if m["u"] is not None:
                add("slots.kv_unified", _bool(m["u"]))
        elif m := pat.OLD_SLOTS_RE.search(msg):
            add("slots.n", int(m["n"]))
        elif m := pat.NEW_SLOT_RE.search(msg):
            add("slots.n_ctx", int(m["n"]))
        elif pat.MODEL_LOADED_RE.search(msg):
            add("ready", True)
        elif m := pat.LISTENING_RE.search(msg):
            add("server.url", m["url"].removesuffix(","))
            add("ready", True)
        elif m := pat.EXITING_RE.search(msg):
            add("exit.reason", m["why"])
        elif m := pat.ARG_ERROR_RE.match(msg):
            reason = m["a"] or m["b"]
            add("exit.reason", reason)
            arg = m["arg"] or ((im := pat.INVALID_ARG_RE.match(reason)) and im["arg"])
            if arg:
                add("exit.bad_arg", arg)
        else:
            return False
        return True

    @staticmethod
    def _ngram(msg: str, add: Add) -> bool:
        if m := pat.SPEC_NGRAM_RE.search(msg):
            add("spec.ngram_size_n", int(m["n"]))
            add("spec.ngram_size_m", int(m["m"]))
            add("spec.ngram_min_hits", int(m["hits"]))
            return True
        return False

    def _spec(self, msg: str, add: Add) -> bool:
        if m := pat.DRAFT_RE.search(msg):
            add("spec.draft_model", m["m"])
        elif m := pat.MTP_RE.search(msg):
            add("spec.draft_model", m["m"])
            add("spec.mtp", True)
        elif m := pat.SPEC_IMPL_RE.search(msg):
            add("spec.enabled", True)
            add(f"spec.impl.{m['t']}", True)
        elif pat.SPEC_NONE_RE.search(msg):
            add("spec.enabled", False)
        elif pat.SPEC_CTX_OK_RE.search(msg):
            add("spec.ctx_initialized", True)
        elif m := pat.SPEC_DRAFT_CFG_RE.search(msg):
            for item in m["kv"].split(", "):
                k, sep, v = item.partition("=")
                if sep and re.fullmatch(r"\w+", k):
                    add(f"spec.draft_{k}", _num_or_str(v))
        elif m := pat.ACC_POS_RE.search(msg):
            add("spec.acc_per_pos", m["v"])
        elif m := pat.SPEC_STATS_RE.search(msg):
            pre = f"spec.lifetime.{m['impl']}"
            add(f"{pre}.gen_drafts", int(m["gd"]))
            add(f"{pre}.acc_drafts", int(m["ad"]))
            add(f"{pre}.gen_tokens", int(m["gt"]))
            add(f"{pre}.acc_tokens", int(m["at"]))
        elif m := pat.SPEC_PARAMS_RE.search(msg):
            add("spec.n_max", int(m["max"]))
            add("spec.n_min", int(m["min"]))
            add("spec.p_min", float(parse_number(m["p"])))
        elif m := pat.ACCEPT_RE.search(msg):
            add("spec.accept_rate", float(parse_number(m["rate"])))
            add("spec.accepted", int(m["acc"]))
            add("spec.generated", int(m["gen"]))
            if m["len"] is not None:
                add("spec.mean_len", float(parse_number(m["len"])))
        elif m := pat.TIMING_RE.search(msg):
            which = "prompt" if m["which"] == "prompt eval" else "eval"
            add(f"timing.{which}_ms", float(parse_number(m["ms"])))
            add(f"timing.{which}_tokens", int(m["n"]))
            add(f"timing.{which}_tps", float(parse_number(m["tps"])))
        else:
            return False
        return True

    # -- classification ---------------------------------------------------------------

    def is_error(self, line: str) -> bool:
        level, msg = _split_prefix(line)
        if level is not None:
            # The level letter is the server's own judgement; wording can mislead (an INFO line
            # may mention "failed to" while describing a fallback).
            return level == "E"
        return bool(pat.ERROR_RE.search(msg)) and not pat.WARNING_RE.search(msg)

    def is_warning(self, line: str) -> bool:
        level, msg = _split_prefix(line)
        if level is not None:
            return level == "W"
        return bool(pat.WARNING_RE.search(msg))

    def is_ready_line(self, line: str) -> bool:
        _, msg = _split_prefix(line)
        return bool(pat.MODEL_LOADED_RE.search(msg) or pat.LISTENING_RE.search(msg))
