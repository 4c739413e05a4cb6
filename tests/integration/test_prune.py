"""``ruler prune`` on the real Docker engine: the containers of runs that are over are removed, a
live run's (its engine lock held) and those of runs it cannot find are left, each said.

The containers are the testbed image's, carrying ruler's labels as a run's kept ones do (its id,
its directory and that directory's identity): one of them ran (llama-server --version) and exited,
the others were created; each run's directory has the engine.json that names its id. A live run is
one whose lock a process holds, as its engine does (engine/record/liveness.py). A copy of a live
run's directory (cp -a) and a read-only view of it (a bind mount) never prove it over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.record import results
from engine.record.liveness import LOCK

RULER = [sys.executable, "-m", "engine"]


@pytest.fixture
def made(docker_client: Any, testbed_image: str) -> Iterator[list[Any]]:
    """The containers a test makes; whatever prune left is removed after it."""
    made: list[Any] = []
    yield made
    for c in made:
        with contextlib.suppress(Exception):  # removed by prune already
            c.remove(force=True)


def run_dir(results: Path, name: str) -> tuple[Path, str]:
    rid = f"{name}.{uuid.uuid4().hex[:8]}"  # other engineers' runs share the Docker engine
    d = results / name
    d.mkdir(parents=True)
    (d / "engine.json").write_text(json.dumps({"run_id": rid}))
    (d / "journal.jsonl").write_text("")
    return d, rid


def container(dc: Any, image: str, rid: str, window: str, made: list[Any], ran: bool = False,
              home: Path | None = None) -> Any:
    """``home``: the run directory, named on the labels as the runner names it (None: a run
    whose directory is elsewhere)."""
    labels = {"ruler.campaign": "prune", "ruler.run": rid, "ruler.window": window}
    if home is not None:
        labels |= {"ruler.dir": str(home.resolve()), "ruler.dir.id": results.dir_identity(home) or ""}
    name = f"ruler-prune-{window}-{rid.rsplit('.', 1)[1]}"
    c = dc.containers.create(image, ["--version"], name=name, labels=labels)
    made.append(c)
    if ran:
        c.start()
        c.wait(timeout=60)
    c.reload()
    return c


def prune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RULER, "prune", *args], capture_output=True, text=True, timeout=120)


def names(dc: Any, rid: str) -> set[str]:
    return {c.name for c in dc.containers.list(all=True, filters={"label": f"ruler.run={rid}"})}


def test_prune_removes_only_the_containers_of_runs_that_are_over(
        docker_client: Any, testbed_image: str, made: list[Any], tmp_path: Path) -> None:
    results = tmp_path / "results"
    over, over_id = run_dir(results, "over")
    live, live_id = run_dir(results, "live")
    lost_id = f"lost.{uuid.uuid4().hex[:8]}"  # a run whose directory is elsewhere (or deleted)
    done = [container(docker_client, testbed_image, over_id, "s1-control", made, ran=True, home=over),
            container(docker_client, testbed_image, over_id, "s1-ctx", made, home=over)]
    assert done[0].status == "exited"
    kept_live = container(docker_client, testbed_image, live_id, "s1-control", made, ran=True, home=live)
    kept_lost = container(docker_client, testbed_image, lost_id, "s1-control", made)
    with (live / LOCK).open("a") as lock:  # the live run's engine holds its lock
        fcntl.flock(lock, fcntl.LOCK_EX)

        dry = prune("--dry-run", "--results-dir", str(results))
        assert dry.returncode == 0, dry.stderr
        assert names(docker_client, over_id) == {c.name for c in done}  # nothing removed
        for c in done:
            assert f"would remove {c.name} (" in dry.stdout

        young = prune("--older-than", "1h", "--results-dir", str(results))
        assert young.returncode == 0 and names(docker_client, over_id) == {c.name for c in done}
        assert "younger than --older-than" in young.stdout

        out = prune("--results-dir", str(results))
        print(out.stdout)
        assert out.returncode == 0, out.stderr
        assert names(docker_client, over_id) == set()
        for c in done:
            assert f"removed  {c.name} (" in out.stdout and f"its run is over ({over})" in out.stdout
        assert names(docker_client, live_id) == {kept_live.name}
        assert f"left     {kept_live.name} (exited, run {live_id}): its run is live ({live})" \
            in out.stdout
        assert names(docker_client, lost_id) == {kept_lost.name}
        assert f"left     {kept_lost.name} (created, run {lost_id}): its run directory is not " \
               "found here" in out.stdout

        # Named, the live run is still left alone; another run named is pruned by its id.
        named = prune(str(live))
        assert named.returncode == 0 and names(docker_client, live_id) == {kept_live.name}
    # Its engine gone, the run is over: named, its kept container goes.
    named = prune(str(live))
    assert named.returncode == 0 and names(docker_client, live_id) == set()
    assert f"removed  {kept_live.name} (" in named.stdout




def test_a_copy_or_a_read_only_view_of_a_live_run_prunes_nothing(
        docker_client: Any, testbed_image: str, made: list[Any], tmp_path: Path) -> None:
    live, live_id = run_dir(tmp_path / "results", "live")
    serving = container(docker_client, testbed_image, live_id, "s1-control", made, home=live)
    serving.start()  # the live run's server (--version exits at once: running or exited, it is kept)
    with (live / LOCK).open("a") as lock:  # its engine holds its lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        copies = tmp_path / "copies"
        copies.mkdir()
        subprocess.run(["cp", "-a", str(live), str(copies / "live")], check=True)

        out = prune("--results-dir", str(copies))
        assert out.returncode == 0, out.stderr
        assert names(docker_client, live_id) == {serving.name}
        assert f"left     {serving.name} (" in out.stdout
        assert f"it belongs to the run directory {live.resolve()}" in out.stdout
        assert prune(str(copies / "live")).returncode == 0  # named, the copy proves nothing either
        assert names(docker_client, live_id) == {serving.name}

        # The results seen through a read-only bind mount, in a mount namespace of its own.
        view = tmp_path / "view"
        view.mkdir()
        script = (f"mount --bind {tmp_path / 'results'} {view} && mount -o remount,bind,ro {view} "
                  f"&& exec {' '.join(RULER)} prune --results-dir {view}")
        if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
            pytest.skip("no mount namespace here (unshare -m) for a read-only view")
        ro = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                            timeout=120)
        assert ro.returncode == 0, ro.stderr
        assert names(docker_client, live_id) == {serving.name}
        assert f"left     {serving.name} (" in ro.stdout and "its run is live" in ro.stdout
    # Its engine gone, the run is over: the directory itself proves it.
    out = prune("--results-dir", str(tmp_path / "results"))
    assert out.returncode == 0 and names(docker_client, live_id) == set()


def test_a_resumed_copy_of_a_live_run_leaves_its_running_server(
        docker_client: Any, testbed: Any, testbed_image: str, made: list[Any], tmp_path: Path) -> None:
    """The other remover of servers: a resume stops the strays its killed engine left. A copy of a
    live run (cp -a) carries the run's id; resumed, it stops nothing of the run it was copied
    from, whose server keeps serving; the run's own directory proves the server its own."""
    from engine.runtime.docker import DockerRuntime

    live, live_id = run_dir(tmp_path / "results", "live")
    model = Path(min(testbed.models.values(), key=lambda p: Path(p).stat().st_size))
    labels = {"ruler.campaign": "prune", "ruler.run": live_id, "ruler.window": "s1-control",
              "ruler.dir": str(live.resolve()), "ruler.dir.id": results.dir_identity(live) or ""}
    serving = docker_client.containers.run(
        testbed_image, ["-m", str(model), "-c", "256", "--port", "8080"], detach=True,
        name=f"ruler-prune-s1-control-{live_id.rsplit('.', 1)[1]}", labels=labels,
        volumes={str(model.parent): {"bind": str(model.parent), "mode": "ro"}})
    made.append(serving)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(live), str(copy)], check=True)

    assert DockerRuntime().stop_strays(live_id, results.dir_identity(copy) or "", []) == []
    serving.reload()
    assert serving.status == "running"
    # The run's own directory resumed: the server is its stray, and is stopped.
    stopped = DockerRuntime().stop_strays(live_id, results.dir_identity(live) or "", [])
    assert [s["name"] for s in stopped] == [serving.name]
    serving.reload()
    assert serving.status == "exited"
