"""llama-server and llama-quantize: found on PATH when new enough, else built from the llama.cpp
source that llama-cpp-python's sdist vendors, and cached in ``llama.cpp-VERSION/bin``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from engine.testbed.cache import install_dir, manifest_ok, write_manifest
from engine.testbed.steps import Log, TestbedError, pip_download, run

LLAMA_CPP_PYTHON = "0.3.36"  # its sdist vendors the llama.cpp source we build
BINARIES = ("llama-server", "llama-quantize")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    # The server, its JSON and chat templates, the model loader and the multimodal library are
    # most of the build and little of a request's time: at -O1 the build took 494 s of CPU
    # against 660 at Release's -O3, and the server the same CPU for the same requests. ggml's
    # kernels, where a request's time goes, keep -O3 (_GGML_O3, included in ggml's project).
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
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


# Read by cmake right after ggml's project(): its directory's Release flags, back to -O3.
_GGML_O3 = """\
set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")
"""


def binaries_dir(root: Path) -> Path:
    return root / f"llama.cpp-{LLAMA_CPP_PYTHON}" / "bin"


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
    sdist = sdists[0] if sdists else pip_download(
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
    """Build llama-server and llama-quantize; the build tree under tmp/ is kept, so an
    interrupted build resumes where it stopped."""
    src = _extract_source(root, log)
    if not shutil.which("cmake"):
        raise TestbedError("cmake is not installed (apt-get install -y cmake g++)")
    build = root / "tmp" / f"llama.cpp-{LLAMA_CPP_PYTHON}-build"
    build.mkdir(parents=True, exist_ok=True)
    ggml_o3 = build / "ggml-O3.cmake"
    ggml_o3.write_text(_GGML_O3)
    run(["cmake", "-S", str(src), "-B", str(build), *CMAKE_FLAGS,
         f"-DCMAKE_PROJECT_ggml_INCLUDE={ggml_o3}"], log, "cmake configure")
    log("building llama-server and llama-quantize (about 8 minutes of CPU, the first time)")
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
    final = binaries_dir(root)
    if manifest_ok(final, list(BINARIES)):
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
    write_manifest(tmp, list(BINARIES))
    install_dir(tmp, final)
    built.append(str(final))
    return final / BINARIES[0], final / BINARIES[1], "built"
