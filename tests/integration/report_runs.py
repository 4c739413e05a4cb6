"""The two small real runs of the testbed that ``ruler report`` and ``ruler compare`` are checked
on (tests/integration/test_report.py, test_compare.py), built once per test session by the
``run_a`` and ``run_b`` fixtures (conftest.py), and what the tests read back from them.

- run A, through the Runner with [Measurement(), Quality()]: a control with a Q2_K drafter, a
  lossless window (draft block 5) and a window rejected at boot (q8_0 V cache with flash attention
  off); two sessions, so the control drifts, the noise between boots declared (nothing booted
  twice in a session); a leak policy with a tiny spread threshold from C2,
  so the C2 rows are void for real, after a rewarm and a rerun each;
- run B, measurement only (no quality receipts, like an older run), A's workload: one class, the
  drafter window renamed but with the same axis, so compare has to match it by axis.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from engine.method.stats import LeakPolicy
from engine.run.measure import recompute_row

# The control both runs share: a Q8_0 target with a Q2_K drafter, one server thread.
HEAD = """\
name: {name}
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q8_0.gguf
  artifacts:
    drafter: ${{testbed.models}}/SmolLM2-135M-Instruct.Q2_K.gguf
  args:
    -m: ${{model}}
    -md: ${{artifacts.drafter}}
    --spec-type: draft-simple
    --spec-draft-n-max: 7
    -c: 2048
    -np: 2
    -t: 1
    -fa: "off"
    --metrics: true
timeouts: {{boot: 120, request: 120}}
# One control boot a session and one window each: nothing measures the noise between boots, so
# the calls rest on a declared value, and say so.
verdict: {{boot_noise: 0.05}}
"""
SHAPES = """\
  concurrency: [1, 2]
  reps: 2
  requests_per_rep: 2
  max_tokens: 12
  sampling: {temperature: 0, seed: 1234}
  knobs:
    chat_template_kwargs: {enable_thinking: false}
"""
PROSE = 'prose: {prompts: ["Write one sentence about the sea."]}'

RUN_A = HEAD.format(name="report-a") + f"""\
description: report test run A
windows:
  - name: block5
    axis: draft block 5
    change:
      args: {{--spec-draft-n-max: 5}}
  - name: qv8
    axis: q8_0 V cache without flash attention
    change:
      args: {{--cache-type-v: q8_0}}
sessions:
  s1: [block5]
  s2: [qv8]
control_position: first
workload:
  classes:
    {PROSE}
    code: {{prompts: ["Write a Python function that adds two numbers."]}}
{SHAPES}quality:
  greedy: {{n: 2, max_tokens: 12}}
  teacher_forced: {{top_k: 10, positions: 3}}
leak:
  min_concurrency: 2
  spread: 0.0001
  max_reruns: 1
"""

RUN_B = HEAD.format(name="report-b") + f"""\
windows:
  - name: draft5
    axis: draft block 5
    change:
      args: {{--spec-draft-n-max: 5}}
sessions:
  s1: [draft5]
control_position: first
workload:
  classes:
    {PROSE}
{SHAPES}quality: {{enabled: false}}
"""
POLICY_A = LeakPolicy(2, 0.0001, 1)
POLICY_B = LeakPolicy()

def real_run(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run through the Runner (the way engine.commands.launch runs the engine)."""
    from engine.campaign.load import load_campaign
    from engine.commands.launch import prepare
    from engine.quality import Quality
    from engine.record.results import ENGINE_JSON
    from engine.run.measure import Measurement
    from engine.run.runner import Runner

    tmp = tmp_path_factory.mktemp(f"report-{name}")
    spec = tmp / f"report-{name}.yaml"
    spec.write_text(RUN_A if name == "a" else RUN_B)
    run = prepare(str(spec), str(tmp / "results"), "process")
    info = json.loads((run / ENGINE_JSON).read_text())
    phases = [Measurement(), Quality()] if name == "a" else [Measurement()]
    runner = Runner(load_campaign(spec), run, info["runtime"], info["variables"], None, phases)
    assert runner.run() == "finished"
    return run


def csv_rows(run: Path) -> dict[tuple[str, str, str, int], dict[str, str]]:
    return {(r["session"], r["window"], r["class"], int(r["concurrency"])): r
            for r in csv.DictReader((run / "throughput.csv").open())}


def recomputed(run: Path, key: tuple[str, str, str, int], policy: LeakPolicy) -> dict[str, Any]:
    row = csv_rows(run)[key]
    return {**recompute_row(run, row["source"], key[3], policy), "status": row["status"]}
