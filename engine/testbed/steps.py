"""What every step of the testbed shares: its errors, its log, a command run with what it says when
it fails, a file fetched from the package index, and each step's time."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

Log = Callable[[str], None]
_T = TypeVar("_T")


class TestbedError(RuntimeError):
    """The testbed could not be prepared; the message says what and why."""


class TestbedCacheError(TestbedError):
    """The cache directory is the operator's to fix (read-only, not a directory): bad input."""


def stderr_log(msg: str) -> None:
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], log: Log, what: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise TestbedError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                           + tail(proc.stderr or proc.stdout))
    return proc


def tail(output: str, n: int = 8) -> str:
    """The lines that say why: pip's ERROR lines when there are some (its index warnings bury
    them), else the last ``n``."""
    lines = output.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return "\n".join((errors or lines)[-n:])


def pip_download(spec: str, dest: Path, source: bool, log: Log) -> Path:
    """Fetch one distribution from the package index; say exactly what could not be fetched."""
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, spec]
        if source:
            # This project alone: with ":all:", pip would build each of its build backends from
            # source too, in nested environments (over 3 minutes on a fresh machine, not 1).
            cmd[4:4] = ["--no-binary", spec.split("==")[0]]
        log(f"downloading {spec}{' (source)' if source else ''} from the package index")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        files = list(Path(tmp).iterdir())
        if proc.returncode != 0 or len(files) != 1:
            lines = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise TestbedError(f"could not fetch {spec} from the package index: {' '.join(lines)}")
        dest.mkdir(parents=True, exist_ok=True)
        final = dest / files[0].name
        os.replace(files[0], final)
        return final


def step(steps: dict[str, float], name: str, log: Log, fn: Callable[[], _T]) -> _T:
    """``fn()``, its seconds recorded under ``name`` (and said when a second or more)."""
    started = time.monotonic()
    try:
        return fn()
    finally:
        steps[name] = round(time.monotonic() - started, 1)
        if steps[name] >= 1:
            log(f"{name}: {steps[name]:.1f} s")
