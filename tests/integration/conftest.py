"""Real parts for the integration tier: the cached llama.cpp testbed and the Docker engine.

They live here, not in tests/conftest.py, so a unit test cannot ask for them. With CI=true a missing
Docker engine or llama-server fails the test instead of skipping it.
"""

from __future__ import annotations

import os

import pytest

from engine import testbed as tb_mod

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} is required in CI and is missing")
    pytest.skip(f"{what} is not available here")


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    from engine.runtime import docker as rd

    if not rd.daemon_answers():
        _missing("a Docker engine")
    return rd.client()


@pytest.fixture(scope="session")
def testbed() -> tb_mod.Testbed:
    from engine.runtime import docker as rd

    try:
        return tb_mod.ensure(log=print, with_image=rd.daemon_answers())
    except tb_mod.TestbedError as e:
        _missing(f"the llama.cpp testbed ({e})")
        raise


@pytest.fixture(scope="session")
def testbed_image(testbed: tb_mod.Testbed, docker_client: object) -> str:
    if not testbed.image:
        _missing(f"the testbed image ({testbed.image_note})")
    assert testbed.image
    return testbed.image
