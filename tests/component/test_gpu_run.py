"""GPU telemetry, the throttle cause and GPU hygiene in the run loop (engine.run.runner with
Measurement) against a FAKE server and a FAKE GPU.

Both fakes are tests/component/fakes.py's: FakeLlama stands in for llama-server, FakeGpu for NVML (no
GPU is read: its power, clocks, clock-event reasons and memory are what each test sets, on cue,
as the engine journals events). The same code on a real GPU ran on an H200: docs/runs/h200-llamacpp/.
Without a GPU (this machine, CI) the path is the no-GPU one, tested here on the real binding.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import gpu
from engine.commands.progress import format_event
from engine.record.fold import fold
from engine.record.journal import read_events
from engine.record.receipts import read_rep
from tests.campaigns import CTX, LEAKY, campaign
from tests.component.fakes import FakeGpu, FakeRuntime, Hooks
from tests.component.helpers import events, rows, runner, slow_rep_two

pytestmark = pytest.mark.timeout(60)
POWER_CAP = 0x4  # NVML's sw power cap clock-event reason


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGpu]:
    """Every window's server owns GPU 0 of a FakeGpu."""
    reader = FakeGpu()
    monkeypatch.setattr(gpu, "owned", lambda selection, env: gpu.Gpus([0], reader, note="fake"))
    yield reader


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The real gpu.nvml() with nvidia-ml-py absent (an import that fails), as on CI."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    gpu.nvml.cache_clear()
    yield
    gpu.nvml.cache_clear()


def test_without_the_binding_every_receipt_says_no_gpu_and_nothing_else_changes(
        tmp: Path, fake: FakeRuntime, no_nvml: None) -> None:
    r = runner(tmp, campaign("nogpu", CTX, {"s1": ["ctx"]}), fake)
    assert r.run() == "finished"
    run = r.run_dir
    reps = sorted((run / "windows").glob("*/reps/*.jsonl"))
    assert reps and all(read_rep(p)[0]["gpu"] == "no NVIDIA GPU (nvidia-ml-py is not installed)"
                        for p in reps)  # warm passes too
    assert not [p for p in reps if p.name.endswith(".gpu.jsonl")]
    for row in rows(run).values():
        assert (row["j_per_token"], row["power_w"], row["sm_mhz_min"], row["throttled"]) == ("",) * 4
        assert row["status"] == "ok"
    assert not events(run, "gpu_memory")
    assert not any("gpu" in e for e in events(run, "rep_done"))
    assert "gpu.free_mib" not in fold(read_events(run / "journal.jsonl")).windows["s1-ctx"].facts
    assert json.loads((run / "windows" / "s1-ctx" / "boot-facts.json").read_text())[
        "diff_vs_control"].get("flagged") is None


def test_a_driver_that_does_not_load_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    class NVMLError(Exception):
        pass

    def init() -> None:
        raise NVMLError("Driver Not Loaded")

    stub = types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=init)
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    gpu.nvml.cache_clear()
    try:
        assert gpu.nvml() == (None, "no NVIDIA GPU (NVML: Driver Not Loaded)")
        assert gpu.env_facts() == {"none": "no NVIDIA GPU (NVML: Driver Not Loaded)"}
        assert not gpu.owned(None, {}) and gpu.owned(None, {}).none.startswith("no NVIDIA GPU")
    finally:
        gpu.nvml.cache_clear()


def test_a_slow_rep_on_a_power_capped_gpu_is_throttled_not_a_leak_and_still_measured_again(
        tmp: Path, fake: FakeRuntime, fake_gpu: FakeGpu) -> None:
    hooks = Hooks()
    slow_rep_two(hooks, fake)  # the fake server streams rep 2 ten times slower...

    def cap(_: object) -> None:  # ...while the fake GPU says its power cap held the clocks down
        fake_gpu.reasons, fake_gpu.sm_mhz = POWER_CAP, 1410

    def uncap(_: object) -> None:
        fake_gpu.reasons, fake_gpu.sm_mhz = 0, 1980

    hooks.on(cap, kind="rep_done", window="control", attempt=1, rep=1)
    hooks.on(uncap, kind="rep_done", window="control", attempt=1, rep=2)
    r = runner(tmp, campaign("throttle", CTX, {"s1": ["ctx"]}, leak=LEAKY, max_tokens=16), fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir

    leak = events(run, "leak_suspected", window="control")
    assert [(e["attempt"], e["rep"], e.get("cause")) for e in leak] == [(1, 2, "throttled")]
    assert leak[0]["detail"].startswith("rep 2: sw power cap in 100% of samples (other reps 0%); "
                                        "SM clock 1410 MHz vs 1980 MHz in the other reps")
    assert str(format_event(leak[0])).startswith("s1/control prose C2 THROTTLED on attempt 1 rep 2: ")
    void = events(run, "row_void", window="control")
    assert [(e["attempt"], e["rerun"], e.get("cause")) for e in void] == [(1, True, "throttled")]
    assert void[0]["reason"].startswith("throttled (rep 2: sw power cap in 100% of samples")
    assert " below the next lowest > the leak bar " in void[0]["reason"]
    assert void[0]["reason"].endswith("% at C2")
    # The throttled rep alone is measured again; reps 1 and 3 are kept.
    assert void[0]["condemned"] == [2]
    assert [e["rep"] for e in events(run, "rep_done", window="control", attempt=2)] == [3]

    got = rows(run)
    control, ctx = got["s1-control/prose/c2"], got["s1-ctx/prose/c2"]
    assert (control["status"], control["attempts"], control["throttled"]) == ("ok", "2", "False")
    for row in (control, ctx):
        assert float(row["power_w"]) == pytest.approx(300, rel=0.05)  # the fake draws 300 W
        assert float(row["j_per_token"]) > 0 and row["sm_mhz_min"] == "1980"

    # The throttled rep's receipt: its summary, and its samples beside it.
    header, records = read_rep(run / "windows" / "s1-control" / "reps" / "prose-c2-1-2.jsonl")
    g = header["gpu"]
    assert g["throttle"] == ["sw power cap"] and g["reasons"] == {"sw power cap": 1.0}
    assert g["sm_mhz_min"] == 1410 and g["gpus"] == [0] and g["energy_source"] == "counter"
    samples = [json.loads(x) for x in (run / "windows" / "s1-control" / "reps" / g["file"])
               .read_text().splitlines()]
    assert len(samples) == g["samples"] >= 2
    tokens = sum(r["completion_tokens"] or 0 for r in records)
    energy = (samples[-1]["energy_mj"] - samples[0]["energy_mj"]) / 1000
    assert g["j_per_token"] == pytest.approx(energy / tokens, rel=1e-3)
    done = events(run, "rep_done", window="control", attempt=1, rep=2)[0]
    assert done["gpu"]["throttle"] == ["sw power cap"]
    assert " | 300 W, SM min 1410 MHz, " in str(format_event(done))
    assert "THROTTLE sw power cap" in str(format_event(done))


def test_a_window_waits_for_the_gpu_memory_of_the_last_server(
        tmp: Path, fake: FakeRuntime, fake_gpu: FakeGpu) -> None:
    # Control: 1,000 MiB used before the session's first boot. Before ctx boots the control's
    # memory is still held for three readings, then given back.
    fake_gpu.used_mib = [1000, 9000, 9000, 9000, 1100]
    r = runner(tmp, campaign("hygiene", CTX, {"s1": ["ctx"]}), fake)
    r.gpuwatch.poll_s = 0.05
    assert r.run() == "finished"
    run = r.run_dir
    waits = events(run, "gpu_memory")
    assert [(e["window"], e["settled"], e["used_mib"], e["baseline_mib"], e["holders"])
            for e in waits] == [("control", True, {"0": 1000}, {"0": 1000}, []),
                                ("ctx", True, {"0": 1100}, {"0": 1000}, [])]
    assert waits[1]["waited_s"] >= 0.1
    state = fold(read_events(run / "journal.jsonl"))
    assert (state.windows["s1-control"].facts["gpu.free_mib"],
            state.windows["s1-ctx"].facts["gpu.free_mib"]) == (80920, 80820)
    diff = state.windows["s1-ctx"].diff
    assert diff is not None and "gpu.free_mib" in diff["equal"] and "flagged" not in diff


def test_memory_that_never_comes_back_lists_its_holders_and_flags_the_boot(
        tmp: Path, fake: FakeRuntime, fake_gpu: FakeGpu) -> None:
    fake_gpu.used_mib = [1000, 3000]  # 2,000 MiB stay held after the control
    fake_gpu.holding = [{"gpu": 0, "pid": 4242, "name": "llama-server", "used_mib": 2000}]
    r = runner(tmp, campaign("held", CTX, {"s1": ["ctx"]}), fake)
    r.gpuwatch.settle_s, r.gpuwatch.poll_s = 0.3, 0.05
    assert r.run() == "finished"
    run = r.run_dir
    held = events(run, "gpu_memory", window="ctx")[0]
    assert (held["settled"], held["used_mib"], held["baseline_mib"], held["holders"]) == (
        False, {"0": 3000}, {"0": 1000}, fake_gpu.holding)
    assert str(format_event(held)).startswith("s1/ctx GPU memory NOT back after 0 s: used {'0': 3000} "
                                         "MiB vs {'0': 1000} MiB before the session; held by pid "
                                         "4242 (llama-server) 2000 MiB on GPU 0")
    facts = json.loads((run / "windows" / "s1-ctx" / "boot-facts.json").read_text())
    assert facts["diff_vs_control"]["changed"]["gpu.free_mib"] == [78920, 80920]
    why = "booted with 2,000 MiB less free GPU memory than the control (78,920 vs 80,920 MiB)"
    assert facts["diff_vs_control"]["flagged"] == {"gpu.free_mib": why}
    ready = events(run, "window_ready", window="ctx")[0]
    assert str(format_event(ready)).endswith(f"| FLAGGED {why}")
