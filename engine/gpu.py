"""GPU truth through NVML (nvidia-ml-py): the GPUs' facts, their memory, and telemetry per pass.

Everything NVML is read here, and only here. The binding is optional: where it is not installed,
or ``nvmlInit`` fails (no driver, no GPU: CI, the CPU testbed), every caller gets the reason,
which starts with :data:`NO_GPU`, and nothing else changes.

Telemetry: a :class:`Sampler` thread reads each GPU a window's server owns at about
:data:`SAMPLE_HZ` while a pass runs (SM and memory clocks, power, the energy counter, temperature,
utilisation, memory used, clock-event reasons), off the load generator's thread: NVML calls go
through ctypes, which lets go of the GIL. :func:`summarize` turns the samples into a rep's figures
and :func:`throttle_cause` says whether a slow rep was throttled. Both are pure, so they are
tested on recorded samples.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NO_GPU = "no NVIDIA GPU"
SAMPLE_HZ = 10.0
MIB = 1024 * 1024

# NVML's clock-event ("throttle") reasons, by bit (nvmlClocksEventReason*).
REASONS: dict[int, str] = {
    0x1: "idle", 0x2: "applications clocks", 0x4: "sw power cap", 0x8: "hw slowdown",
    0x10: "sync boost", 0x20: "sw thermal", 0x40: "hw thermal", 0x80: "hw power brake",
    0x100: "display clock", 0x200: "board limit", 0x400: "reliability"}
# The reasons that are power or heat holding the clocks down: a cause for a slow rep. Idle,
# applications clocks, sync boost and display clock are settings or states, not throttling.
THROTTLE_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x200 | 0x400
THROTTLE = frozenset(REASONS[b] for b in REASONS if b & THROTTLE_BITS)
# A slow rep is throttled when its median SM clock under load is this far below the other reps',
# or a throttle reason shows in this larger a share of its samples than theirs.
CLOCK_DROP = 0.05
REASON_EXCESS = 0.05

# GPU hygiene before each boot (engine.run.gpuwatch): the longest a boot waits for the GPUs' memory.
SETTLE_S = 60.0
# Used memory within this of the session's level counts as back; free memory this much below the
# control's is flagged. A CUDA context alone is a few hundred MiB: anything under it is noise.
SLACK_MIB = 256
FREE_FACT = "gpu.free_mib"  # the boot fact: the owned GPUs' free memory at boot


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


# ------------------------------------------------------------------ the library


@functools.cache
def nvml() -> tuple[Any, str]:
    """The initialised pynvml module, or None and why there is no GPU to read (once per process)."""
    try:
        import pynvml  # optional: the [gpu] extra; absent on CI and the CPU testbed
    except ImportError:
        return None, f"{NO_GPU} (nvidia-ml-py is not installed)"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as e:
        return None, f"{NO_GPU} (NVML: {e})"
    if not count:
        return None, f"{NO_GPU} (NVML sees no device)"
    return pynvml, ""


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


class Nvml:
    """The readings ruler takes, one GPU (by NVML index) at a time. Tests hand in a stand-in
    with the same methods (recorded samples); the code that uses them cannot tell."""

    def __init__(self) -> None:
        self.lib, _ = nvml()
        self._handles: dict[int, Any] = {}

    def _get(self, name: str, *args: Any) -> Any:
        """One NVML reading, or None where this GPU, driver or binding lacks it."""
        try:
            return getattr(self.lib, name)(*args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported, or a binding without the call
            return None

    def _h(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self.lib.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def count(self) -> int:
        return int(self.lib.nvmlDeviceGetCount())

    def index_of(self, uuid: str) -> int | None:
        h = self._get("nvmlDeviceGetHandleByUUID", uuid)
        return None if h is None else self._get("nvmlDeviceGetIndex", h)

    def sample(self, index: int) -> dict[str, Any]:
        lib, h, get = self.lib, self._h(index), self._get
        util, mem = get("nvmlDeviceGetUtilizationRates", h), get("nvmlDeviceGetMemoryInfo", h)
        power = get("nvmlDeviceGetPowerUsage", h)
        reasons = get("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:  # a binding from before the rename
            reasons = get("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return {"t": round(time.monotonic(), 4), "gpu": index,
                "sm_mhz": get("nvmlDeviceGetClockInfo", h, lib.NVML_CLOCK_SM),
                "mem_mhz": get("nvmlDeviceGetClockInfo", h, lib.NVML_CLOCK_MEM),
                "power_w": None if power is None else round(power / 1000, 2),
                "energy_mj": get("nvmlDeviceGetTotalEnergyConsumption", h),
                "temp_c": get("nvmlDeviceGetTemperature", h, lib.NVML_TEMPERATURE_GPU),
                "util": None if util is None else util.gpu,
                "mem_util": None if util is None else util.memory,
                "mem_used_mib": None if mem is None else round(mem.used / MIB),
                "reasons": reasons}

    def memory(self, index: int) -> dict[str, int]:
        m = self.lib.nvmlDeviceGetMemoryInfo(self._h(index))
        return {"used_mib": round(m.used / MIB), "free_mib": round(m.free / MIB),
                "total_mib": round(m.total / MIB)}

    def holders(self, index: int) -> list[dict[str, Any]]:
        """The processes holding memory on the GPU (compute and graphics), with their names."""
        out = []
        for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in self._get(getter, self._h(index)) or []:
                used = getattr(p, "usedGpuMemory", None)
                out.append({"gpu": index, "pid": p.pid, "name": _proc_name(p.pid),
                            "used_mib": round(used / MIB) if isinstance(used, int) else None})
        return out

    def facts(self, index: int) -> dict[str, Any]:
        """What env.json records of one GPU."""
        lib, h, get = self.lib, self._h(index), self._get
        mem = get("nvmlDeviceGetMemoryInfo", h)
        limits = get("nvmlDeviceGetPowerManagementLimitConstraints", h)
        mig, ecc = get("nvmlDeviceGetMigMode", h), get("nvmlDeviceGetEccMode", h)
        pci = get("nvmlDeviceGetPciInfo", h)

        def watts(mw: Any) -> float | None:
            return None if mw is None else round(mw / 1000, 1)

        def clock(kind: int, clock_id: int) -> Any:
            return get("nvmlDeviceGetClock", h, kind, clock_id)

        return {
            "index": index,
            "name": _text(get("nvmlDeviceGetName", h)),
            "uuid": _text(get("nvmlDeviceGetUUID", h)),
            "pci_bus_id": _text(pci.busId) if pci is not None else None,
            "vbios": _text(get("nvmlDeviceGetVbiosVersion", h)),
            "memory_mib": None if mem is None else round(mem.total / MIB),
            "power_limit_w": watts(get("nvmlDeviceGetEnforcedPowerLimit", h)),
            "power_default_limit_w": watts(get("nvmlDeviceGetPowerManagementDefaultLimit", h)),
            "power_limit_range_w": None if limits is None else [watts(x) for x in limits],
            "clocks": {
                "sm_max_mhz": get("nvmlDeviceGetMaxClockInfo", h, lib.NVML_CLOCK_SM),
                "mem_max_mhz": get("nvmlDeviceGetMaxClockInfo", h, lib.NVML_CLOCK_MEM),
                "sm_applications_mhz": clock(lib.NVML_CLOCK_SM, lib.NVML_CLOCK_ID_APP_CLOCK_TARGET),
                "sm_default_applications_mhz": clock(lib.NVML_CLOCK_SM,
                                                     lib.NVML_CLOCK_ID_APP_CLOCK_DEFAULT),
                "mem_applications_mhz": clock(lib.NVML_CLOCK_MEM, lib.NVML_CLOCK_ID_APP_CLOCK_TARGET),
                "sm_boost_max_mhz": clock(lib.NVML_CLOCK_SM, lib.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX),
                "auto_boost": get("nvmlDeviceGetAutoBoostedClocksEnabled", h),
            },
            "persistence_mode": _on(get("nvmlDeviceGetPersistenceMode", h)),
            "compute_mode": get("nvmlDeviceGetComputeMode", h),
            "mig_mode": None if mig is None else {"current": _on(mig[0]), "pending": _on(mig[1])},
            "ecc_mode": None if ecc is None else {"current": _on(ecc[0]), "pending": _on(ecc[1])},
        }

    def system(self) -> dict[str, Any]:
        cuda = self._get("nvmlSystemGetCudaDriverVersion")
        return {"driver": _text(self._get("nvmlSystemGetDriverVersion")),
                "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
                "nvml": _text(self._get("nvmlSystemGetNVMLVersion"))}


def _on(v: Any) -> Any:
    return {0: "off", 1: "on"}.get(v, v) if isinstance(v, int) else v


def _proc_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"  # another PID namespace (a container) or gone


def env_facts() -> dict[str, Any]:
    """env.json's ``gpu``: driver, CUDA and NVML versions, and every GPU's facts; or why none."""
    lib, why = nvml()
    if lib is None:
        return {"none": why}
    reader = Nvml()
    return {**reader.system(), "gpus": [reader.facts(i) for i in range(reader.count())]}


# ------------------------------------------------------------------ the GPUs a server owns


@dataclass
class Gpus:
    """The GPUs a window's server owns, by NVML index, and the reader for them; ``none`` says why
    there are none to read (it starts with NO_GPU, or says the server's GPUs are elsewhere)."""

    indices: list[int] = field(default_factory=list)
    reader: Any = None  # Nvml or a test's stand-in
    none: str = NO_GPU
    note: str = ""  # how the set was chosen (CUDA_VISIBLE_DEVICES, the plan's gpus, all)

    def __bool__(self) -> bool:
        return bool(self.indices) and self.reader is not None

    def memory(self) -> dict[int, dict[str, int]]:
        return {i: self.reader.memory(i) for i in self.indices}

    def holders(self) -> list[dict[str, Any]]:
        return [p for i in self.indices for p in self.reader.holders(i)]


def absent(why: str) -> Gpus:
    return Gpus(none=why)


def owned(selection: str | int | Sequence[str | int] | None, env: Mapping[str, str]) -> Gpus:
    """The GPUs of a server on this host: a runtime's selection (docker ``gpus``: "all", a count, or
    device ids), else its CUDA_VISIBLE_DEVICES, else every GPU NVML sees. Ids are NVML indices or
    UUIDs (``GPU-...``); CUDA's own order can differ from NVML's (set CUDA_DEVICE_ORDER=PCI_BUS_ID
    to make them agree)."""
    lib, why = nvml()
    if lib is None:
        return absent(why)
    return select(Nvml(), selection, env)


def select(reader: Any, selection: str | int | Sequence[str | int] | None,
           env: Mapping[str, str]) -> Gpus:
    count = reader.count()
    every = list(range(count))
    if selection is None and env.get("CUDA_VISIBLE_DEVICES") is not None:
        visible = env["CUDA_VISIBLE_DEVICES"].strip()
        ids: list[str | int] = [x.strip() for x in visible.split(",") if x.strip()]
        note = f"CUDA_VISIBLE_DEVICES={visible}"
    elif selection is None or selection == "all":
        return Gpus(every, reader, note="every GPU on the host")
    elif isinstance(selection, int):
        return Gpus(every[:selection], reader, note=f"the first {selection} GPUs")
    else:
        ids, note = list(selection), f"gpus {','.join(map(str, selection))}"
    indices: list[int] = []
    for gid in ids:
        text = str(gid)
        index = int(text) if text.isdigit() else reader.index_of(text)
        if index is not None and 0 <= index < count and index not in indices:
            indices.append(index)
    if not indices:
        return Gpus(none=f"{NO_GPU} owned by the server ({note} names none of NVML's {count})")
    return Gpus(indices, reader, note=note)


# ------------------------------------------------------------------ telemetry per pass


class Sampler:
    """Reads the owned GPUs at ``hz`` on its own thread while a pass runs.

    ``start`` and ``stop`` each take one reading on the caller's thread, so the energy counter
    brackets the pass exactly; the thread fills in between.
    """

    def __init__(self, gpus: Gpus, hz: float = SAMPLE_HZ) -> None:
        self.gpus, self.period = gpus, 1.0 / hz
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self.error = ""

    def _take(self) -> None:
        try:
            self.samples.extend(self.gpus.reader.sample(i) for i in self.gpus.indices)
        except Exception as e:  # noqa: BLE001 - a GPU lost mid-pass is said, never a crash
            self.error = self.error or f"{type(e).__name__}: {e}"

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._take()

    def start(self) -> Sampler:
        self._take()
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join()
        self._take()
        return self.samples


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(statistics.median(vals)) if vals else None


def summarize(samples: Sequence[dict[str, Any]], tokens: int) -> dict[str, Any]:
    """A pass's GPU figures from its samples: energy (the counter's change over the pass, summed
    over GPUs; where a GPU has no counter, its mean sampled power times the time), mean power,
    J per generated token, SM clock (min and median while busy), and the clock-event reasons seen
    (each with the share of samples that showed it)."""
    gpus = sorted({s["gpu"] for s in samples})
    if not samples:
        return {"gpus": gpus, "samples": 0}
    t0, t1 = min(s["t"] for s in samples), max(s["t"] for s in samples)
    seconds = t1 - t0
    energy, source = 0.0, "counter"
    for g in gpus:
        mine = [s for s in samples if s["gpu"] == g]
        first, last = mine[0].get("energy_mj"), mine[-1].get("energy_mj")
        if first is not None and last is not None and len(mine) > 1:
            energy += (last - first) / 1000
        else:
            source = "power samples"
            energy += (_mean(s.get("power_w") for s in mine) or 0.0) * seconds
    # Busy samples only: a GPU between requests drops its clocks, which is no throttle.
    busy = [s for s in samples if (s.get("util") or 0) > 0 and not (s.get("reasons") or 0) & 0x1]
    clocked = busy or samples
    reasons: dict[str, float] = {}
    for bit, name in REASONS.items():
        n = sum(1 for s in samples if (s.get("reasons") or 0) & bit)
        if n:
            reasons[name] = round(n / len(samples), 3)
    sm = [s["sm_mhz"] for s in clocked if s.get("sm_mhz") is not None]
    return {
        "gpus": gpus,
        "samples": len(samples),
        "seconds": round(seconds, 3),
        "energy_j": round(energy, 3),
        "energy_source": source,
        "power_w": round(energy / seconds, 1) if seconds > 0 else None,
        "j_per_token": round(energy / tokens, 5) if tokens > 0 and seconds > 0 else None,
        "sm_mhz_min": min(sm) if sm else None,
        "sm_mhz_median": _median(sm),
        "mem_mhz_min": min((s["mem_mhz"] for s in clocked if s.get("mem_mhz") is not None), default=None),
        "temp_c_max": max((s["temp_c"] for s in samples if s.get("temp_c") is not None), default=None),
        "util_mean": _round(_mean(s.get("util") for s in samples), 1),
        "mem_used_mib_max": max((s["mem_used_mib"] for s in samples
                                 if s.get("mem_used_mib") is not None), default=None),
        "reasons": reasons,
        "throttle": [n for n in reasons if n in THROTTLE],
    }


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def throttle_cause(rep: Any, others: Sequence[Any]) -> str | None:
    """Why a slow rep was slow, when its GPU summary shows it: a power or thermal reason in a
    larger share of its samples than in the other reps', or a median SM clock under load more
    than CLOCK_DROP below theirs. None without telemetry or without such a sign."""
    if not isinstance(rep, dict) or not rep.get("samples"):
        return None
    peers = [o for o in others if isinstance(o, dict) and o.get("samples")]
    signs = []
    for name in rep.get("throttle", []):
        share = rep["reasons"].get(name, 0.0)
        usual = _median(o.get("reasons", {}).get(name, 0.0) for o in peers) or 0.0
        if share > usual + REASON_EXCESS or (share and not peers):
            signs.append(f"{name} in {share:.0%} of samples"
                         + (f" (other reps {usual:.0%})" if peers else ""))
    ref = _median(o.get("sm_mhz_median") for o in peers)
    mine = rep.get("sm_mhz_median")
    if ref and mine is not None and mine < ref * (1 - CLOCK_DROP):
        signs.append(f"SM clock {mine:.0f} MHz vs {ref:.0f} MHz in the other reps")
    return "; ".join(signs) or None


def per_rep(summary: Any) -> dict[str, Any] | None:
    """The few figures a rep_done event and the console carry, or None without telemetry."""
    if not isinstance(summary, dict) or not summary.get("samples"):
        return None
    return {k: summary.get(k) for k in ("power_w", "sm_mhz_min", "j_per_token", "throttle")}
