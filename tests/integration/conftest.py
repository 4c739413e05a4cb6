"""Real parts for the integration tier: the cached llama.cpp and vLLM testbeds, the Docker engine,
a Slurm cluster, and the two real runs ``ruler report`` and ``ruler compare`` are checked on.

They live here, not in tests/conftest.py, so a unit test cannot ask for them. With CI=true a missing
Docker engine or llama-server fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine import testbed as tb_mod
from tests.integration.report_runs import real_run

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


# A test's markers follow the parts it takes: one that asks for a testbed (itself or through
# another fixture, a real run) is `server`, one that asks for a Docker engine or image `docker`.
SERVER_FIXTURES = frozenset({"testbed", "vllm_testbed"})
DOCKER_FIXTURES = frozenset({"docker_client", "testbed_image", "vllm_image"})


# The modules whose tests share the session's two real runs (run_a, run_b: minutes to build) go
# to one worker as one unit, so the runs are built once, not once on each worker (a fresh tier on
# a busy machine built run A twice: 194 s and 172 s).
SHARED_RUNS = ("test_report.py", "test_compare.py")
# The tier hands out its modules longest first (`make test` passes --no-loadscope-reorder, which
# would hand them out by their count of tests), so it does not end on one worker running a long
# module while the other idles: every module is named, the shortest last, so that the worker that
# frees first near the end takes only short ones. The order is that of the "time by module" list
# below from a whole tier (2 workers, load 2-10), with the modules cut since then at their new times.
LONGEST_FIRST = ("test_vllm_live.py", *SHARED_RUNS, "test_quality.py", "test_slurm_cluster.py",
                 "test_workloads.py", "test_openloop.py", "test_tune.py", "test_capacity.py",
                 "test_run.py", "test_aa.py", "test_exits.py", "test_precision.py", "test_control.py",
                 "test_vllm_docker.py", "test_sweep.py", "test_cache.py", "test_failures.py",
                 "test_testbed.py", "test_leak.py", "test_tui_live.py", "test_replay.py",
                 "test_places_live.py", "test_client_stall.py", "test_two_runs.py", "test_shards.py",
                 "test_prune.py", "test_boot_log.py", "test_acceptance_live.py", "test_keep_alive.py",
                 "test_bad_server_campaign.py", "test_secrets.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
        if names & DOCKER_FIXTURES:
            item.add_marker(pytest.mark.docker)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a module's own order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A module per worker, as --dist loadfile, but the modules of SHARED_RUNS as one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedRuns(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return " + ".join(SHARED_RUNS) if Path(module).name in SHARED_RUNS else module

        def _reschedule(self, node: Any) -> None:
            """The next module only once the worker is on its last test: a worker must hold the
            test after the one it runs (pytest's teardown looks ahead), but xdist hands the next
            module over at two tests left, tying it to a worker still busy with a long test while
            the other worker may run dry first."""
            if (not node.shutting_down and self.workqueue
                    and self._pending_of(self.assigned_work[node]) > 1):
                return
            super()._reschedule(node)

    return SharedRuns(config, log)


# The tier runs a module per worker (--dist loadfile), so its time is set by how the modules'
# totals pack onto the workers: each module's total is printed at the end to balance by.
_MODULE_S: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::")[0]
    _MODULE_S[module] = _MODULE_S.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _MODULE_S or hasattr(terminalreporter.config, "workerinput"):
        return
    terminalreporter.section("time by module (setup, calls and teardown)")
    for module, took in sorted(_MODULE_S.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{took:8.1f}s {module}")
    terminalreporter.write_line(f"{sum(_MODULE_S.values()):8.1f}s in all")


def _missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} is required in CI and is missing")
    pytest.skip(f"{what} is not available here")


@pytest.fixture(scope="session")
def docker_client():
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
def vllm_testbed() -> tb_mod.VLLMTestbed:
    """vLLM's CPU build and SmolLM2 as safetensors (`ruler testbed`, which `make test` has run
    before the integration tier)."""
    try:
        tb = tb_mod.ensure(log=print, with_image=False, with_vllm=True)
    except tb_mod.TestbedError as e:
        _missing(f"the vLLM testbed ({e})")
        raise
    assert tb.vllm is not None
    return tb.vllm


@pytest.fixture(scope="session")
def vllm_image(vllm_testbed: tb_mod.VLLMTestbed, docker_client: object) -> str:
    """The vLLM testbed as an image (`docker import`: its interpreter and system libraries; the
    environment is mounted)."""
    tb = tb_mod.ensure(log=print, with_image=True, with_vllm=True)
    assert tb.vllm is not None
    if not tb.vllm.image:
        _missing(f"the vLLM testbed image ({tb.vllm.image_note})")
    assert tb.vllm.image
    return tb.vllm.image


@pytest.fixture(scope="session")
def testbed_image(testbed: tb_mod.Testbed, docker_client: object) -> str:
    if not testbed.image:
        _missing(f"the testbed image ({testbed.image_note})")
    assert testbed.image
    return testbed.image


def _slurm_answers() -> bool:
    """A node of the cluster is up (idle, mixed or allocated), as ``.ci/slurm-up`` waits for."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and bool(re.search(r"^(idle|mixed|allocated)", out.stdout, re.M))


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A Slurm cluster answers; as root, ``.ci/slurm-up`` installs and starts the single-node one."""
    if _slurm_answers():
        return
    if os.geteuid() != 0:
        _missing("a Slurm cluster (sinfo does not answer, and .ci/slurm-up needs root)")
    up = Path(__file__).resolve().parents[2] / ".ci" / "slurm-up"
    try:
        done = subprocess.run([str(up)], capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        _missing(f"a Slurm cluster ({up} did not finish in 900 s)")
        raise
    if done.returncode != 0 or not _slurm_answers():
        _missing(f"a Slurm cluster ({up} exited {done.returncode}: "
                 f"{(done.stdout + done.stderr).strip()[-2000:]})")


@pytest.fixture(scope="session")
def run_a(testbed: tb_mod.Testbed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/integration/report_runs.py's run A, built once per session (minutes)."""
    return real_run("a", tmp_path_factory)


@pytest.fixture(scope="session")
def run_b(testbed: tb_mod.Testbed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/integration/report_runs.py's run B, built once per session."""
    return real_run("b", tmp_path_factory)
