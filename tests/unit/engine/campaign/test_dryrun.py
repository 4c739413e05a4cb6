"""``ruler run FILE --dry-run``: the GLM campaign's plan, compared exactly with a snapshot.

The environment is fixed (HOME, no HF_TOKEN) and the testbed cache is not consulted, so the
output is the same on every machine. Regenerate after an intended change with
``RULER_UPDATE_SNAPSHOTS=1 pytest tests/unit/engine/campaign/test_dryrun.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.campaign.dryrun import dry_run
from engine.campaign.machines import Timeouts
from engine.commands.dryrun import cmd_dry_run
from engine.commands.validate import cmd_validate
from tests.paths import FIXTURES, REPO

ROOT = REPO
GLM = ROOT / "campaigns" / "glm53-flash-round3.yaml"
SNAPSHOT = FIXTURES / "dryrun" / "glm53-flash-round3.txt"
ENV = {"HOME": "/home/operator"}


def test_glm_campaign_validates(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_validate(str(GLM)) == 0
    assert "OK: glm53-flash-round3: 8 windows in 2 sessions" in capsys.readouterr().out


def test_glm_dry_run_matches_snapshot() -> None:
    text = dry_run(str(GLM), None, environ=ENV, testbed={})
    if os.environ.get("RULER_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text()


def test_dry_run_never_shows_a_secret_value() -> None:
    text = dry_run(str(GLM), None, environ={**ENV, "HF_TOKEN": "hf_secretvalue123"}, testbed={})
    assert "hf_secretvalue123" not in text
    assert "-e HF_TOKEN \\" in text and "(set on this host)" in text


def test_testbed_variables_stay_unresolved_without_a_cache() -> None:
    text = dry_run(str(ROOT / "campaigns" / "demo-smollm2.yaml"), "process", environ=ENV, testbed={})
    assert "${testbed.llama_server}" in text and "--port <free port>" in text


def test_a_cached_testbed_resolves_its_image_with_its_model_paths(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``${testbed.image}`` stayed unresolved where the model paths were resolved: the cache made
    by `ruler testbed` names both (its build, the image it imports from it: whether that exists
    asks Docker, which the dry run never does)."""
    from engine import testbed

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = tmp_path / "ruler" / f"llama.cpp-{testbed.LLAMA_CPP_PYTHON}" / "bin"
    models = tmp_path / "ruler" / "models"
    for d in (built, models):
        d.mkdir(parents=True)
        (d / "manifest.json").write_text("{}")
    (built / "llama-server").write_text("")
    # The Docker runtime named: the campaign's auto would take a local process where no daemon
    # answers, and that runs no image.
    text = dry_run(str(ROOT / "campaigns" / "demo-smollm2.yaml"), "docker", environ=ENV,
                   testbed=testbed.cached_variables())
    assert "${testbed.image}" not in text  # a change as written keeps its ${testbed.models}
    assert f"{testbed.IMAGE_REPO}:{testbed.LLAMA_CPP_PYTHON} \\" in text and f"{models}/SmolLM2" in text


def test_cmd_dry_run_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_dry_run(str(tmp_path / "missing.yaml"), None) == 2
    assert "cannot read campaign file" in capsys.readouterr().err


def test_a_fine_leak_spread_prints_with_its_digits(tmp_path: Path) -> None:
    """`leak.spread: 0.005` printed as ">0%": a threshold every row would seem to break."""
    text = (ROOT / "campaigns" / "demo-smollm2.yaml").read_text()
    path = tmp_path / "demo.yaml"
    path.write_text(text.replace("  spread: 0.20 ", "  spread: 0.005"))
    (tmp_path / "prompts").symlink_to(ROOT / "campaigns" / "prompts")
    out = dry_run(str(path), "process", environ=ENV, testbed={})
    assert ("leak: at C>=4 a rep alone below the others past the run's noise bar (at least 0.5%) "
            "voids the row, up to 1 reruns") in out


def test_cmd_dry_run_bad_variable_prompt_file_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A ${...} prompt file only the run resolves: the dry run reads it too, and says which."""
    (tmp_path / "p.txt").write_bytes(b"\xff\n")
    text = (ROOT / "campaigns" / "demo-smollm2.yaml").read_text()
    path = tmp_path / "demo.yaml"
    path.write_text(text.replace("{file: prompts/prose.txt}", '{file: "${PROMPTS}/p.txt"}'))
    (tmp_path / "prompts").symlink_to(ROOT / "campaigns" / "prompts")
    monkeypatch.setenv("PROMPTS", str(tmp_path))
    assert cmd_dry_run(str(path), "process") == 2
    assert capsys.readouterr().err == (
        f"{path}: prompt file {tmp_path}/p.txt:1: not UTF-8 text (byte 0xff at column 1)\n")


def test_reps_sized_by_time_print_their_seconds_not_the_request_cap(tmp_path: Path) -> None:
    text = (ROOT / "campaigns" / "demo-smollm2.yaml").read_text()
    path = tmp_path / "demo.yaml"
    path.write_text(text.replace("  requests_per_rep: 4 ", "  rep_seconds: 20 ", 1))
    (tmp_path / "prompts").symlink_to(ROOT / "campaigns" / "prompts")
    out = dry_run(str(path), "process", environ=ENV, testbed={})
    assert "requests per pass: C1 20 s, C4 20 s;" in out, out


def test_the_connect_timeout_is_shown_for_a_place_over_ssh(tmp_path: Path) -> None:
    text = (ROOT / "campaigns" / "demo-smollm2.yaml").read_text()
    path = tmp_path / "demo.yaml"
    (tmp_path / "prompts").symlink_to(ROOT / "campaigns" / "prompts")
    path.write_text(text)
    assert "connect " not in dry_run(str(path), "docker", environ=ENV, testbed={})
    path.write_text(text + "places:\n  - {name: box, docker_host: 'ssh://ruler@10.0.0.7'}\n")
    out = dry_run(str(path), "docker", environ=ENV, testbed={})
    assert f", connect {Timeouts().connect:g} s (a place's host over ssh)" in out
