"""The prefix-cache policy on the real testbed: keep measures cache hits after the warm pass, flush
measures none and a longer time to first token, and a flush the server refuses voids the rep.

llama-server has no endpoint that empties its cache (ruler's flush there is ``cache_prompt: false``
on each request), so the refused flush is shown with the vLLM adapter against a FAULT-INJECTING
proxy: the proxy stands in front of the real llama-server, forwards every byte of every request,
and answers ``POST /reset_prefix_cache`` itself, as a vLLM whose reset failed does: HTTP 200 with
``{"success": false}`` (llm-d-benchmark PR #1918 saw exactly that).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.record.journal import read_events
from engine.record.receipts import read_rep
from engine.record.request import RequestRecord
from engine.runtime.base import LaunchPlan, free_port
from tests.integration.live import serve

# Slow: each test runs a campaign on the real server, over ten seconds.
pytestmark = pytest.mark.slow

# A long prompt, so that computing it or reading it from the cache differ in time to first token
# by far more than the noise of a shared 2-core machine.
PROMPT = ("Summarise the following notes in one line. " + " ".join(
    f"Note {i}: the lighthouse keeper logged wind, tide and the passing ships at dawn." for i in range(24)))

CAMPAIGN = """\
name: {name}
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q8_0.gguf
  args: {{-m: "${{model}}", -c: 2048, -np: 2, -t: 1, --metrics: true}}
# The control alone: the policy is the workload's, the same for every window a run boots.
windows: []
sessions:
  s1: []
control_position: first
workload:
  classes:
    notes: {{prompts: [{prompt}]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: 2
  max_tokens: 4
  cache: {cache}
leak: {{min_concurrency: 8, spread: 0.5, max_reruns: 0}}
timeouts: {{boot: 120, request: 60}}
quality: {{enabled: false}}
"""


def run_campaign(tmp_path: Path, text: str, name: str, exit_code: int = 0) -> tuple[Path, str]:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(text)
    results = tmp_path / f"results-{name}"
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=600)
    print(out.stdout[-3000:], out.stderr[-2000:])
    assert out.returncode == exit_code, out.stderr
    return next(results.iterdir()), out.stdout


def requests_of(run: Path, row: dict[str, str]) -> list[RequestRecord]:
    return [r for p in row["source"].split(";") for r in read_rep(run / p)[1]]


def test_keep_shows_hits_after_the_warm_pass_flush_shows_none_and_ttft_rises(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    got = {}
    for cache in ("keep", "flush"):
        run, _ = run_campaign(tmp_path, CAMPAIGN.format(name=f"cache-{cache}-{tag}", cache=cache,
                                                        prompt=json.dumps(PROMPT)), cache)
        got[cache] = run, {r["window"]: r for r in csv.DictReader((run / "throughput.csv").open())}
    (krun, keep), (frun, flush) = got["keep"], got["flush"]
    assert list(keep) == list(flush) == ["control"]
    k, f = keep["control"], flush["control"]
    assert (k["cache"], f["cache"]) == ("keep", "flush")
    # keep: after the warm pass every request is served from the cache but for its last token
    # (llama-server always computes one); the server's own counters over each rep say so.
    for req in requests_of(krun, k):
        assert req["cached_tokens"] == (req["prompt_tokens"] or 0) - 1, req
    assert float(k["cache_hit"]) > 0.95, k
    header = read_rep(krun / k["source"].split(";")[0])[0]
    assert header["cache"]["metrics"]["cached"] > 0
    # flush: nothing reused, every prompt computed, and the first token comes later.
    assert {req["cached_tokens"] for req in requests_of(frun, f)} == {0}
    assert float(f["cache_hit"]) == 0.0
    assert float(f["ttft_ms"]) > 1.5 * float(k["ttft_ms"]), (f["ttft_ms"], k["ttft_ms"])


VLLM_FACE = """\
name: {name}
server: vllm
runtime: attach
attach:
  url: http://127.0.0.1:{port}/v1
control:
  args: {{}}
windows:
  - name: same
    axis: the same server (attach has no lifecycle)
    change:
      env: {{UNUSED: "1"}}
sessions:
  s1: [same]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Name three colours."]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: 1
  max_tokens: 4
  cache: flush
leak: {{min_concurrency: 8, spread: 0.5, max_reruns: 1}}
timeouts: {{request: 60}}
quality: {{enabled: false}}
"""


class FailingResetProxy(threading.Thread):
    """FAULT INJECTION: forwards every request to the real llama-server byte for byte, except
    ``POST /reset_prefix_cache``, which it answers itself with HTTP 200 ``{"success": false}``."""

    def __init__(self, upstream: int) -> None:
        super().__init__(daemon=True)
        self.upstream, self.port = upstream, free_port()
        self.ready, self.resets = threading.Event(), 0
        self.loop = asyncio.new_event_loop()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(65536)
        if first.startswith(b"POST /reset_prefix_cache"):
            self.resets += 1
            body = b'{"success":false}'
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
            await writer.drain()
            writer.close()
            return
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        up_w.write(first)
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))

    async def _main(self) -> None:
        server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        self.ready.set()
        async with server:
            await server.serve_forever()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        with contextlib.suppress(RuntimeError, asyncio.CancelledError):
            self.loop.run_until_complete(self._main())

    def stop(self) -> None:
        for task in asyncio.all_tasks(self.loop):
            self.loop.call_soon_threadsafe(task.cancel)


def test_a_reset_answered_success_false_voids_the_rep(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    port = free_port()
    server = serve(LaunchPlan("reset-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "1024", "-t", "1",
        "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    proxy = FailingResetProxy(port)
    proxy.start()
    assert proxy.ready.wait(10)
    try:
        run, stdout = run_campaign(tmp_path, VLLM_FACE.format(name=f"reset-{uuid.uuid4().hex[:6]}",
                                                              port=proxy.port), "reset",
                                   exit_code=4)  # every rep void on its flush: measured nothing
    finally:
        proxy.stop()
        server.stop()
    why = ('cache flush failed: POST /reset_prefix_cache answered HTTP 200 {"success": false}: '
           "vLLM did not reset its prefix cache (blocks still held) (3 tries)")
    rows = {r["window"]: r for r in csv.DictReader((run / "throughput.csv").open())}
    for window in ("control", "same"):
        row = rows[window]
        # Each attempt's first rep is void before it runs; the rerun's too: the row is void.
        assert (row["status"], row["attempts"], row["cache"]) == ("void", "2", "flush"), row
        assert row["reason"] == f"rep 1: {why} after 2 attempts", row["reason"]
        header, records = read_rep(run / row["source"])
        assert (header["void"], records) == (why, [])
    events = read_events(run / "journal.jsonl")
    assert [e["reason"] for e in events if e["kind"] == "row_void"] == [f"rep 1: {why}"] * 2
    assert not [e for e in events if e["kind"] == "rep_done"]  # no rep measured a cache it kept
    assert f"rep 1: {why}" in stdout
    # Three tries before each warm pass and each void rep, per attempt, per window.
    assert proxy.resets == 2 * 2 * (3 + 3)
