"""Boot-fact wordings of vLLM and SGLang, one case per wording: (line, facts it must give).

The adapters' tests (test_vllm, test_sglang) check each line's facts; the console's log view
(tests/unit/tui/test_logview.py) classifies every one. Lines are verbatim from public logs
("issue" cases) or rendered from vLLM 0.33.0's and SGLang 0.5.23's format strings; the fixtures
README says which is which and where each came from.
"""

from __future__ import annotations

from typing import Any

VLLM: dict[str, tuple[str, dict[str, Any]]] = {
    "cpu-fp8-kv-cache-live": (
        "(EngineCore pid=5831) INFO 12-01 23:40:48 [cache.py:231] Using fp8 data type to store kv "
        "cache. It reduces the GPU memory footprint and boosts the performance. Meanwhile, it may "
        "cause accuracy drop without a proper scaling factor", {"kv.cache_dtype": "fp8"}),
    "loading-weights-issue": (
        "[2025-08-12T08:42:38Z] (EngineCore_0 pid=13564) INFO 08-12 01:42:38 [default_loader.py:262] "
        "Loading weights took 5.43 seconds", {"weights.load_s": 5.43}),
    "model-loading-0.33": (
        "(EngineCore pid=211) INFO 09-15 21:11:16 [gpu_model_runner.py:5089] Model loading took "
        "97.12 GiB memory and 61.204518 seconds", {"weights.mem_gib": 97.12, "weights.total_s": 61.204518}),
    "model-loading-older-issue": (
        "[2025-08-12T08:42:39Z] (EngineCore_0 pid=13564) INFO 08-12 01:42:39 [gpu_model_runner.py:1985] "
        "Model loading took 2.8871 GiB and 5.965132 seconds", {"weights.mem_gib": 2.8871}),
    "model-weights-2025-issue": (
        "INFO 01-30 03:18:12 gpu_model_runner.py:848] Loading model weights took 67.7229 GB",
        {"weights.mem_gb": 67.7229}),
    "available-kv-issue": (
        "(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [gpu_worker.py:456] Available KV cache "
        "memory: 17.36 GiB",
        {"kv.available_gib": 17.36}),
    "kv-size-one-line-0.33": (
        "(EngineCore pid=211) INFO 09-15 21:11:40 [kv_cache_utils.py:1147] GPU KV cache size: 2,042,016 "
        "tokens, Maximum concurrency for 202,752 tokens per request: 10.07x",
        {"kv.tokens": 2042016, "kv.max_model_len": 202752, "kv.max_concurrency": 10.07}),
    "kv-size-two-lines-issue": (
        "(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [kv_cache_utils.py:1314] GPU KV cache size: "
        "188,640 tokens",
        {"kv.tokens": 188640}),
    "max-concurrency-own-line-issue": (
        "(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [kv_cache_utils.py:1319] Maximum concurrency for "
        "131,072 tokens per request: 5.23x", {"kv.max_model_len": 131072, "kv.max_concurrency": 5.23}),
    "kv-host-pools": ("GPU + host KV cache size: 4,000,000 tokens, Maximum concurrency for 131,072 tokens "
                      "per request: 30.52x", {"kv.tokens": 4000000, "kv.pools": "GPU + host"}),
    "gpu-blocks-2025-issue": ("INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381",
                              {"kv.blocks": 1381}),
    "cuda-blocks-v0": ("INFO 03-21 20:15:46 [executor_base.py:111] # cuda blocks: 7191, # CPU blocks: 512",
                       {"kv.blocks": 7191, "kv.cpu_blocks": 512}),
    "graph-capture-issue": (
        "(EngineCore_DP0 pid=188893) INFO 10-21 09:12:04 [gpu_model_runner.py:3480] Graph capturing "
        "finished in 7 secs, took 0.95 GiB", {"graph.elapsed_s": 7, "graph.mem_gib": 0.95}),
    "init-engine-issue": (
        "(EngineCore_DP0 pid=188893) INFO 10-21 09:12:04 [core.py:210] init engine (profile, create kv "
        "cache, warmup model) took 25.99 seconds", {"engine.init_s": 25.99}),
    "init-engine-compilation": (
        "INFO 05-26 21:34:14 [core.py:299] init engine (profile, create kv cache, warmup model) took "
        "13.70 s (compilation: 7.28 s)", {"engine.init_s": 13.7}),
    "torch-compile-issue": (
        "(EngineCore_DP0 pid=188893) INFO 10-21 09:11:56 [monitor.py:34] torch.compile takes 7.14 s in total",
        {"engine.compile_s": 7.14}),
    "engine-config": (
        "INFO 07-17 00:07:07 [core.py:69] Initializing a V1 LLM engine (v0.9.2) with config: "
        "model='meta-llama/Llama-3.1-8B', speculative_config=None, dtype=torch.bfloat16, "
        "max_seq_len=131072, kv_cache_dtype=auto, tensor_parallel_size=1",
        {"engine.version": "v0.9.2", "config.model": "meta-llama/Llama-3.1-8B",
         "config.speculative_config": "None", "config.max_seq_len": 131072, "config.kv_cache_dtype": "auto"}),
    "server-url": ("(APIServer pid=1) INFO 09-15 21:12:09 [entry.py:139] Starting vLLM server on "
                   "http://0.0.0.0:8000", {"server.url": "http://0.0.0.0:8000"}),
    "server-url-older": ("INFO 06-01 10:00:00 [api_server.py:1880] Starting vLLM API server 0 on "
                         "http://0.0.0.0:8000", {"server.url": "http://0.0.0.0:8000"}),
    "ready": ("(APIServer pid=1) INFO:     Application startup complete.", {"ready": True}),
    "engine-core-failed-issue": ("ERROR 05-07 02:14:18 [core.py:396] EngineCore failed to start.",
                                 {"exit.engine_core_failed": True}),
    "no-kv-memory-issue": (
        "(EngineCore_DP0 pid=6804) ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        {"exit.error.ValueError": "No available memory for the cache blocks. Try increasing "
                                  "`gpu_memory_utilization` when initializing the engine. See "
                                  "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                                  "for more details."}),
    "engine-init-failed-issue": (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
        "{'EngineCore_0': 1}", {"exit.error.RuntimeError": "Engine core initialization failed. See root "
                                "cause above. Failed core proc(s): {'EngineCore_0': 1}"}),
    "spec-0.33": (
        "(APIServer pid=1) INFO 09-15 21:13:10 [metrics.py:121] SpecDecoding metrics: Mean acceptance "
        "length: 3.12, Accepted throughput: 118.40 tokens/s, Drafted throughput: 223.10 tokens/s, "
        "Accepted: 1184 tokens, Drafted: 2231 tokens, Per-position acceptance rate: 0.812, 0.603, "
        "Avg Draft acceptance rate: 53.1%",
        {"periodic.accept_len": 3.12, "periodic.accepted": 1184, "periodic.drafted": 2231,
         "periodic.accept_rate": 0.531, "periodic.acc_per_pos": "0.812, 0.603"}),
    "spec-sept-2025-issue": (
        "(APIServer pid=2236552) INFO 09-09 11:51:35 [metrics.py:96] SpecDecoding metrics: Draft "
        "acceptance rate: 88.8%, Mean acceptance length: 5.44, Accepted throughput: 4.37 tokens/s, "
        "Drafted throughput: 4.92 tokens/s, Accepted: 262 tokens, Drafted: 295 tokens, Per-position "
        "acceptance rate: 0.983, 0.949, 0.915, 0.881, 0.712",
        {"periodic.accept_rate": 0.888, "periodic.accept_len": 5.44, "periodic.accepted": 262,
         "periodic.drafted": 295, "periodic.acc_per_pos": "0.983, 0.949, 0.915, 0.881, 0.712"}),
    "spec-april-2025-issue": (
        "SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens, Drafted: 66 tokens",
        {"periodic.accept_rate": 1.0, "periodic.accepted": 66, "periodic.drafted": 66}),
    "spec-v0-issue": (
        "Speculative metrics: Draft acceptance rate: 0.607, System efficiency: 0.510, Number of "
        "speculative tokens: 4, Number of accepted tokens: 32594, Number of draft tokens: 53716, "
        "Number of emitted tokens: 34244.",
        {"periodic.accept_rate": 0.607, "periodic.accepted": 32594, "periodic.drafted": 53716}),
}

SGLANG: dict[str, tuple[str, dict[str, Any]]] = {
    "load-end-0.5.23-quant": (
        "[2026-09-15 21:03:32 TP0] Load weight end. elapsed=61.32 s, type=Glm5MoeForCausalLM, "
        "quant=modelopt_fp4, quant_algo=NVFP4, avail mem=76.40 GB, mem usage=104.22 GB.",
        {"weights.load_s": 61.32, "weights.arch": "Glm5MoeForCausalLM",
         "weights.quant": "quant=modelopt_fp4, quant_algo=NVFP4", "weights.avail_gb": 76.4,
         "weights.mem_gb": 104.22}),
    "load-end-issue-older-dtype": (
        "[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, "
        "dtype=torch.bfloat16, avail mem=21.73 GB, mem usage=166.59 GB.",
        {"weights.arch": "DeepseekV3ForCausalLM", "weights.dtype": "torch.bfloat16",
         "weights.avail_gb": 21.73, "weights.mem_gb": 166.59}),
    "load-begin": ("[2026-09-15 21:02:31 TP0] Load weight begin. avail mem=180.62 GB",
                   {"weights.begin_avail_gb": 180.62}),
    "kv-dtype-k-v": (
        "[2026-06-08 07:20:53 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1106304, "
        "K size: 25.32 GB, V size: 25.32 GB",
        {"kv.dtype": "torch.bfloat16", "kv.tokens": 1106304, "kv.k_gb": 25.32, "kv.v_gb": 25.32}),
    "kv-older-no-dtype": (
        "[2025-10-16 09:06:22 TP5] KV Cache is allocated. #tokens: 2795207, K size: 53.31 GB, "
        "V size: 53.31 GB",
        {"kv.tokens": 2795207, "kv.k_gb": 53.31, "kv.v_gb": 53.31}),
    "kv-oldest-no-tokens": ("KV Cache is allocated. K size: 1.09 GB, V size: 1.09 GB",
                            {"kv.k_gb": 1.09, "kv.v_gb": 1.09}),
    "kv-mla-labelled": (
        "[2026-09-15 21:03:34 TP0] MiniMax MSA-v1 main NVFP4 KV Cache is allocated. "
        "dtype: torch.float8_e4m3fn, #tokens: 577024, KV size: 3.81 GB",
        {"kv.minimax_msa_v1_main_nvfp4.dtype": "torch.float8_e4m3fn",
         "kv.minimax_msa_v1_main_nvfp4.tokens": 577024, "kv.minimax_msa_v1_main_nvfp4.kv_gb": 3.81}),
    "kv-va-upper-bound": (
        "KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 600000, KV size: 12.00 GB",
        {"kv.tokens": 600000, "kv.kv_gb": 12.0, "kv.va_upper_bound": True}),
    "kv-post-capture": (
        "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 577024, "
        "KV size: 11.00 GB, avail mem=15.20 GB",
        {"kv.post_capture.tokens": 577024, "kv.post_capture.kv_gb": 11.0,
         "kv.post_capture.avail_gb": 15.2}),
    "mamba-with-intermediate": (
        "Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: 0.11GB, ssm_state "
        "size: 1.38GB intermediate_ssm_state_cache size: 9.57GB intermediate_conv_window_cache "
        "size: 0.24GB ",
        {"mamba.max_size": 48, "mamba.conv_gb": 0.11, "mamba.ssm_gb": 1.38,
         "mamba.intermediate_ssm_gb": 9.57, "mamba.intermediate_conv_window_gb": 0.24}),
    "swa-pool-issue": ("SWAKVPool mem usage: 79.94 GB, swa size: 798276, full size: 997846",
                       {"kv.swa_pool_gb": 79.94, "kv.swa_tokens": 798276, "kv.full_tokens": 997846}),
    "pool-end": ("[2025-10-16 09:06:22 TP5] Memory pool end. avail mem=11.87 GB", {"pool.avail_gb": 11.87}),
    "capture-named-begin": (
        "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=7, avail mem=18.01 GB",
        {"graph.target_verify.backend": "full", "graph.target_verify.num_tokens_per_req": 7}),
    "capture-named-end-bs": (
        "Capture target verify CUDA graph end. bs=[1, 2, 4, 8, 16, 32, 48], elapsed=41.07 s, "
        "mem usage=2.31 GB, avail mem=15.70 GB.",
        {"graph.target_verify.elapsed_s": 41.07, "graph.target_verify.mem_gb": 2.31,
         "graph.target_verify.avail_gb": 15.7}),
    "capture-named-end-no-bs": (
        "Capture target decode CUDA graph end. elapsed=22.18 s, mem usage=1.91 GB, avail mem=14.18 GB.",
        {"graph.target_decode.elapsed_s": 22.18, "graph.target_decode.mem_gb": 1.91}),
    "capture-older-begin": (
        "[2025-10-16 09:06:22 TP7] Capture cuda graph begin. This can take up to several minutes. "
        "avail mem=12.01 GB",
        {"graph.begin_avail_gb": 12.01}),
    "capture-older-end": (
        "[2025-11-30 12:50:15] Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. "
        "avail mem=38.05 GB.",
        {"graph.elapsed_s": 5.37, "graph.mem_gb": 1.44, "graph.avail_gb": 38.05}),
    "scheduler-summary": (
        "max_total_num_tokens=577024, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=48, context_len=202752, available_gpu_mem=15.28 GB",
        {"sched.max_total_num_tokens": 577024, "sched.max_running_requests": 48,
         "sched.context_len": 202752, "sched.available_gpu_mem_gb": 15.28}),
    "scheduler-summary-older": ("max_total_num_tokens=57033, available_gpu_mem=7.93 GB",
                                {"sched.max_total_num_tokens": 57033, "sched.available_gpu_mem_gb": 7.93}),
    "kda-chain-verify": ("[2026-09-15 21:03:35 TP0] KDA fused chain-verify kernel enabled (topk==1 path).",
                         {"kda.fused_chain_verify": True}),
    "ready": ("[2026-09-15 21:04:41] The server is fired up and ready to roll!", {"ready": True}),
    "startup-timings": (
        "Engine startup timings (s): load_weight=61.32, kv_cache_allocation=1.88, scheduler_e2e=141.20, "
        "cuda_graph={target_verify=41.07, draft_decode=8.02}, tokenizer_e2e=143.91",
        {"startup.load_weight_s": 61.32, "startup.tokenizer_e2e_s": 143.91}),
    "not-enough-memory-issue": (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        {"exit.error.RuntimeError": "Not enough memory. Please try to increase --mem-fraction-static."}),
    "replayssm-guard-notes": (
        "ValueError: --enable-linear-replayssm-spec with DSPARK/DFLASH requires a KDA (kimi_linear) "
        "model; got a non-KDA model.",
        {"exit.error.ValueError": "--enable-linear-replayssm-spec with DSPARK/DFLASH requires a KDA "
                                  "(kimi_linear) model; got a non-KDA model."}),
    "scheduler-exception-issue": (
        "[2025-03-29 18:18:34 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        {"exit.scheduler_exception": True}),
    "init-failed": ("Initialization failed. Please see the error messages above.",
                    {"exit.init_failed": True}),
    "rank-died": (
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 "
        "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
        {"exit.rank_died": 0, "exit.code": -9}),
    "decode-batch-accept": (
        "[2026-08-14 14:02:47 TP0] Decode batch, #running-req: 3, #token: 266624, token usage: 0.43, "
        "accept len: 1.67, accept rate: 0.13, pre-allocated usage: 0.22, #prealloc-req: 0, "
        "#transfer-req: 1, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 183.10, "
        "#queue-req: 0",
        {"periodic.running_req": 3, "periodic.accept_len": 1.67, "periodic.accept_rate": 0.13,
         "periodic.cuda_graph": True, "periodic.gen_tps": 183.1}),
    "decode-batch-older-dot": (
        "[2025-09-03 18:33:19 TP0] Decode batch. #running-req: 1, #token: 137, token usage: 0.00, "
        "cuda graph: True, gen throughput (token/s): 1.06, #queue-req: 0, ",
        {"periodic.tokens": 137, "periodic.gen_tps": 1.06}),
    "ray-prefixed": (
        "(SGLangEngine pid=41820) [2026-03-22 13:53:37 TP0] Decode batch, #running-req: 6, #token: 42414, "
        "token usage: 0.04, cuda graph: True, gen throughput (token/s): 1374.02, #queue-req: 0,",
        {"periodic.running_req": 6, "periodic.gen_tps": 1374.02}),
}
