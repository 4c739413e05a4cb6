"""The Slurm runtime's check, before the first window, that its jobs can reach the results
directory: Slurm's commands are replaced by what a cluster of other nodes would answer (the CI
cluster has one node, this machine, where every directory is shared trivially)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.runtime.base import LaunchError
from engine.runtime.slurm import server as slurm

HERE = socket.gethostname().split(".")[0]


@dataclass
class Cluster:
    """What the replaced sinfo lists, where the results directory is mounted, and who asked."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    fs: tuple[str, str] = ("ext4", "/")
    partitions: list[str | None] = field(default_factory=list)
    fs_asked: int = 0

    def sinfo_nodes(self, partition: str | None) -> list[dict[str, Any]]:
        self.partitions.append(partition)
        return self.nodes

    def fs_of(self, path: Path) -> tuple[str, str]:
        self.fs_asked += 1
        return self.fs


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """A Slurm 22.05 with the test's nodes; no Slurm command runs."""
    c = Cluster()
    monkeypatch.setattr(slurm, "slurm_version", lambda: (22, 5, "22.05.8"))
    monkeypatch.setattr(slurm, "squeue", lambda job=None: [])
    monkeypatch.setattr(slurm, "sinfo_nodes", c.sinfo_nodes)
    monkeypatch.setattr(slurm, "_fs_of", c.fs_of)
    return c


def test_results_on_a_local_filesystem_with_jobs_on_other_nodes_is_refused(
        cluster: Cluster, tmp_path: Path) -> None:
    cluster.nodes = [{"name": f"gpu{i:02d}", "hostname": f"gpu{i:02d}.cluster"} for i in range(10)]
    cluster.fs = ("ext4", "/scratch")
    with pytest.raises(LaunchError) as e:
        slurm.SlurmRuntime(partition="h200").preflight(tmp_path)
    assert str(e.value) == (
        f"runtime slurm: the results directory {tmp_path} is on ext4 (mounted at /scratch), a "
        "filesystem of this machine only, but the jobs run on other nodes (gpu00, gpu01, gpu02, "
        "gpu03, gpu04, gpu05, gpu06, gpu07...): each job writes its boot.log and says where its "
        "server listens in that directory. Put the results on a filesystem the nodes share (NFS, "
        "Lustre, GPFS, BeeGFS, CephFS, WekaFS): --results-dir DIR")
    assert cluster.partitions == ["h200"]  # the nodes of the campaign's partition


@pytest.mark.parametrize("kind", ["nfs4", "lustre", "gpfs", "ceph", "beegfs", "wekafs"])
def test_results_on_a_shared_filesystem_pass(cluster: Cluster, tmp_path: Path,
                                             kind: str) -> None:
    cluster.nodes = [{"name": "gpu01", "hostname": "gpu01"}, {"name": HERE, "hostname": HERE}]
    cluster.fs = (kind, "/shared")
    slurm.SlurmRuntime().preflight(tmp_path)
    assert cluster.fs_asked == 1


def test_a_cluster_of_this_machine_alone_shares_any_directory(cluster: Cluster,
                                                             tmp_path: Path) -> None:
    # CI's single-node cluster: the node is this host (sinfo may give the long name).
    cluster.nodes = [{"name": "vm", "hostname": f"{HERE}.example.org"}]
    cluster.fs = ("tmpfs", "/tmp")
    slurm.SlurmRuntime().preflight(tmp_path)
    assert cluster.fs_asked == 0
