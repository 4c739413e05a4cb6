"""GPU hygiene between windows: the GPUs a window's server owns, and a clean start for each boot.

A window that boots while the last server's memory is still held gets a smaller KV pool and looks
like an axis effect. So before each boot ruler waits, bounded by :data:`SETTLE_S`, until the owned
GPUs' used memory is back to where it stood before the session's first boot; if it is not, the
processes still holding memory are listed. Either way a ``gpu_memory`` event records it, and the
free memory at boot becomes the boot fact ``gpu.free_mib``: a window that boots with less free than
its control is flagged in the boot-facts diff (:func:`flag_free`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from engine import gpu
from engine.campaign.machines import Place
from engine.gpu import FREE_FACT, SETTLE_S, SLACK_MIB
from engine.record.events import EventKind
from engine.record.send import Emit
from engine.runtime.base import LaunchPlan

POLL_S = 0.5
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def window_gpus(runtime: str, plan: LaunchPlan, place: Place | None,
                attach_url: str | None = None) -> gpu.Gpus:
    """The GPUs the window's server owns on this host, or why none are sampled here."""
    if runtime == "slurm":
        return gpu.absent(f"{gpu.NO_GPU} sampled: runtime slurm runs the server on a node, not here")
    if runtime == "attach":
        host = urlsplit(attach_url or "").hostname or ""
        if host not in _LOOPBACK:
            return gpu.absent(f"{gpu.NO_GPU} sampled: the attached server is on {host or '?'}")
        return gpu.owned("all", {})
    if runtime == "docker":
        daemon = place.docker_host if place else None
        if daemon and not daemon.startswith("unix://"):
            return gpu.absent(f"{gpu.NO_GPU} sampled: the container runs on {daemon}")
        if plan.gpus is None:
            return gpu.absent(f"{gpu.NO_GPU} given to the container (docker gpus unset)")
        return gpu.owned(plan.gpus, {})
    # A process inherits ruler's environment, then the campaign's.
    return gpu.owned(None, {**os.environ, **plan.env})


class GpuWatch:
    """Each session's used memory before its first boot, and the wait before every boot."""

    def __init__(self, emit: Emit, settle_s: float = SETTLE_S, poll_s: float = POLL_S) -> None:
        self.emit, self.settle_s, self.poll_s = emit, settle_s, poll_s
        self.baselines: dict[str, dict[int, int]] = {}

    def before_boot(self, session: str, window: str, gpus: gpu.Gpus,
                    cancelled: Callable[[], bool] = lambda: False) -> dict[str, int]:
        """Wait for the memory, journal how it went; the boot facts to record (none without GPUs)."""
        if not gpus:
            return {}
        try:
            return self._settle(session, window, gpus, cancelled)
        except Exception as e:  # noqa: BLE001 - a GPU NVML cannot read is said, never a crash
            gpus.indices, gpus.none = [], f"{gpu.NO_GPU} read ({type(e).__name__}: {e})"
            return {}

    def _settle(self, session: str, window: str, gpus: gpu.Gpus,
                cancelled: Callable[[], bool]) -> dict[str, int]:
        start = time.monotonic()
        memory = gpus.memory()
        base = self.baselines.setdefault(session, {})
        for i, m in memory.items():
            base.setdefault(i, m["used_mib"])  # the session's first boot on this GPU: its level

        def settled() -> bool:
            return all(m["used_mib"] <= base[i] + SLACK_MIB for i, m in memory.items())

        while not settled() and time.monotonic() - start < self.settle_s and not cancelled():
            time.sleep(self.poll_s)
            memory = gpus.memory()
        ok = settled()
        free = sum(m["free_mib"] for m in memory.values())
        self.emit(EventKind.GPU_MEMORY, session=session, window=window, settled=ok,
                  waited_s=round(time.monotonic() - start, 2),
                  used_mib={str(i): m["used_mib"] for i, m in memory.items()},
                  baseline_mib={str(i): base[i] for i in memory}, free_mib=free,
                  holders=[] if ok else gpus.holders())
        return {FREE_FACT: free}


def flag_free(diff: dict[str, Any]) -> dict[str, Any]:
    """A boot-facts diff with the free GPU memory judged: within SLACK_MIB of the control's it is
    equal (free memory moves by a few MiB boot to boot); less than that is flagged."""
    pair = diff.get("changed", {}).get(FREE_FACT)
    if pair is None:
        return diff
    here, there = pair
    if not isinstance(here, int | float) or not isinstance(there, int | float):
        return diff
    if here >= there - SLACK_MIB:
        changed = {k: v for k, v in diff["changed"].items() if k != FREE_FACT}
        return {**diff, "changed": changed, "equal": sorted([*diff.get("equal", []), FREE_FACT])}
    return {**diff, "flagged": {FREE_FACT: f"booted with {there - here:,} MiB less free GPU memory "
                                           f"than the control ({here:,} vs {there:,} MiB)"}}
