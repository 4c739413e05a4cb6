"""A campaign on the real testbed server behind a fault-injecting proxy: whatever the server sends
is a request error or a missing figure with its reason, never an engine error or an absurd figure.

The proxy (live.py's SlowingProxy, extended) forwards to the real llama-server but rewrites
usage.completion_tokens to a string or to 10^12, answers /metrics with an HTML page, with counters
that go backwards and with a NaN counter, and answers the chat-template request of the quality
checks with a prompt that is not text: a real server cannot be made to send any of these on cue.
"""

from __future__ import annotations

import asyncio
import csv
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine import testbed as tb_mod
from engine.record.journal import read_events
from engine.runtime.base import LaunchPlan, free_port
from tests.integration.live import SlowingProxy, serve

CAMPAIGN = """\
name: serverdata
server: llamacpp
runtime: attach
attach:
  url: http://127.0.0.1:{port}/v1
control:
  args: {{}}
windows:
  - name: same
    axis: the same server (the proxy decides what it sends)
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
  requests_per_rep: 2
  max_tokens: 8
leak: {{max_reruns: 0}}
timeouts: {{request: 60}}
quality: {{greedy: {{n: 1, max_tokens: 8}}, teacher_forced: {{positions: 1}}}}
"""

HTML = "<html><body>502 Bad Gateway</body></html>"


def _metrics(drafts: float, drafted: float, accepted: float) -> str:
    return "".join(f"# TYPE llamacpp:{name} counter\nllamacpp:{name} {value}\n" for name, value in [
        ("spec_decode_num_drafts_total", drafts), ("spec_decode_num_draft_tokens_total", drafted),
        ("spec_decode_num_accepted_tokens_total", accepted)])


def _answer(body: str, ctype: str) -> bytes:
    data = body.encode()
    return (f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\n\r\n").encode() + data


def _dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size, _, body = body.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            break
        out, body = out + body[:n], body[n + 2:]
    return out


class FaultProxy(SlowingProxy):
    """Where the campaign stands (from its journal) picks the fault; everything else is forwarded.

    Control, warm pass and rep 1: every usage.completion_tokens becomes the string "many"; rep 2:
    its first request's becomes 10^12. Window "same": /metrics is an HTML page for the warm pass,
    counters that go backwards for rep 1, a NaN counter for rep 2; its quality checks get a
    rendered chat prompt that is a list, not text.
    """

    SCRAPES = {"warm": (HTML, HTML), "rep1": (_metrics(100, 500, 300), _metrics(50, 200, 100)),
               "rep2": (_metrics(100, 500, 300), _metrics(110, float("nan"), 330))}

    def __init__(self, upstream: int, results: Path) -> None:
        super().__init__(upstream, slow=lambda: False)
        self.results = results
        self.counts: dict[tuple[str, str, str], int] = {}  # (window, stage, what) -> requests seen
        self.faults: dict[int, bytes] = {}  # id(request) -> the completion_tokens it gets
        self.injected: list[tuple[str, str, str]] = []

    def stage(self) -> tuple[str, str]:
        window, stage = "", ""
        for journal in self.results.glob("*/journal.jsonl"):
            for e in read_events(journal):
                if e["kind"] == "shape_started":
                    window, stage, reps = e["window"], "warm", 0
                elif e["kind"] == "warm_done":
                    stage = "rep1"
                elif e["kind"] == "rep_done":
                    reps += 1
                    stage = f"rep{reps + 1}"
                elif e["kind"] == "quality_started":
                    window, stage = e["window"], "quality"
        return window, stage

    def seen(self, window: str, stage: str, what: str) -> int:
        key = (window, stage, what)
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]

    def holds(self, request: bytes) -> bool:
        if not request.startswith(b"POST /v1/chat/completions"):
            return False
        window, stage = self.stage()
        if window != "control" or stage not in ("warm", "rep1", "rep2"):
            return False
        n = self.seen(window, stage, "chat")
        if stage == "rep2" and n > 1:
            return False
        self.faults[id(request)] = b'"many"' if stage != "rep2" else str(10**12).encode()
        self.injected.append((window, stage, "usage"))
        return True

    async def release(self, request: bytes, response: bytes, took: float) -> bytes:
        head, _, body = response.partition(b"\r\n\r\n")
        if b"transfer-encoding: chunked" in head.lower():
            body = _dechunk(body)
        body, n = re.subn(rb'"completion_tokens":\s*\d+',
                          b'"completion_tokens":' + self.faults.pop(id(request)), body)
        assert n == 1, body
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + body

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(65536)
        window, stage = self.stage()
        answer = None
        if window == "same" and first.startswith(b"GET /metrics") and stage in self.SCRAPES:
            n = self.seen(window, stage, "metrics")
            answer = _answer(self.SCRAPES[stage][min(n, 2) - 1], "text/plain; version=0.0.4")
        elif window == "same" and stage == "quality" and first.startswith(b"POST /apply-template"):
            answer = _answer(json.dumps({"prompt": ["not", "text"]}), "application/json")
        if answer is None:
            await self.forward(first, reader, writer)
            return
        self.injected.append((window, stage, first.split(b" ")[1].decode()))
        writer.write(answer)
        await writer.drain()
        writer.close()


def _rep(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], lines[1:]


def test_bad_server_data_is_reported_not_a_crash(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    port = free_port()
    server = serve(LaunchPlan("serverdata-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "2048", "-np", "1",
        "-t", "1", "--metrics", "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    results = tmp_path / "results"
    proxy = FaultProxy(port, results)
    proxy.start()
    assert proxy.ready.wait(10)
    spec = tmp_path / "serverdata.yaml"
    spec.write_text(CAMPAIGN.format(port=proxy.port))
    try:
        out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                              "--results-dir", str(results)], capture_output=True, text=True,
                             timeout=600)
        print(out.stdout[-4000:], out.stderr[-3000:])
    finally:
        proxy.stop()
        server.stop()
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert proxy.injected.count(("control", "warm", "usage")) == 2
    assert proxy.injected.count(("control", "rep1", "usage")) == 2
    assert proxy.injected.count(("control", "rep2", "usage")) == 1
    for stage in ("warm", "rep1", "rep2"):
        assert proxy.injected.count(("same", stage, "/metrics")) == 2
    assert ("same", "quality", "/apply-template") in proxy.injected
    run = next(results.iterdir())
    events = read_events(run / "journal.jsonl")
    assert not [e for e in events if e["kind"] == "engine_error"]
    rows = {r["window"]: r for r in csv.DictReader((run / "throughput.csv").open())}

    # Usage that is not a count, or more tokens than the request allowed: request errors, on record.
    reps = run / "windows" / "s1-control" / "reps"
    many = "bad stream chunk: usage.completion_tokens is 'many', not a count"
    for name in ("prose-c1-1-warm.jsonl", "prose-c1-1-1.jsonl"):
        _, records = _rep(reps / name)
        assert [r["error"] for r in records] == [many, many]
    _, records = _rep(reps / "prose-c1-1-2.jsonl")
    assert records[0]["error"] == ("usage says 1000000000000 completion tokens, more than the request's "
                                   "limit of 8")
    assert records[1]["error"] is None and 0 < records[1]["completion_tokens"] <= 8
    control = rows["control"]
    assert control["status"] == "void"
    # Then why its figure is over the whole reps (a rep of failed requests has no steady window).
    assert control["reason"] == (f"3 failed requests ({many}) after 1 attempt; over the whole reps: "
                                 "rep 1 has no steady window")
    rep2 = next(e for e in events if e["kind"] == "rep_done" and e["window"] == "control" and e["rep"] == 2)
    assert rep2["failed"] == 1 and rep2["tokens"] == records[1]["completion_tokens"]
    assert 0 < float(control["agg_tok_s"]) < 10_000  # one honest request, not 10^12 tokens
    assert control["accept_source"] == ""  # the real server has no drafter: nothing to reject

    # /metrics that is not Prometheus text, counters that go backwards, a NaN counter: no delta,
    # the reason on the rep and the row; never a negative acceptance labelled "metrics".
    same = run / "windows" / "s1-same" / "reps"
    warm, _ = _rep(same / "prose-c1-1-warm.jsonl")
    assert warm["metrics_delta"] is None
    assert warm["client"]["metrics_rejected"].startswith("/metrics: not Prometheus text (ValueError: ")
    backwards = ("counters went backwards (drafts 100 -> 50, drafted 500 -> 200, accepted 300 -> 100): "
                 "the server restarted or reset them")
    rep1, _ = _rep(same / "prose-c1-1-1.jsonl")
    assert rep1["metrics_delta"] is None and rep1["client"]["metrics_rejected"] == backwards
    rep2h, _ = _rep(same / "prose-c1-1-2.jsonl")
    assert rep2h["client"]["metrics_rejected"] == "/metrics: drafted is nan, not a finite number"
    row = rows["same"]
    assert row["status"] in ("ok", "noisy") and float(row["agg_tok_s"]) > 0
    assert (row["accept_len"], row["accept_rate"], row["accept_source"]) == ("", "", "")
    # Two requests a rep at C1 leave no steady window: the figure is over the whole reps, and says so.
    assert row["reason"] == (f"acceptance not measured: rep 1: {backwards}; "
                             f"rep 2: /metrics: drafted is nan, not a finite number; "
                             "over the whole reps: rep 1 has no steady window")

    # The quality check reading a chat template that is not text: an "error" verdict with why.
    greedy = next(e for e in events if e["kind"] == "verdict" and e["window"] == "same"
                  and e["check"] == "greedy")
    assert greedy["verdict"] == "error"
    assert greedy["summary"] == ("BadServerData: llamacpp render_chat: /apply-template prompt is "
                                 "['not', 'text'], not a string")
