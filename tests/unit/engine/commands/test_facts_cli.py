"""``ruler facts``: boot facts from saved logs of any of the three servers, as a table or JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.commands.facts import cmd_facts
from tests.paths import FIXTURES

LOGS = FIXTURES / "logs"


def test_json_numbers_are_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_facts("vllm", str(LOGS / "vllm_0330_boot.log"), as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["facts"]["kv.tokens"] == 2042016  # printed "2,042,016 tokens"
    assert data["facts"]["kv.max_concurrency"] == 10.07
    assert data["ready"] is True and data["errors"] == []
    assert data["lines"]["kv.tokens"].endswith("Maximum concurrency for 202,752 tokens per request: 10.07x")
    assert data["unparsed"] == ["Paged scratch for drafter: 1.20 GiB reserved across 4 pools"]
    assert data["periodic"][0]["accept_len"] == 3.12
    assert not any(k.startswith("periodic.") for k in data["facts"])  # not part of a boot diff


def test_table_for_a_rejected_sglang_boot(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_facts("sglang", str(LOGS / "sglang_replayssm_reject.log"), as_json=False) == 0
    out = capsys.readouterr().out
    assert "never ready" in out
    assert "exit.error.ValueError" in out
    assert "ValueError: --enable-linear-replayssm-spec with DSPARK/DFLASH requires a KDA" in out  # verbatim


def test_table_for_a_glm_boot_shows_pool_and_acceptance(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_facts("sglang", str(LOGS / "sglang_0523_glm_boot.log"), as_json=False) == 0
    out = capsys.readouterr().out
    assert "kv.tokens" in out and "577024" in out and "draft.weights.mem_gb" in out
    assert "accept_len   last 3.48" in out


def test_llamacpp_log(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_facts("llamacpp", str(LOGS / "llamacpp_c2048_np2.log"), as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["facts"]["kv.cells"] == 1024


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cmd_facts("sglang", str(tmp_path / "nope.log"), as_json=False) == 2
    assert "cannot read" in capsys.readouterr().err


def test_unknown_server_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_facts("tgi", str(LOGS / "vllm_0330_boot.log"), as_json=False) == 2
    err = capsys.readouterr().err
    assert "unknown server 'tgi'" in err and "sglang" in err and "vllm" in err


def test_a_log_line_with_escapes_is_printed_as_text(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An error line quoted verbatim with an OSC (retitles the terminal) and a CSI (clears it):
    the table shows the escapes, a terminal acts on none."""
    log = tmp_path / "boot.log"
    hostile = "ValueError: boom \x1b]0;TITLE\x07\x1b[2J\rforged"
    log.write_text((LOGS / "sglang_replayssm_reject.log").read_text() + hostile + "\n")
    assert cmd_facts("sglang", str(log), as_json=False) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "ValueError: boom \\x1b]0;TITLE\\x07\\x1b[2J" in out


def test_a_log_that_is_a_fifo_or_a_device_is_refused_not_waited_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "boot.log"
    os.mkfifo(fifo)  # no writer: a plain open would wait for one forever
    for path in (fifo, Path("/dev/zero")):
        assert cmd_facts("llamacpp", str(path), False) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ruler facts: cannot read {path}: not a regular file ("), err
