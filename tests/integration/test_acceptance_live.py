"""Acceptance (engine.method.acceptance) from a live llama-server: the testbed's SmolLM2 Q4_1 with
its Q2_K as the draft model, per class from the /metrics counters' delta around each rep, equal to
the sum of the requests' own counts, with the per-position curve llama.cpp's /metrics gives.
(vLLM's: tests/integration/test_vllm_live.py, on that module's server.)"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from engine import testbed as tb_mod
from engine.method import acceptance
from engine.runtime.base import LaunchPlan, free_port
from engine.servers import Readiness, get_adapter
from engine.servers.client import ServerClient
from tests.integration.live import class_acceptance, serve

DRAFT_MAX = 4
CLASSES = {"repeat": "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat "
                     "on the mat.", "prose": "Write two sentences about a lighthouse keeper's day."}


def wait_ready(url: str, adapter: ServerClient, alive: Callable[[], bool]) -> None:
    """Until /health says ready, as the boot watcher polls it."""
    with httpx.Client(base_url=url, timeout=5) as c:
        while True:
            assert alive(), "llama-server exited during boot"
            try:
                r = c.get(adapter.health_path)
                if adapter.readiness(r.status_code, r.content) == Readiness.READY:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)


@pytest.mark.timeout(600)
def test_llamacpp_acceptance_per_class_from_its_counters(testbed: tb_mod.Testbed) -> None:
    adapter = get_adapter("llamacpp")
    port = free_port()
    server = serve(LaunchPlan("accept-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-md", str(testbed.models["Q2_K"]),
        "--spec-type", "draft-simple", "--spec-draft-n-max", str(DRAFT_MAX), "-c", "2048", "-np", "1",
        "-t", "1", "--metrics", "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    try:
        wait_ready(server.base_url, adapter, server.alive)
        for cls, prompt in CLASSES.items():
            row = class_acceptance(server.base_url, adapter, prompt)
            print(cls, json.dumps(row, default=sorted))
            # llama.cpp's timings count drafted and accepted tokens, no steps, no positions.
            assert row["summed"] == {"drafted", "accepted"}
            total = {k: sum(d[k] for d in row["deltas"]) for k in ("drafts", "drafted", "accepted")}
            assert row["accept_source"] == "metrics"
            assert row["accept_len"] == round(1 + total["accepted"] / total["drafts"], 4)
            assert row["accept_rate"] == round(total["accepted"] / total["drafted"], 4)
            curve = acceptance.parse_curve(row["accept_per_pos"])
            assert 0 < len(curve) <= DRAFT_MAX and curve == sorted(curve, reverse=True)
            assert sum(curve) == pytest.approx(row["accept_len"] - 1, abs=1e-3)
    finally:
        server.stop()
