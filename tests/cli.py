"""The `ruler` command as the tests of every tier run it: a process of its own, its output read."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RULER = [sys.executable, "-m", "engine"]


def ruler(*args: str, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RULER, *args], capture_output=True, text=True, timeout=timeout,
                          **kw)


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr


def closed_pipe_run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with its stdout a pipe nobody reads any more (`ruler status | head -0`)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([*RULER, *args], stdout=w, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(w)


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``path`` with ``options`` (a size, ro); the test is skipped without root."""
    path.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {got.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
