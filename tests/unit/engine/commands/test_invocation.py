"""A command printed for the operator names ruler so that it works as typed: ``ruler`` on the PATH,
else this environment's script by a path a shell runs (``make demo`` leaves it in ``.venv/bin``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.commands.invocation import ruler_command


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A .venv/bin with its python and its ruler script, the interpreter this process runs as."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "ruler"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr("sys.executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    return bin_dir


def test_off_the_path_the_script_is_named_by_a_path_a_shell_runs(
        venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(venv.parent.parent)  # where make demo ran
    assert ruler_command() == ".venv/bin/ruler"
    monkeypatch.chdir(venv)  # "ruler" alone would be looked up on the PATH, and not found
    assert ruler_command() == "./ruler"
    beside = venv.parent.parent / "results"
    beside.mkdir()
    monkeypatch.chdir(beside)
    assert ruler_command() == str(venv / "ruler")  # not up and back down: the whole path


def test_on_the_path_it_is_ruler(venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(venv))
    monkeypatch.chdir("/")
    assert ruler_command() == "ruler"
