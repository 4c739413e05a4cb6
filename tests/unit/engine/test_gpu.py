"""engine.gpu's pure logic (summaries, J/token, the throttle cause) on samples recorded on an H200,
which GPU a server owns, the free-memory flag, and boot.log bounded after ready.

tests/fixtures/gpu/ (its README says where each file comes from): NVML samples that engine.gpu's
Sampler took on the H200 of docs/runs/h200-llamacpp/, with the figures the run computed from them
live. The throttled rep is real: a matmul loop in another process loaded the GPU during it
(docs/runs/h200-llamacpp/throttle.py) and NVML reported its power cap.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import gpu
from engine.method import stats
from engine.record.snapshot import fold_journal
from engine.record.state import RowState
from engine.run import boot, gpuwatch
from engine.servers import get_adapter
from tests.paths import FIXTURES
from tui.core.reps import rep_segs

GPU = FIXTURES / "gpu"
REPS = json.loads((GPU / "reps.json").read_text())


def samples(name: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (GPU / name).read_text().splitlines()]


def live(name: str) -> dict[str, Any]:
    """The summary the run computed live, as its receipt holds it (without the sample file name)."""
    return {k: v for k, v in REPS[name]["gpu"].items() if k != "file"}


@pytest.mark.parametrize("name", sorted(REPS))
def test_a_receipts_figures_are_its_samples_summarized_again(name: str) -> None:
    assert gpu.summarize(samples(name), REPS[name]["tokens"]) == live(name)


def test_j_per_token_is_the_energy_counters_change_over_the_generated_tokens() -> None:
    s, tokens = samples("throttle-c8-rep2.gpu.jsonl"), REPS["throttle-c8-rep2.gpu.jsonl"]["tokens"]
    joules = (s[-1]["energy_mj"] - s[0]["energy_mj"]) / 1000
    got = gpu.summarize(s, tokens)
    assert (got["energy_j"], got["energy_source"]) == (round(joules, 3), "counter")
    assert got["j_per_token"] == round(joules / tokens, 5) == 2.05112  # 682 W for 333 tok/s
    assert got["power_w"] == round(joules / (s[-1]["t"] - s[0]["t"]), 1) == 682.3
    # The steady rep of the same run: 146 W for 1,598 tok/s.
    assert live("throttle-c8-rep1.gpu.jsonl")["j_per_token"] == 0.09227


def test_without_an_energy_counter_the_sampled_power_stands_in() -> None:
    s = [{**x, "energy_mj": None} for x in samples("throttle-c8-rep2.gpu.jsonl")]
    got = gpu.summarize(s, 6561)
    assert got["energy_source"] == "power samples"
    # NVML's power reading is an average over its own window: 666 W sampled vs 682 W counted.
    assert got["power_w"] == pytest.approx(682.3, rel=0.03)


def test_a_rep_on_a_power_capped_gpu_is_throttled() -> None:
    reps = [live(f"throttle-c8-rep{n}.gpu.jsonl") for n in (1, 2, 3)]
    assert gpu.throttle_cause(reps[1], [reps[0], reps[2]]) == (
        "sw power cap in 98% of samples (other reps 6%); SM clock 1695 MHz vs 1980 MHz in the other reps")
    headers = [{"gpu": r} for r in reps]
    assert str(stats.rep_cause(headers, 1)).startswith("rep 2: sw power cap in 98% of samples")
    # Rep 3 caught the loop's last batch (12 % of its samples capped) but ran at full speed and
    # full clock: taken alone against rep 1 it reads as capped; against both others it is not.
    assert gpu.throttle_cause(reps[2], [reps[0], reps[1]]) is None
    assert stats.gpu_figures(headers) == {"j_per_token": 0.09595, "power_w": 158.4, "sm_mhz_min": 1440,
                                          "throttled": True}


def test_a_slow_rep_on_a_steady_gpu_has_no_gpu_cause() -> None:
    """The run's control C8 went void on server-side variance (805 vs 949 and 1,039 tok/s): the GPU
    held 1980 MHz at 141 W with no clock-event reason, so it stays a leak, not a throttle."""
    reps = [live(f"steady-c8-rep{n}.gpu.jsonl") for n in (1, 2, 3)]
    assert [REPS[f"steady-c8-rep{n}.gpu.jsonl"]["agg_tok_s"] for n in (1, 2, 3)] == [
        948.74, 805.55, 1039.282]
    assert gpu.throttle_cause(reps[1], [reps[0], reps[2]]) is None
    assert stats.rep_cause([{"gpu": r} for r in reps], 1) is None
    assert stats.gpu_figures([{"gpu": r} for r in reps])["throttled"] is False


def test_an_idle_gpu_is_not_throttled_and_a_matmul_loop_hits_the_power_cap() -> None:
    idle = gpu.summarize(samples("probe-idle.jsonl"), 0)
    assert (idle["reasons"], idle["throttle"], idle["sm_mhz_min"]) == ({"idle": 1.0}, [], 345)
    assert idle["j_per_token"] is None and 70 < idle["power_w"] < 130
    busy = gpu.summarize(samples("probe-busy.jsonl"), 0)
    assert busy["throttle"] == ["sw power cap"] and busy["power_w"] > 600
    assert busy["sm_mhz_min"] < 1980 and busy["util_mean"] > 90
    # No telemetry on either side: no cause, no figures.
    assert gpu.throttle_cause("no NVIDIA GPU (nvidia-ml-py is not installed)", [busy]) is None
    assert gpu.per_rep("no NVIDIA GPU") is None


def test_reason_bits_and_which_are_throttles() -> None:
    assert gpu.reason_names(0x1 | 0x4 | 0x40) == ["idle", "sw power cap", "hw thermal"]
    throttles = {"sw power cap", "hw slowdown", "sw thermal", "hw thermal", "hw power brake",
                 "board limit", "reliability"}
    assert throttles == gpu.THROTTLE


def test_the_console_shows_each_reps_power_and_clock_beside_its_tok_s() -> None:
    state = fold_journal(GPU / "journal.jsonl")  # the H200 run's
    assert rep_segs(state.rows["s1-control/prose/c1"], 3) == [
        ("758.0 146W/1980MHz", ""), ("734.4 146W/1980MHz", ""), ("768.0 160W/1980MHz", "")]
    throttled = RowState("s1", "control", "prose", 8, attempt=1, reps={1: {1: 1598.2, 2: 333.6}},
                         gpu={1: {2: {"power_w": 682.3, "sm_mhz_min": 1440, "throttle": ["sw power cap"]}}})
    assert rep_segs(throttled, 3) == [("1598", ""), ("333.6 682W/1440MHz", "warning")]


class Reader:
    """A stand-in for gpu.Nvml with four GPUs; UUIDs GPU-a..GPU-d."""

    def count(self) -> int:
        return 4

    def index_of(self, uuid: str) -> int | None:
        return {"GPU-a": 0, "GPU-b": 1, "GPU-c": 2, "GPU-d": 3}.get(uuid)


@pytest.mark.parametrize(("selection", "env", "indices", "note"), [
    (None, {}, [0, 1, 2, 3], "every GPU on the host"),
    ("all", {"CUDA_VISIBLE_DEVICES": "1"}, [0, 1, 2, 3], "every GPU on the host"),
    (None, {"CUDA_VISIBLE_DEVICES": "2, 0"}, [2, 0], "CUDA_VISIBLE_DEVICES=2, 0"),
    (None, {"CUDA_VISIBLE_DEVICES": "GPU-d,GPU-x"}, [3], "CUDA_VISIBLE_DEVICES=GPU-d,GPU-x"),
    (2, {}, [0, 1], "the first 2 GPUs"),
    (("1", 3), {}, [1, 3], "gpus 1,3"),
])
def test_the_gpus_a_server_owns(selection: Any, env: dict[str, str], indices: list[int], note: str) -> None:
    got = gpu.select(Reader(), selection, env)
    assert (got.indices, got.note) == (indices, note)


def test_devices_no_gpu_has_are_said() -> None:
    got = gpu.select(Reader(), None, {"CUDA_VISIBLE_DEVICES": "7"})
    assert not got and got.none == ("no NVIDIA GPU owned by the server (CUDA_VISIBLE_DEVICES=7 names "
                                    "none of NVML's 4)")
    assert not gpu.select(Reader(), None, {"CUDA_VISIBLE_DEVICES": ""})


def test_free_memory_within_the_slack_is_equal_and_less_is_flagged() -> None:
    diff = {"changed": {"gpu.free_mib": [143100, 143156], "kv.cells": [1, 2]}, "equal": ["a"],
            "only_here": {}, "only_there": {}}
    same = gpuwatch.flag_free(diff)
    assert same["changed"] == {"kv.cells": [1, 2]} and same["equal"] == ["a", "gpu.free_mib"]
    assert "flagged" not in same
    less = gpuwatch.flag_free({**diff, "changed": {"gpu.free_mib": [140000, 143156]}})
    assert less["flagged"] == {"gpu.free_mib": "booted with 3,156 MiB less free GPU memory than the "
                                               "control (140,000 vs 143,156 MiB)"}
    more = gpuwatch.flag_free({**diff, "changed": {"gpu.free_mib": [143956, 143156]}})
    assert "flagged" not in more and more["changed"] == {}  # more free than the control: fine


# ------------------------------------------------------------------ boot.log after ready


class Stand:
    """A stand-in server (only its log and liveness; not a fake vLLM): a recorded vLLM boot,
    then serving chatter with periodic metric lines and an error among it."""

    base_url = "http://127.0.0.1:9"
    identity: dict[str, object] = {"runtime": "stand-in"}

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines

    def lines(self) -> Iterator[str]:
        yield from self._lines

    def alive(self) -> bool:
        return False

    def exit_code(self) -> int | None:
        return 0

    def stop(self) -> None:
        pass


def test_after_ready_boot_log_keeps_its_budget_then_what_ruler_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boot, "AFTER_READY_BYTES", 2000)
    adapter = get_adapter("vllm")
    booted = (FIXTURES / "logs" / "vllm_0330_boot.log").read_text().splitlines()
    ready = next(i for i, line in enumerate(booted) if adapter.is_ready_line(line))
    boot_part = booted[:ready + 1]
    periodic = ("(APIServer pid=1) INFO 09-15 21:13:20 [loggers.py:123] Engine 000: Avg prompt "
                "throughput: 0.0 tokens/s, Avg generation throughput: 812.4 tokens/s, Running: 8 reqs")
    error = ("(APIServer pid=1) ERROR 09-15 21:13:21 [serving.py:1] RuntimeError: CUDA error: an "
             "illegal memory access")
    chatter = [f'(APIServer pid=1) INFO:     127.0.0.1:{40000 + i} - "POST /v1/chat/completions '
               'HTTP/1.1" 200 OK' for i in range(3000)]
    serving = chatter[:1500] + [periodic, error] + chatter[1500:] + [periodic]
    path = tmp_path / "boot.log"
    pump = boot.LogPump(Stand(boot_part + serving), adapter, path, lambda f: None)
    pump.start()
    pump.join(10)
    kept = path.read_text().splitlines()
    assert kept[:len(boot_part)] == boot_part  # whole up to ready
    after = kept[len(boot_part):]
    note = next(i for i, x in enumerate(after) if x.startswith("[ruler] boot.log: the first 1 KiB"))
    assert after[:note] == serving[:note] and sum(len(x) + 1 for x in after[:note]) <= 2000
    footer = next(i for i, x in enumerate(after) if x.startswith("[ruler] boot.log: 2,"))
    assert after[note + 1:footer] == [periodic, error, periodic]
    assert after[footer + 1:] == chatter[-boot.TAIL_LINES:]
    assert after[footer] == (f"[ruler] boot.log: {3000 - note:,} lines "
                             f"({sum(len(x) + 1 for x in chatter[note:]) / 1e6:.1f} MB) after ready "
                             f"left out; the last {boot.TAIL_LINES} of them:")
    assert pump.tail_text(1) == periodic  # failure.txt still sees every line


@pytest.mark.parametrize(("server", "log"), [("vllm", "vllm_issue_lines.log"), ("vllm", "vllm_0330_boot.log"),
                                             ("sglang", "sglang_issue_lines.log"),
                                             ("sglang", "sglang_0523_glm_boot.log")])
def test_every_periodic_line_on_record_holds_a_mark(server: str, log: str) -> None:
    """The pump parses a line after ready only when it holds one of the adapter's marks: a periodic
    line without one would be left out of boot.log."""
    adapter = get_adapter(server)
    lines = (FIXTURES / "logs" / log).read_text().splitlines()
    periodic = [x for x in lines if any(f.key.startswith("periodic.") for f in adapter.parse_line(x))]
    assert periodic and all(adapter.periodic(x) for x in periodic)
    start = time.perf_counter()
    for _ in range(100):
        adapter.periodic('INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    assert time.perf_counter() - start < 0.05  # a line without a mark is not parsed
