"""A throttle on cue, on the H200: the control at C8 while, during rep 2 of its first attempt, a
bf16 matmul loop in another process loads the same GPU (fault injection: nothing else makes a
GPU hit its power cap during one chosen rep). The loop starts warm (torch loaded, memory taken
before the session's first boot) and runs while a flag file exists; this script sets the flag
when the journal says rep 1 is done and clears it when rep 2 is. ruler should journal rep 2 as
"throttled" (not a leaked autotune pass), void the row and rerun it.

    LLAMA_SERVER=... SMOL_GGUF=... PYTHONPATH=. python3 docs/runs/h200-llamacpp/throttle.py RESULTS
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

CAMPAIGN = """\
name: h200-throttle
server: llamacpp
runtime: process
process: {command: ["${LLAMA_SERVER}"]}
control:
  model: ${SMOL_GGUF}
  args: {-m: "${model}", -ngl: 99, -np: 64, -c: 65536, -fa: "on", --metrics: true}
windows: []
sessions: {s1: []}
workload:
  classes: {prose: {file: PROMPTS}}
  concurrency: [8]
  reps: 3
  requests_per_rep: 32
  max_tokens: 256
  sampling: {temperature: 0, seed: 1234}
quality: {enabled: false}
leak: {min_concurrency: 8, spread: 0.10, max_reruns: 1}
timeouts: {boot: 120, request: 120, window: 400}
"""

HOG = """
import os, sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("hog ready", flush=True)
flag = sys.argv[1]
while True:
    if os.path.exists(flag):
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    else:
        time.sleep(0.005)
"""


def main() -> int:
    results = Path(sys.argv[1])
    root = Path(__file__).resolve().parents[3]
    spec = results.parent / "h200-throttle.yaml"
    results.mkdir(parents=True, exist_ok=True)
    spec.write_text(CAMPAIGN.replace("PROMPTS", str(root / "campaigns" / "prompts" / "prose.txt")))
    flag = results.parent / "hog.flag"
    flag.unlink(missing_ok=True)
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(flag)], stdout=subprocess.PIPE, text=True)
    assert hog.stdout is not None and hog.stdout.readline().strip() == "hog ready"
    run = subprocess.Popen([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                            "--runtime", "process", "--results-dir", str(results)])
    seen = 0
    try:
        while run.poll() is None:
            time.sleep(0.05)
            journals = list(results.glob("*/journal.jsonl"))
            if not journals:
                continue
            lines = journals[0].read_text().splitlines()
            for line in lines[seen:]:
                e = json.loads(line)
                if e["kind"] == "rep_done" and e["attempt"] == 1 and e["rep"] == 1:
                    flag.touch()
                    print("throttle.py: matmul loop on (rep 2)", flush=True)
                if e["kind"] == "rep_done" and e["attempt"] == 1 and e["rep"] == 2:
                    flag.unlink(missing_ok=True)
                    print("throttle.py: matmul loop off", flush=True)
            seen = len(lines)
    finally:
        flag.unlink(missing_ok=True)
        hog.kill()
    return run.wait()


if __name__ == "__main__":
    sys.exit(main())
