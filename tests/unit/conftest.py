"""Fixtures of the unit tier: the shellcheck the job-script tests run."""

from __future__ import annotations

import os
import shutil

import pytest


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
