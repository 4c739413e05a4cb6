"""Fixtures of the component tier: run directories on tmpfs, and the fake runtime the Runner
starts its servers on (tests/component/fakes.py)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.fakes import FakeRuntime


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    """Run directories on tmpfs where there is one: the journal fsyncs every event (about 5 ms
    each on this machine's disk) and a boot alone journals some sixty boot facts."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm, prefix="ruler-unit-") as d:
        yield Path(d)


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime()
    yield runtime
    runtime.close()
