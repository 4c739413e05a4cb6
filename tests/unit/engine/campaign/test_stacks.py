"""A window on another stack (``server:``): its schema, its checks at file:line:col, the server it
boots and the boot facts it is diffed on against the control (docs/stacks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.campaign.dryrun import describe
from engine.campaign.launch import WindowStart, plan_launch
from engine.campaign.load import SpecError, load_campaign
from engine.campaign.spec import Campaign
from engine.servers import get_adapter
from engine.servers.logs import COMMON_FACTS, BootFacts, stack_diff
from tests.paths import FIXTURES

BASE = """\
name: demo
server: llamacpp
runtime: process
process:
  command: [llama-server]
control:
  model: m.gguf
  args:
    -m: ${model}
    -np: 2
windows:
  - name: vllm
    server:
      adapter: vllm
      command: [python, -m, vllm.entrypoints.openai.api_server]
      model: /models/smol
      env: {VLLM_CPU_KVCACHE_SPACE: 1}
      args:
        --model: ${model}
        --max-num-seqs: 2
        --enforce-eager: true
        --dtype: null
sessions:
  s1: [vllm]
workload:
  classes:
    prose: {prompts: [hello]}
  concurrency: [1]
"""


def load(tmp_path: Path, text: str) -> Campaign:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_campaign(path)


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(tmp_path, text)
    return [str(p).removeprefix(f"{tmp_path / 'c.yaml'}:") for p in info.value.problems]


def test_a_window_on_another_stack_boots_its_own_server(tmp_path: Path) -> None:
    c = load(tmp_path, BASE)
    w = c.window("vllm")
    assert w.axes() == ["server"] and w.lossy  # lossy by nature, without saying so
    assert c.server_for("vllm") == "vllm" and c.server_for("control") == "llamacpp"
    assert c.stack_windows() == ["vllm"]
    config = c.config_for("vllm")
    # Nothing of the control's server is inherited: not its model, flags or command.
    assert config.model == "/models/smol" and config.server == "vllm" and config.own_stack
    assert config.args == {"--model": "${model}", "--max-num-seqs": 2, "--enforce-eager": True}
    plan = plan_launch(c, get_adapter("vllm"), WindowStart("process", "r.1", "s1", "vllm"))
    assert plan.argv[:5] == ["python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                             "/models/smol"]
    assert "-np" not in plan.argv and "llama-server" not in plan.argv
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    control = plan_launch(c, get_adapter("llamacpp"), WindowStart("process", "r.1", "s1", "control"))
    assert control.argv[:3] == ["llama-server", "-m", "m.gguf"]


def test_a_stack_window_in_docker_takes_its_own_image_and_port(tmp_path: Path) -> None:
    text = BASE.replace("runtime: process", "runtime: docker\ndocker: {image: llama:1, "
                                            "container_port: 8080}").replace(
        "      adapter: vllm\n", "      adapter: vllm\n      image: vllm:cpu\n")
    c = load(tmp_path, text)
    plan = plan_launch(c, get_adapter("vllm"), WindowStart("docker", "r.1", "s1", "vllm"))
    assert plan.image == "vllm:cpu"
    assert plan.container_port == get_adapter("vllm").default_container_port
    assert plan.argv[0] == "python"  # its own command, never the control's docker.command


@pytest.mark.parametrize(("edit", "expected"), [
    (("    server:\n", "    lossy: false\n    server:\n"),
     "13:12: window 'vllm' is on another stack (server: vllm): another engine's numerics make it "
     "lossy by nature; leave lossy out or set it true"),
    (("      command: [python, -m, vllm.entrypoints.openai.api_server]\n", ""),
     "13:5: window 'vllm' is on another stack: its server needs its own command for runtime "
     "process (the campaign's process.command start the control's stack)"),
    (("    server:\n", "    change: {args: {-np: 4}}\n    server:\n"),
     "13:5: window 'vllm' changes 2 axes (server, args -np); set multi_axis: true to allow it"),
    (("      adapter: vllm\n", "      adapter: tgi\n"),
     "14:16: windows[0].server.adapter: expected one of 'sglang', 'vllm' or 'llamacpp', got 'tgi'"),
])
def test_a_stack_window_that_cannot_run_is_refused_where_it_is_written(
        tmp_path: Path, edit: tuple[str, str], expected: str) -> None:
    assert BASE.count(edit[0]) == 1
    found = problems(tmp_path, BASE.replace(*edit))
    assert expected in found, found


def test_attach_cannot_boot_another_stack(tmp_path: Path) -> None:
    text = BASE.replace("runtime: process", "runtime: attach\nattach: {url: 'http://h:1'}")
    found = problems(tmp_path, text)
    assert any("runtime attach starts no server, so it cannot boot another stack" in p
               for p in found), found


def facts(server: str, log: str) -> BootFacts:
    out = BootFacts()
    adapter = get_adapter(server)
    for line in (FIXTURES / "logs" / log).read_text(errors="replace").splitlines():
        out.feed(adapter, line)
    return out


def test_common_boot_facts_from_each_servers_own_log() -> None:
    llama = get_adapter("llamacpp").common_facts(
        {k: f.value for k, f in facts("llamacpp", "llamacpp_draft_q2k_chat.log").facts.items()})
    vllm = get_adapter("vllm").common_facts(
        {k: f.value for k, f in facts("vllm", "vllm_cpu_0320_boot.log").facts.items()})
    sglang = get_adapter("sglang").common_facts(
        {k: f.value for k, f in facts("sglang", "sglang_0523_glm_boot.log").facts.items()})
    assert llama == {"kv.tokens": 2048, "kv.dtype": "f16", "slots": 2, "context": 1024,
                     "dtype": "Q4_1", "spec.method": "draft-simple", "spec.depth": 7}
    # vLLM's log names no max_num_seqs: no slots
    assert vllm == {"kv.tokens": 46592, "context": 2048, "dtype": "bfloat16",
                    "kv.dtype": "bfloat16", "spec.method": "ngram", "spec.depth": 3}
    assert sglang == {"kv.tokens": 577024, "kv.dtype": "bfloat16", "slots": 48, "context": 202752,
                      "spec.method": "dflash", "spec.depth": 7}
    assert set(llama) | set(vllm) | set(sglang) <= set(COMMON_FACTS)


def test_a_stack_window_is_diffed_on_common_names_the_rest_per_stack() -> None:
    mine, control = facts("vllm", "vllm_cpu_0320_boot.log"), facts("llamacpp", "llamacpp_draft_q2k_chat.log")
    diff = stack_diff(mine, get_adapter("vllm"), control, get_adapter("llamacpp"), ("vllm", "llamacpp"))
    assert diff["changed"]["spec.method"] == ["ngram", "draft-simple"]
    assert diff["changed"]["kv.tokens"] == [46592, 2048]
    assert diff["equal"] == []
    assert diff["only_there"] == {"slots": 2}
    # Same key, different servers: never diffed, each listed under its stack.
    assert diff["per_stack"]["window"]["kv.tokens"] == 46592
    assert diff["per_stack"]["control"]["slots.n"] == 2
    assert diff["stacks"] == {"window": "vllm", "control": "llamacpp"}


def test_an_ngram_draft_length_is_the_speculative_depth() -> None:
    """llama.cpp's n-gram speculation logs its lookup and draft lengths on a line of their own
    (a real boot of demo-stacks' control); the draft length is the depth vLLM's num_spec_tokens
    is diffed against."""
    boot = facts("llamacpp", "llamacpp_ngram_simple.log")
    assert {k: boot.facts[k].value for k in ("spec.ngram_size_n", "spec.ngram_size_m",
                                              "spec.ngram_min_hits")} == {
        "spec.ngram_size_n": 2, "spec.ngram_size_m": 3, "spec.ngram_min_hits": 1}
    common = get_adapter("llamacpp").common_facts({k: f.value for k, f in boot.facts.items()})
    assert common == {"kv.tokens": 4096, "kv.dtype": "f16", "slots": 2, "context": 2048,
                      "dtype": "Q4_1", "spec.method": "ngram-simple", "spec.depth": 3}


def test_the_dry_run_shows_the_windows_own_server_and_the_parity_it_runs(tmp_path: Path) -> None:
    text = BASE.replace("  concurrency: [1]\n", "  concurrency: [1]\n  exact_output: true\n  max_tokens: 8\n")
    lines = describe(load(tmp_path, text), {}, "process", {})
    at = next(i for i, line in enumerate(lines) if "on another stack: vllm" in line)
    assert "the ids compared; a class that differs has its deltas withheld" in lines[at]
    assert lines[at + 1] == ('      its requests: the same sampling; exactly 8 tokens '
                             '({"ignore_eos": true, "min_tokens": 8})')
    assert lines[at + 2].startswith("      VLLM_CPU_KVCACHE_SPACE=1 python -m "
                                    "vllm.entrypoints.openai.api_server --model /models/smol")
