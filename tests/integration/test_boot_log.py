"""boot.log on the real testbed: whole up to the server's ready line, bounded after it.

llama-server runs at -lv 4 (its boot facts are trace lines) and then logs every request's prompt
cache work: on a GPU that was 53-86 MB a window. The budget after ready is made small here so that
a short campaign on the CPU testbed goes past it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine import testbed as tb_mod
from engine.campaign.load import load_campaign
from engine.run import boot
from engine.run.measure import Measurement
from engine.run.runner import Runner
from engine.servers.llamacpp import LlamaCppAdapter
from engine.servers.logs import BootFacts


def test_the_boot_log_is_whole_to_ready_and_bounded_after(tmp_path: Path, testbed: tb_mod.Testbed,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boot, "AFTER_READY_BYTES", 4096)
    spec = {"name": "bootlog", "server": "llamacpp", "runtime": "process",
            "process": {"command": [str(testbed.llama_server)]},
            "control": {"model": f"{testbed.models_dir}/SmolLM2-135M-Instruct.Q4_1.gguf",
                        "args": {"-m": "${model}", "-c": 2048, "-np": 2, "-t": 1, "-fa": "off"}},
            "windows": [{"name": "ctx", "axis": "context 4096", "change": {"args": {"-c": 4096}}}],
            "sessions": {"s1": ["ctx"]},
            "control_position": "first",
            "workload": {"classes": {"prose": {"prompts": ["Write one sentence about the sea."]}},
                         "concurrency": [2], "reps": 2, "requests_per_rep": 8, "max_tokens": 8},
            "quality": {"enabled": False}, "timeouts": {"boot": 120, "request": 60}}
    path = tmp_path / "bootlog.yaml"
    path.write_text(yaml.safe_dump(spec))
    run = tmp_path / "run"
    run.mkdir()
    assert Runner(load_campaign(path), run, "process", {}, None, [Measurement()]).run() == "finished"

    adapter = LlamaCppAdapter()
    log = (run / "windows" / "s1-control" / "boot.log").read_text().splitlines()
    ready = next(i for i, line in enumerate(log) if adapter.is_ready_line(line))
    note = next(i for i, line in enumerate(log) if line.startswith("[ruler] boot.log: the first 4 KiB"))
    footer = next(i for i, line in enumerate(log) if line.startswith("[ruler] boot.log: ")
                  and "after ready left out; the last" in line)
    assert ready < note < footer
    assert sum(len(x) + 1 for x in log[ready + 1:note]) <= 4096
    # Between the note and the footer only what ruler reads after ready: here, nothing.
    assert all(adapter.is_error(x) or adapter.is_warning(x) for x in log[note + 1:footer])
    assert 0 < len(log) - footer - 1 <= boot.TAIL_LINES
    # Every boot fact's line is still in the kept log, and reads as the window recorded it.
    recorded = json.loads((run / "windows" / "s1-control" / "boot-facts.json").read_text())
    assert len(recorded["facts"]) > 30 and set(recorded["lines"].values()) <= set(log[:note])
    again = BootFacts()
    again.feed_text(adapter, "\n".join(recorded["lines"].values()))
    assert {k: f.value for k, f in again.facts.items() if k in recorded["facts"]} == recorded["facts"]
