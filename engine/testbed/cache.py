"""The cache every part of the testbed lands in, ``${XDG_CACHE_HOME:-~/.cache}/ruler/``: each
directory is reused while its manifest (size and sha256 of every file) still matches, and is put
in place whole, by a rename, only once complete."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ruler"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(directory: Path, names: list[str]) -> None:
    entries = {n: {"size": (directory / n).stat().st_size, "sha256": sha256(directory / n)}
               for n in names}
    (directory / "manifest.json").write_text(json.dumps(entries, indent=1, sort_keys=True))


def manifest_names(directory: Path) -> dict[str, Any]:
    """The manifest as a mapping of the names it records ({} for one missing, unreadable or not
    a JSON object)."""
    try:
        entries = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _manifest(directory: Path) -> dict[str, dict[str, Any]] | None:
    """The manifest's entries, as :func:`write_manifest` writes them ({name: {size, sha256}}); None
    for one missing, unreadable or of any other shape (edited, damaged: not to be trusted)."""
    entries = manifest_names(directory)
    if not entries or not all(
            isinstance(e, dict) and type(e.get("size")) is int and isinstance(e.get("sha256"), str)
            for e in entries.values()):
        return None
    return entries


def manifest_ok(directory: Path, names: list[str]) -> bool:
    """True when every named file exists with the size and checksum recorded at creation."""
    entries = _manifest(directory)
    if entries is None:
        return False
    for n in names:
        p = directory / n
        e = entries.get(n)
        if not e or not p.is_file() or p.stat().st_size != e["size"] or sha256(p) != e["sha256"]:
            return False
    return True


def has_manifest(directory: Path) -> bool:
    """A directory some run completed (its manifest written last), whether or not it still
    matches: what a dry run may name without checking every byte."""
    return (directory / "manifest.json").is_file()


def install_dir(tmp: Path, final: Path) -> None:
    """Atomically put a completed directory in place, replacing a stale one."""
    os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; a container user other than root must read it
    if final.exists():
        shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(tmp, final)
