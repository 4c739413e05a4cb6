"""The lines of llama.cpp's log that carry a fact, as patterns (engine.servers.llamacpp.logs reads
the log with them; its docstring says which fact each line gives, with the lines themselves)."""

from __future__ import annotations

import re

# "M.SS.mmm.uuu L " from common_log when prefix/timestamps are on (the default since
# common_init()); a build with --no-log-timestamps keeps only the level letter.
PREFIX_RE = re.compile(r"^(?:\d+\.\d{2}\.\d{3}\.\d{3} +)?(?:(?P<level>[IWED]) )?")

NUM = r"[-+]?\d+(?:\.\d+)?"

# --- model-level patterns --------------------------------------------------------------
# Keys that describe one loaded model (target or drafter) and so take the scope prefix.
MODEL_LEVEL = ("model.", "weights.", "kv.", "ctx.", "compute.", "output.")

DRAFT_SCOPE = "draft."

# kv sub-sections (SWA / indexer caches) ride in the scope after this separator, because the
# adapter is stateless and the scope string is the only state BootFacts hands back.
KV_SEP = "|"

KV_SIZE_RE = re.compile(
    r"^llama_kv_cache\w*:\s+size\s*=\s*(?P<size>" + NUM + r") MiB \(\s*(?P<cells>\d+) cells,"
    r"\s*(?P<layers>\d+) layers,\s*(?P<seqs>\d+)(?:/\s*(?P<streams>\d+))? seqs\),"
    r"\s*K \((?P<kt>[^)]+)\):\s*(?P<k>" + NUM + r") MiB,"
    r"\s*V \((?P<vt>[^)]+)\):\s*(?P<v>" + NUM + r") MiB"
)

# 2024 builds: "llama_new_context_with_model: KV self size  =  256.00 MiB, K (f16): ..., V ..."
KV_SELF_RE = re.compile(
    r"\bKV self size\s*=\s*(?P<size>" + NUM + r") MiB,"
    r"\s*K \((?P<kt>[^)]+)\):\s*(?P<k>" + NUM + r") MiB,"
    r"\s*V \((?P<vt>[^)]+)\):\s*(?P<v>" + NUM + r") MiB"
)

KV_BUF_RE = re.compile(
    r"^llama_kv_cache\w*:\s+(?P<buf>\S.*?) KV buffer size\s*=\s*(?P<mib>" + NUM + r") MiB"
)

KV_ISWA_RE = re.compile(
    r"^llama_kv_cache_iswa:\s+creating\s+(?P<which>non-SWA|SWA) KV cache, size = (?P<n>\d+) cells"
)

KV_INDEXER_RE = re.compile(r"creating indexer KV cache, size = (?P<n>\d+) cells")

MODEL_BUF_RE = re.compile(
    r"^(?:\w+:\s+)?(?P<buf>\S+) model buffer size\s*=\s*(?P<mib>" + NUM + r") MiB"
)

OLD_TENSOR_BUF_RE = re.compile(
    r"^(?:llm_)?load_tensors:\s+(?P<buf>\S+) buffer size\s*=\s*(?P<mib>" + NUM + r") MiB"
)

OFFLOAD_RE = re.compile(r"^(?:llm_)?load_tensors: offloaded (?P<n>\d+)/(?P<of>\d+) layers to GPU")

META_RE = re.compile(
    r"^(?:print_info|llm_load_print_meta):\s+(?P<k>\S(?:.*?\S)?)\s*=\s*(?P<v>.*?)\s*$"
)

LOADER_RE = re.compile(
    r"^llama_model_loader: loaded meta data with (?P<kv>\d+) key-value pairs and "
    r"(?P<t>\d+) tensors from (?P<path>.+?) \(version"
)

CTX_RE = re.compile(
    r"^(?:llama_context|llama_new_context_with_model):\s+(?P<k>n_ctx|n_ctx_seq|n_ctx_per_seq|"
    r"n_seq_max|n_batch|n_ubatch|flash_attn|kv_unified|causal_attn)\s*=\s*(?P<v>\S+)\s*$"
)

# "resolve_fused_ops: Flash Attention enabled" / "...: Flash Attention not supported, set to
# disabled"; older builds: "llama_context: Flash Attention was auto, set to enabled".
FA_RESOLVED_RE = re.compile(
    r"^\w+: Flash Attention (?:was \w+, set to (?P<a>\w+)|(?P<b>enabled)|not supported, set to"
    r" (?P<c>\w+))\s*$"
)

CTX_BUF_RE = re.compile(
    r"^\w+:\s+(?P<buf>\S+)\s+(?P<kind>compute|output) buffer size\s*=\s*(?P<mib>" + NUM + r") MiB"
)

META_KEYS = {
    "arch": "model.arch",
    "n_ctx_train": "model.n_ctx_train",
    "n_embd": "model.n_embd",
    "n_layer": "model.n_layer",
    "n_head": "model.n_head",
    "n_head_kv": "model.n_head_kv",
    "n_ff": "model.n_ff",
    "n_expert": "model.n_expert",
    "n_expert_used": "model.n_expert_used",
    "model type": "model.type",
    "model params": "model.params",
    "general.name": "model.name",
    "vocab type": "model.vocab_type",
    "n_vocab": "model.n_vocab",
    "file format": "model.file_format",
    "file type": "model.file_type",
    "model ftype": "model.file_type",  # llm_load_print_meta (2024)
}

FILE_SIZE_RE = re.compile(
    r"(?P<size>" + NUM + r") (?P<unit>MiB|GiB) \((?P<bpw>" + NUM + r") BPW\)"
)

# --- server-level patterns -------------------------------------------------------------
LOADING_MODEL_RE = re.compile(r"\bload_model: loading model '(?P<m>.*)'\s*$")

DRAFT_RE = re.compile(r"\bloading draft model '(?P<m>.*)'\s*$")

MTP_RE = re.compile(r"\bcreating MTP draft context against the target model '(?P<m>.*)'\s*$")

SLOTS_RE = re.compile(
    r"\binitializing, n_slots = (?P<n>\d+), n_ctx_slot = (?P<ctx>\d+)"
    r"(?:, kv_unified = '(?P<u>\w+)')?"
)

# Older builds: "srv          init: initializing slots, n_slots = 1" (no per-slot context).
OLD_SLOTS_RE = re.compile(r"\binitializing slots, n_slots = (?P<n>\d+)")

NEW_SLOT_RE = re.compile(r"\bnew slot,? n_ctx(?:_slot)? = (?P<n>\d+)")

# Older builds print the template name (or its whole Jinja source, across many lines) first.
CHAT_TMPL_RE = re.compile(r"\bchat template, chat_template: (?P<t>.*?)(?:, example_format:.*)?$")

CHAT_THINK_RE = re.compile(r"\bchat template, thinking = (?P<t>\d)")

OLD_THINK_RE = re.compile(r"\binit: Enable thinking\? (?P<t>\d)")  # builds of late 2025

# The example is multi-line and only its first line carries the log prefix; that line
# ("<|im_start|>system") is enough to tell template families apart.
CHAT_EXAMPLE_RE = re.compile(r"\bexample_format: '(?P<t>.*)$")

# This build prints "srv  llama_server: model loaded"; older ones "main: model loaded".
MODEL_LOADED_RE = re.compile(r"\b(?:main|llama_server): model loaded\s*$")

# Not the pre-load "HTTP server is listening, hostname: ..." of older builds: that one has no
# URL and comes before the model is loaded.
LISTENING_RE = re.compile(r"\blistening on (?P<url>(?:https?|unix)://\S+)")

EXITING_RE = re.compile(r"\bexiting due to (?P<why>.+?)\s*$")

# --- error / warning wording for lines without a level letter ---------------------------
# common/arg.cpp throws these before any logging is set up and the process exits with status 1;
# they are bare fprintf lines ("error: invalid argument: --foo",
# 'error while handling argument "--spec-type": unknown speculative type: nonsense').
ARG_ERROR_RE = re.compile(
    r"^(?:error: (?P<a>.+?)|(?P<b>error while handling argument \"(?P<arg>[^\"]+)\": .+?))\s*$"
)

INVALID_ARG_RE = re.compile(r"^invalid argument: (?P<arg>\S+)")

SPEC_IMPL_RE = re.compile(r"\badding speculative implementation '(?P<t>[^']+)'")

SPEC_PARAMS_RE = re.compile(
    r"\w+: - n_max=(?P<max>\d+), n_min=(?P<min>\d+), p_min=(?P<p>" + NUM + r")"
)

# "spec common_specu: - gpu_layers=-1, cache_k=f16, cache_v=f16, ctx_tgt=yes, ctx_dft=yes, ..."
SPEC_DRAFT_CFG_RE = re.compile(r"\w+: - (?P<kv>gpu_layers=.*)$")

# "spec common_specu: - size_n=2, size_m=3, min_hits=1": an n-gram implementation's lookup and
# draft lengths (--spec-ngram-*-size-n/-m), after its "adding speculative implementation" line.
SPEC_NGRAM_RE = re.compile(r"\w+: - size_n=(?P<n>\d+), size_m=(?P<m>\d+), min_hits=(?P<hits>\d+)")

SPEC_NONE_RE = re.compile(r"\bno implementations specified for speculative decoding")

SPEC_CTX_OK_RE = re.compile(r"\bspeculative decoding context initialized")

ACC_POS_RE = re.compile(r"\|\s+acc per pos = \((?P<v>[^)]*)\)")

# Lifetime counters of one speculative implementation, printed after every request.
SPEC_STATS_RE = re.compile(
    r"\bstatistics\s+(?P<impl>\S+): .*?#gen drafts =\s*(?P<gd>\d+), #acc drafts =\s*(?P<ad>\d+),"
    r" #gen tokens =\s*(?P<gt>\d+), #acc tokens =\s*(?P<at>\d+)"
)

ACCEPT_RE = re.compile(
    r"\bdraft acceptance(?: rate)? = (?P<rate>" + NUM + r") \(\s*(?P<acc>\d+) accepted /"
    r"\s*(?P<gen>\d+) generated\)(?:, mean len =\s*(?P<len>" + NUM + r"))?"
)

TIMING_RE = re.compile(
    r"\bprint_timing.*?\b(?P<which>prompt eval|eval) time =\s*(?P<ms>" + NUM + r") ms /"
    r"\s*(?P<n>\d+) tokens \(\s*" + NUM + r" ms per token,\s*(?P<tps>" + NUM + r") tokens"
)

ERROR_RE = re.compile(
    r"^error\b|\berror:|\berror while handling\b|\berror loading\b|\bexiting due to\b"
    r"|\bfailed to\b|\bunknown argument\b|\binvalid argument\b|\bunknown value\b"
    r"|\bunknown speculative type\b|\bcouldn't (?:bind|start)\b|GGML_ASSERT|terminate called"
    r"|\bwhat\(\):|Segmentation fault|core dumped",
    re.IGNORECASE,
)

WARNING_RE = re.compile(r"^warn(?:ing)?\b|\bwarning\b|\bDEPRECATED\b|^notice:", re.IGNORECASE)
