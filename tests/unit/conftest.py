"""Fixtures of the unit tier: run directories and the fake runtime of the run-loop tests
(test_runner, test_places), and the shellcheck the job-script tests run."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.fakes import FakeRuntime


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


@pytest.fixture(scope="session")
def shellcheck() -> str:
    """shellcheck's path. .ci/run installs it, so with CI=true a missing one fails the test instead
    of skipping it."""
    path = shutil.which("shellcheck")
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("shellcheck is required in CI and is missing")
        pytest.skip("shellcheck is not installed")
    return path
