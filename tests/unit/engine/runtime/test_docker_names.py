"""A container name holds the run's token, so only the same run can hold it: the same run's
earlier attempt is stopped and kept under another name; a copy of the run directory (the same run
id, another directory) never touches the container of the directory it was copied from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from engine.runtime.base import LaunchError, LaunchPlan
from engine.runtime.docker import _clear_name


@dataclass
class Old:
    labels: dict[str, str]
    status: str = "running"
    short_id: str = "abc123"
    done: list[str] = field(default_factory=list)

    def stop(self, timeout: int) -> None:
        self.done.append("stop")

    def rename(self, name: str) -> None:
        self.done.append(f"rename {name}")


class Daemon:
    def __init__(self, old: Old) -> None:
        self.containers = self
        self.old = old

    def get(self, name: str) -> Old:
        return self.old


def labels(dir_id: str) -> dict[str, str]:
    return {"ruler.campaign": "c", "ruler.run": "run.abcd1234", "ruler.window": "s1-control",
            "ruler.dir": f"/results/{dir_id}", "ruler.dir.id": f"host:1:{dir_id}"}


def plan(dir_id: str) -> LaunchPlan:
    return LaunchPlan(name="ruler-c-s1-control-abcd1234", argv=[], env={},
                      secret_env={}, host_port=8080, labels=labels(dir_id))


def test_the_same_runs_earlier_attempt_is_kept_aside() -> None:
    old = Old(labels("7"))
    dc: Any = Daemon(old)
    _clear_name(dc, plan("7"))
    assert old.done == ["stop", "rename ruler-c-s1-control-abcd1234--abc123"]


def test_a_copy_of_the_run_directory_leaves_the_originals_container() -> None:
    old = Old(labels("7"))
    dc: Any = Daemon(old)
    with pytest.raises(LaunchError, match=r"in /results/7, of which this run directory is a copy"):
        _clear_name(dc, plan("8"))
    assert old.done == []
