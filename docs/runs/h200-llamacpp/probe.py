"""NVML through engine.gpu on the H200 machine, before the campaign: the facts env.json records, the
owned GPUs, their memory and holders, and samples at 10 Hz of an idle GPU and of a busy one (a bf16
matmul loop in this process, which then holds memory: a holder). Writes nvml.json and
samples-{idle,busy}.jsonl into the directory given (the recorded samples the unit tests read).

    PYTHONPATH=. python3 docs/runs/h200-llamacpp/probe.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from engine import gpu


def sample(gpus: gpu.Gpus, seconds: float, work: object = None) -> list[dict[str, object]]:
    sampler = gpu.Sampler(gpus).start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if work is None:
            time.sleep(0.05)
        else:
            work()  # type: ignore[operator]
    return sampler.stop()


def main() -> None:
    out = Path(sys.argv[1])
    print(gpu.nvml()[1] or "NVML ok")
    gpus = gpu.owned(None, {})
    report: dict[str, object] = {"env": gpu.env_facts(), "owned": gpus.indices, "note": gpus.note,
                                 "memory_idle": gpus.memory(), "holders_idle": gpus.holders()}
    idle = sample(gpus, 3.0)
    import torch  # the machine's own, for a load to sample

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def work() -> None:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()

    work()
    busy = sample(gpus, 6.0, work)
    report |= {"memory_busy": gpus.memory(), "holders_busy": gpus.holders(),
               "idle": gpu.summarize(idle, 0), "busy": gpu.summarize(busy, 0)}
    for name, samples in (("idle", idle), ("busy", busy)):
        (out / f"samples-{name}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    (out / "nvml.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: report[k] for k in ("owned", "note", "idle", "busy", "holders_busy")},
                     default=str))


if __name__ == "__main__":
    main()
