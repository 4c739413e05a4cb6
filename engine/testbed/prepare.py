"""The testbed prepared, or found prepared: each part in its order, under the locks that keep two
callers from building the same thing at once, and the ``${testbed.*}`` a campaign may name."""

from __future__ import annotations

import fcntl
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from engine.testbed.cache import cache_root, has_manifest
from engine.testbed.images import IMAGE_REPO, VLLM_IMAGE_REPO, ensure_image, ensure_vllm_image
from engine.testbed.llamacpp import LLAMA_CPP_PYTHON, binaries_dir, binary_version, ensure_binaries
from engine.testbed.models import ensure_models, models_dir
from engine.testbed.steps import Log, TestbedCacheError, stderr_log, step
from engine.testbed.vllm import (
    VLLM_CPU,
    VLLM_SOURCE_QUANT,
    VLLMTestbed,
    ensure_vllm_model,
    ensure_vllm_venv,
    vllm_model_dir,
    vllm_venv_dir,
    vllm_version,
)


@dataclass
class Testbed:
    llama_server: Path
    llama_quantize: Path
    binary_source: str  # "path" (found on PATH) or "built" (cached build)
    version: str
    models: dict[str, Path]
    image: str | None = None
    image_id: str | None = None
    image_note: str = ""
    vllm: VLLMTestbed | None = None
    built: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)  # seconds each step took, reuse included

    @property
    def models_dir(self) -> Path:
        return self.models["Q8_0"].parent

    def variables(self) -> dict[str, str]:
        """The ``${testbed.*}`` names a campaign may reference."""
        out = {
            "testbed.llama_server": str(self.llama_server),
            "testbed.models": str(self.models_dir),
            "testbed.version": self.version,
        }
        if self.image:
            out["testbed.image"] = self.image
        if self.vllm:
            out["testbed.vllm_python"] = str(self.vllm.python)
            out["testbed.vllm_model"] = str(self.vllm.model)
            out["testbed.vllm_version"] = self.vllm.version
            out["testbed.vllm_env"] = str(self.vllm.env)
            if self.vllm.image:
                out["testbed.vllm_image"] = self.vllm.image
        return out

    def as_json(self) -> dict[str, object]:
        return {
            "llama_server": str(self.llama_server),
            "llama_quantize": str(self.llama_quantize),
            "binary_source": self.binary_source,
            "version": self.version,
            "models": {q: str(p) for q, p in self.models.items()},
            "image": self.image,
            "image_id": self.image_id,
            "image_note": self.image_note,
            "vllm": self.vllm.as_json() if self.vllm else None,
            "built": self.built,
            "reused": self.reused,
            "steps": self.steps,
        }


def cached_variables() -> dict[str, str]:
    """``${testbed.*}`` from the cache when a previous run already prepared it; never builds, and
    never asks Docker (an image is named by the tag `ruler testbed` gives it)."""
    root = cache_root()
    binary = binaries_dir(root) / "llama-server"
    out: dict[str, str] = {}
    if binary.is_file() and has_manifest(binary.parent):
        out["testbed.llama_server"] = str(binary)
        out["testbed.image"] = f"{IMAGE_REPO}:{LLAMA_CPP_PYTHON}"
    if has_manifest(models_dir(root)):
        out["testbed.models"] = str(models_dir(root))
    venv = vllm_venv_dir(root)
    if has_manifest(venv):
        out["testbed.vllm_python"] = str(venv / "bin" / "python")
        out["testbed.vllm_env"] = str(venv)
        out["testbed.vllm_image"] = f"{VLLM_IMAGE_REPO}:{VLLM_CPU}"
    if has_manifest(vllm_model_dir(root)):
        out["testbed.vllm_model"] = str(vllm_model_dir(root))
    return out


def _locked(path: Path) -> TextIO:
    """``path`` opened and locked for this process (the lock goes with the file's closing)."""
    f = open(path, "a+")  # noqa: SIM115 - the caller closes it, and the lock with it
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def ensure(log: Log = stderr_log, with_image: bool = True, with_vllm: bool = False) -> Testbed:
    root = cache_root()
    try:
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        # Two processes preparing at once (two test sessions, `make demo` beside `make test`)
        # would build into the same tree and break each other's objects: the second waits for
        # the first, then finds everything built. vLLM's part has a lock of its own: a
        # llama.cpp-only caller need not wait minutes for a vLLM install.
        with ExitStack() as stack:
            vllm_lock = stack.enter_context(_locked(root / "vllm.lock")) if with_vllm else None
            lock = stack.enter_context(_locked(root / "ensure.lock"))
            stack.pop_all()
    except OSError as e:
        raise TestbedCacheError(f"the testbed cache {root} cannot be written ({e.strerror or e}: "
                                f"{e.filename}); make it writable, or set XDG_CACHE_HOME to a "
                                "directory that is") from None
    if vllm_lock is None:
        with lock:
            return _ensure(root, log, with_image)
    with vllm_lock, ThreadPoolExecutor(1, thread_name_prefix="vllm-environment") as pool:
        # vLLM's environment is mostly downloads (about 100 s of CPU in its 5 to 9 minutes here),
        # llama.cpp's build all CPU: side by side, the environment costs the build little and
        # the testbed no longer waits for the two one after the other.
        env_built: list[str] = []
        env_reused: list[str] = []
        env_steps: dict[str, float] = {}
        env = pool.submit(step, env_steps, "vllm environment", log,
                          lambda: ensure_vllm_venv(root, log, env_built, env_reused))
        with lock:
            tb = _ensure(root, log, with_image)
        python = env.result()
        tb.built += env_built
        tb.reused += env_reused
        tb.steps.update(env_steps)
        tb.vllm = _ensure_vllm(root, python, tb.models[VLLM_SOURCE_QUANT], log, tb, with_image)
    return tb


def _ensure(root: Path, log: Log, with_image: bool) -> Testbed:
    built: list[str] = []
    reused: list[str] = []
    steps: dict[str, float] = {}
    server, quantize, source = step(steps, "llama.cpp binaries", log,
                                    lambda: ensure_binaries(root, log, built, reused))
    models = step(steps, "gguf models", log,
                  lambda: ensure_models(root, quantize, log, built, reused))
    version = binary_version(server)
    tb = Testbed(server, quantize, source, version, models, built=built, reused=reused, steps=steps)
    if with_image:
        tb.image, tb.image_id, tb.image_note = step(
            steps, "image", log,
            lambda: ensure_image(server, quantize, version, log, built, reused))
    return tb


def _ensure_vllm(root: Path, python: Path, gguf: Path, log: Log, tb: Testbed,
                 with_image: bool) -> VLLMTestbed:
    """The rest of vLLM's part, once its environment is there: the model it serves, its image."""
    model = step(tb.steps, "vllm model", log,
                 lambda: ensure_vllm_model(root, python, gguf, log, tb.built, tb.reused))
    vllm = VLLMTestbed(python, vllm_version(python.parent.parent), model)
    if with_image:
        vllm.image, vllm.image_id, vllm.image_note = step(
            tb.steps, "vllm image", log,
            lambda: ensure_vllm_image(root, python, log, tb.built, tb.reused))
    return vllm
