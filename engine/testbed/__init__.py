"""The local serving testbed: llama.cpp's llama-server and vLLM's CPU build, with SmolLM2-135M.

Everything lands under ``${XDG_CACHE_HOME:-~/.cache}/ruler/`` and is reused while its manifest
(size and sha256 of every file) still matches. Work happens in ``tmp/`` and is renamed into place
only when complete, so an interrupted run never leaves something that looks finished.

One module per part: ``llamacpp`` (llama-server and llama-quantize, built from source),
``models`` (the GGUF files), ``vllm`` (vLLM's environment and the model as safetensors),
``images`` (both as Docker images), over ``cache`` (the layout and the manifests) and ``steps``
(errors, the log, commands run); ``prepare`` prepares them in order.
"""

from engine.testbed.cache import cache_root
from engine.testbed.images import IMAGE_REPO, VLLM_IMAGE_REPO
from engine.testbed.llamacpp import LLAMA_CPP_PYTHON, binary_version, supports_spec_type
from engine.testbed.models import QUANTS, model_name
from engine.testbed.prepare import Testbed, cached_variables, ensure
from engine.testbed.steps import TestbedCacheError, TestbedError
from engine.testbed.vllm import (
    HF_REQUIRED,
    VLLM_CPU,
    VLLM_SOURCE_QUANT,
    VLLM_TORCH,
    VLLMTestbed,
    vllm_model_dir,
    vllm_venv_dir,
)

__all__ = [
    "HF_REQUIRED", "IMAGE_REPO", "LLAMA_CPP_PYTHON", "QUANTS", "VLLM_CPU", "VLLM_IMAGE_REPO",
    "VLLM_SOURCE_QUANT", "VLLM_TORCH", "Testbed", "TestbedCacheError", "TestbedError", "VLLMTestbed",
    "binary_version", "cache_root", "cached_variables", "ensure", "model_name", "supports_spec_type",
    "vllm_model_dir", "vllm_venv_dir",
]
