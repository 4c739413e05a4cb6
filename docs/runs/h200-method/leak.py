"""A leak on cue, on the H200: the control at C8 while, during rep 2 of its first attempt, its
llama-server is stopped (SIGSTOP) for STALL seconds and let go (SIGCONT), as a server stuck in an
autotune pass would stall (fault injection: nothing else makes one rep of a real server leak on
cue). The GPU idles meanwhile, so its telemetry explains nothing: ruler should find rep 2
leak-shaped (alone, far below two reps that agree), void the row, rewarm and rerun it.

    LLAMA_SERVER=... SMOL_GGUF=... PYTHONPATH=. python3 docs/runs/h200-method/leak.py RESULTS
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STALL = float(os.environ.get("STALL", "1.5"))  # seconds; a rep lasts about 4

CAMPAIGN = """\
name: h200-leak
server: llamacpp
runtime: process
process: {command: ["${LLAMA_SERVER}"]}
control:
  model: ${SMOL_GGUF}
  args: {-m: "${model}", -ngl: 99, -np: 8, -c: 8192, -fa: "on", --metrics: true}
windows: []
sessions: {s1: []}
workload:
  classes: {prose: {file: PROMPTS}}
  concurrency: [8]
  reps: 3
  rep_seconds: 4
  max_tokens: 128
  sampling: {temperature: 0, seed: 1234}
quality: {enabled: false}
leak: {min_concurrency: 8, spread: 0.10, max_reruns: 1}
timeouts: {boot: 120, request: 120, window: 300}
"""


def main() -> int:
    results = Path(sys.argv[1])
    root = Path(__file__).resolve().parents[3]
    spec = results.parent / "h200-leak.yaml"
    results.mkdir(parents=True, exist_ok=True)
    spec.write_text(CAMPAIGN.replace("PROMPTS", str(root / "campaigns" / "prompts" / "prose.txt")))
    run = subprocess.Popen([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                            "--runtime", "process", "--results-dir", str(results)])
    seen, pid, stalled = 0, None, False
    while run.poll() is None:
        time.sleep(0.05)
        journals = list(results.glob("*/journal.jsonl"))
        if not journals:
            continue
        lines = journals[0].read_text().splitlines()
        for line in lines[seen:]:
            e = json.loads(line)
            if e["kind"] == "server_started" and isinstance(e.get("pid"), int):
                pid = e["pid"]
            if (e["kind"] == "rep_done" and e["attempt"] == 1 and e["rep"] == 1 and pid
                    and not stalled):
                time.sleep(1.0)  # inside rep 2, all eight requests in flight
                os.killpg(pid, signal.SIGSTOP)
                print(f"leak.py: server {pid} stopped for {STALL} s (rep 2)", flush=True)
                time.sleep(STALL)
                os.killpg(pid, signal.SIGCONT)
                stalled = True
        seen = len(lines)
    return run.wait()


if __name__ == "__main__":
    sys.exit(main())
