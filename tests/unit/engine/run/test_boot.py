"""The boot watcher freezes boot facts only after its log pump has read the server's ready line.

A stand-in server (not a fake llama-server: only its log and liveness) trickles a real recorded
llama.cpp boot log while the health probe is patched to answer "ready" at once, as a loaded machine
lets a real server answer /health before the pump has read the lines before its ready line.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.run import boot
from engine.servers import get_adapter
from engine.servers.client import Readiness
from tests.paths import FIXTURES

LOG = FIXTURES / "logs" / "llamacpp_c4096_np2.log"


class Trickle:
    base_url = "http://127.0.0.1:9"
    identity: dict[str, object] = {"runtime": "stand-in"}

    def __init__(self, lines: list[str], delay: float) -> None:
        self._lines, self._delay = lines, delay

    def lines(self) -> Iterator[str]:
        for line in self._lines:
            time.sleep(self._delay)
            yield line
        time.sleep(60)  # a live server's log stays open after boot

    def alive(self) -> bool:
        return True

    def exit_code(self) -> int | None:
        return None

    def stop(self) -> None:
        pass


def test_facts_are_frozen_after_the_ready_line_not_at_the_first_healthy_probe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = get_adapter("llamacpp")
    lines = LOG.read_text().splitlines()
    ready_at = next(i for i, line in enumerate(lines) if adapter.is_ready_line(line))
    monkeypatch.setattr(boot, "probe", lambda *a: Readiness.READY)
    pump = boot.LogPump(Trickle(lines, 0.002), adapter, tmp_path / "boot.log", lambda f: None)
    pump.start()
    outcome = boot.wait_ready(pump.server, adapter, pump, timeout=30)
    facts = pump.freeze()
    assert outcome.ready
    assert pump.lines_seen >= ready_at + 1  # every line up to the ready line was read
    assert facts.value("ready") is True and facts.value("kv.cells") is not None
