"""engine.quality against the real testbed server (the maths on known numbers:
tests/unit/engine/quality/test_quality.py).

The tests talk to a real llama-server (no mocks): one small campaign run through the Runner
with [Measurement(), Quality()] (control, a lossless drafter-block window, a lossy Q4_1 target and
a no-op flag, with a knob SmolLM2's template ignores), plus a few direct probes.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import testbed as tb_mod
from engine.quality import Quality
from engine.quality.knobs import knob_check
from engine.quality.maths import greedy_compare
from engine.quality.probe import Probe, greedy_items
from engine.quality.reference import compare_kl, compare_scores, load_reference
from engine.quality.tools import tool_probe
from engine.quality.window import KL_MIN, TF_CLOSE
from engine.record.journal import read_events
from engine.runtime.base import LaunchPlan, Server, free_port
from engine.servers.client import ChatReply
from engine.servers.llamacpp import LlamaCppAdapter
from tests.integration.live import serve

# Slow: the module's run and server take minutes, paid by whichever test asks first.
pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parents[1] / "fixtures"

# ------------------------------------------------------------------------------ the real server


def start(testbed: tb_mod.Testbed, *args: str) -> Iterator[Server]:
    port = free_port()
    argv = [str(testbed.llama_server), *args, "-c", "2048", "-np", "1", "-t", "1",
            "--host", "127.0.0.1", "--port", str(port)]
    server = serve(LaunchPlan(f"ruler-test-quality-{port}", argv, {}, {}, port))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(server.base_url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def q8(testbed: tb_mod.Testbed) -> Iterator[Server]:
    yield from start(testbed, "-m", str(testbed.models["Q8_0"]))


def probe_for(server: Server) -> Iterator[Probe]:
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield Probe(LlamaCppAdapter(), client, lambda: False)


@pytest.fixture
def probe(q8: Server) -> Iterator[Probe]:
    yield from probe_for(q8)


def test_token_ids_match_the_chat_endpoint(probe: Probe) -> None:
    """Rendering + tokenizing on the server gives what the chat endpoint itself generates from,
    and teacher forcing the greedy continuation puts each forced token at the top."""
    prompt = "Explain in two sentences why the sky is blue."
    [g] = probe.greedy([prompt], {}, 24, 1234)
    reply = probe.chat(prompt, {}, 24, 1234)
    assert reply.content == g["text"]
    assert reply.raw["usage"]["prompt_tokens"] == len(g["prompt_ids"])
    [item] = greedy_items([g], positions=4)
    assert len(item.positions) == 4
    [scores] = probe.score([item], top_k=5)
    for s in scores:
        assert s["top"][0][0] == item.cont_ids[s["t"]]  # greedy: the forced token is the argmax
        assert all(b[1] <= a[1] for a, b in zip(s["top"], s["top"][1:], strict=False))
        assert len(s["top"]) == 5 and s["top"][0][1] <= 0


def test_a_continuation_of_byte_tokens_is_scored_at_every_position(probe: Probe) -> None:
    """SmolLM2 answers this prompt with emoji, three byte tokens each: llama-server sends no
    probabilities for a sampled token that leaves the text incomplete UTF-8, so the scorer bans
    it and asks again; the distribution is the one before sampling, the forced token its argmax."""
    [g] = probe.greedy(["Reply with a single emoji for happiness."], {}, 9, 1234)
    whole = {len(t.encode()) for t in g["text"]}
    assert max(whole) > 1, g["text"]  # some token of it is part of a character
    [item] = greedy_items([g], positions=len(g["token_ids"]))
    [scores] = probe.score([item], top_k=3)
    assert [s["t"] for s in scores] == list(range(len(g["token_ids"])))
    for s in scores:
        assert s["top"][0][0] == item.cont_ids[s["t"]]


@pytest.mark.parametrize("prompt", ["Translate to Chinese: I love cats.",
                                    "Reply with three emoji about the sea."])
def test_cjk_and_emoji_replies_are_compared_by_token_ids_and_scored_everywhere(
        probe: Probe, prompt: str) -> None:
    """SmolLM2 answers these in CJK text and emoji, byte-fallback tokens among them (llama-server
    leaves their logprobs out of the chat answer: fewer entries than tokens). Greedy twice is
    identical by its token ids, cut mid-character or not, and every position is scored, twice
    the same: the reference a window would be checked against stands."""
    first, again = probe.greedy([prompt], {}, 15, 1234), probe.greedy([prompt], {}, 15, 1234)
    [g] = first
    assert any(len(ch.encode()) > 1 for ch in g["text"]), g["text"]  # multi-byte characters
    assert len(g["token_ids"]) == g["completion_tokens"] == 15
    cmp = greedy_compare(first, again)
    assert (cmp["identical"], cmp["n"]) == (1, 1)
    [item] = greedy_items(first, positions=15)
    scores, repeat = probe.score([item], top_k=3), probe.score([item], top_k=3)
    assert all(s["top"] and "unscored" not in s for s in scores[0])
    tf = compare_scores([item], scores, repeat, 3)
    assert (tf["unscored"], tf["stats"]["n"], tf["identical"]) == (0, 15, True)


def test_tool_probe_records_what_the_server_answers(probe: Probe) -> None:
    """SmolLM2's template has no tool support: the probe reports 0/N with the reason, not a crash."""
    report = tool_probe(probe, 2, 16, 1234, {})
    assert report["n"] == 2 and report["ok"] == 0
    assert all(c["why"] == "no tool call" and c["content"] for c in report["calls"])


def test_knob_that_acts_is_not_suspect(testbed: tb_mod.Testbed) -> None:
    """The check's other side: a template that honours reasoning_effort makes that knob act."""
    template = FIXTURES / "templates" / "effort-switch.jinja"
    for server in start(testbed, "-m", str(testbed.models["Q8_0"]), "--chat-template-file",
                        str(template)):
        for probe in probe_for(server):
            prompts = ["Why is the sky blue?", "Name a colour."]
            report = knob_check(probe, prompts, {"reasoning_effort": "low"}, 16, 1234)
    knob = report["knobs"]["reasoning_effort"]
    assert report["verdict"] == "acts" and report["suspects"] == []
    assert knob["reasoning_knob"] and knob["template_renders_same"] is False
    assert knob["reasoning_counts"] == "not reported by this server"
    assert len(knob["pairs"]) == 1 and knob["pairs"][0]["differs"]  # one difference settles it


CAMPAIGN = """\
name: quality-run
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q8_0.gguf
  artifacts:
    drafter: ${{testbed.models}}/SmolLM2-135M-Instruct.Q2_K.gguf
  args:
    -m: ${{model}}
    -md: ${{artifacts.drafter}}
    --spec-type: draft-simple
    --spec-draft-n-max: 7
    -c: 2048
    -np: 2
    -t: 1
    -fa: "off"
    --metrics: true
windows:
  - name: block5
    axis: draft block 5
    change:
      args: {{--spec-draft-n-max: 5}}
  - name: q41
    axis: lossy target Q4_1
    lossy: true
    change:
      model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  - name: noop
    axis: --defrag-thold 0.1 (deprecated, does nothing)
    change:
      args: {{--defrag-thold: 0.1}}
sessions:
  s1: [noop, block5, q41]  # noop first: beside the control in time, so drift cannot tip it
control_position: first
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours."]}}
  concurrency: [1]
  # Short passes: the quality stages are the subject; the rows are there to be judged (two reps
  # give each an interval, the declared noise between boots keeps the no-op from a call).
  reps: 2
  requests_per_rep: 2
  max_tokens: 16
  sampling: {{temperature: 0, seed: 1234}}
  knobs:
    chat_template_kwargs: {{enable_thinking: false}}
quality:
  greedy: {{n: {n}, max_tokens: 16}}
  teacher_forced: {{top_k: 10, positions: 3}}
leak: {{spread: 0.20}}  # the declared noise of a shared 2-core CPU: the no-effect tolerance's floor
# The noise between two boots of one server on a shared, busy 2-core CPU, declared (this campaign
# boots its control once): under load the same server's C1 row moved 41 % from one boot to the next.
verdict: {{boot_noise: 0.30}}
timeouts: {{boot: 120, request: 120}}
"""
N = 5


@pytest.fixture(scope="module")
def run_dir(testbed: tb_mod.Testbed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from engine.campaign.load import load_campaign
    from engine.commands.launch import prepare
    from engine.record.results import ENGINE_JSON
    from engine.run.measure import Measurement
    from engine.run.runner import Runner

    tmp = tmp_path_factory.mktemp("quality")
    spec = tmp / "quality-run.yaml"
    spec.write_text(CAMPAIGN.format(n=N))
    run = prepare(str(spec), str(tmp / "results"), "process")
    info = json.loads((run / ENGINE_JSON).read_text())
    runner = Runner(load_campaign(spec), run, info["runtime"], info["variables"], None,
                    [Measurement(), Quality()])
    assert runner.run() == "finished"
    return run


def verdicts_of(run: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for e in read_events(run / "journal.jsonl"):
        if e["kind"] == "verdict":
            out[(e["window"], e["check"])] = dict(e)
    return out


@pytest.mark.timeout(1800)  # the first test pays for the run; 2 shared cores can be very busy
def test_run_writes_receipts_and_verdicts(run_dir: Path) -> None:
    rows = {r["window"]: r for r in csv.DictReader((run_dir / "verdicts.csv").open())}
    assert list(rows) == ["control", "noop", "block5", "q41"]
    for w in rows:
        for f in ("greedy.json", "knobs.json", "teacher-forced.json"):
            assert (run_dir / "windows" / f"s1-{w}" / f).is_file(), f"{w}/{f}"
    assert (run_dir / "windows" / "s1-control" / "reference.json").is_file()
    assert (run_dir / "windows" / "s1-q41" / "kl.json").is_file()
    assert not (run_dir / "windows" / "s1-block5" / "kl.json").exists()  # lossless: no KL
    events = read_events(run_dir / "journal.jsonl")
    started = [e["window"] for e in events if e["kind"] == "quality_started"]
    assert started == ["control", "noop", "block5", "q41"]
    done = [e for e in events if e["kind"] == "quality_done"]
    assert [e["status"] for e in done] == ["done"] * 4
    for e in done:
        print(f"quality cost {e['window']}: {e['seconds']} s, {e['requests']} requests, {e['stages']}")


def test_inert_knob_is_caught(run_dir: Path) -> None:
    v = verdicts_of(run_dir)
    for w in ("control", "block5", "q41", "noop"):
        assert v[(w, "knobs")]["verdict"] == "ruler suspect"
        assert "RULER SUSPECT: chat_template_kwargs" in v[(w, "knobs")]["summary"]
    knobs = json.loads((run_dir / "windows" / "s1-control" / "knobs.json").read_text())
    k = knobs["knobs"]["chat_template_kwargs"]
    assert k["template_renders_same"] is True and k["reasoning_knob"]
    assert len(k["pairs"]) == 3 and not any(p["differs"] for p in k["pairs"])
    # Visible without opening the JSON: verdicts.csv, every throughput row, ruler status.
    from engine.commands.status import format_summary, summary

    verdicts = list(csv.DictReader((run_dir / "verdicts.csv").open()))
    assert {r["knobs"] for r in verdicts} == {"ruler suspect"}
    rows = list(csv.DictReader((run_dir / "throughput.csv").open()))
    assert len(rows) == 4 and {r["ruler_check"] for r in rows} == {"ruler suspect"}
    status = format_summary(summary(run_dir))
    assert "RULER SUSPECT (a request knob is inert): s1-control, s1-noop, s1-block5, s1-q41" in status


def test_control_self_score_is_repeat_identical(run_dir: Path) -> None:
    v = verdicts_of(run_dir)[("control", "self_score")]
    assert v["verdict"] == "repeat-identical"
    assert v["summary"] == f"self-score repeat-identical on {v['figures']['n']} tokens"
    assert v["figures"]["n"] >= 3 * N - 2  # a continuation may be shorter than 3 tokens


def test_lossless_window_is_equivalent(run_dir: Path) -> None:
    v = verdicts_of(run_dir)
    assert v[("block5", "greedy")]["summary"] == f"{N}/{N} identical"
    tf = v[("block5", "teacher_forced")]
    assert tf["verdict"] in ("exact", "close") and tf["figures"]["p99"] <= TF_CLOSE
    data = json.loads((run_dir / "windows" / "s1-block5" / "teacher-forced.json").read_text())
    assert data["reference"] == "s1-control" and data["stats"]["n"] == tf["figures"]["n"]


def test_lossy_window_diverges_and_kl_clears_the_floor(run_dir: Path) -> None:
    v = verdicts_of(run_dir)
    greedy = v[("q41", "greedy")]
    assert greedy["verdict"] == "diverged" and greedy["figures"]["identical"] < N
    assert v[("q41", "teacher_forced")]["figures"]["p99"] > TF_CLOSE
    kl = v[("q41", "kl")]
    floor = v[("control", "kl")]["figures"]["floor"]
    assert floor is not None and kl["figures"]["floor"] == floor
    assert kl["verdict"] == "above floor"
    assert kl["figures"]["mean"] > max(10 * floor, KL_MIN)
    data = json.loads((run_dir / "windows" / "s1-q41" / "kl.json").read_text())
    assert data["oracle"]["oracle"] == "s1-control"
    assert data["oracle"]["facts"]["model.file_type"] == "Q8_0"
    print(f"q41: {kl['summary']}; control floor {floor}")


def test_noop_flag_has_no_observable_effect(run_dir: Path) -> None:
    v = verdicts_of(run_dir)
    assert v[("noop", "greedy")]["summary"] == f"{N}/{N} identical"
    ne = v[("noop", "no_effect")]
    # Never an effect; "no observable effect" only if shown within ±5 %, which one control boot a
    # session (the noise between boots declared at 30 %) cannot show: undetermined, and it says so.
    assert ne["verdict"] == "undetermined", ne["summary"]
    assert "undetermined" in ne["summary"] and "observable effect (" not in ne["summary"]
    # The drafter block changes a boot fact, so block5 is never "no observable effect".
    assert "spec.n_max 5 vs 7" in v[("block5", "no_effect")]["summary"]


def test_reference_reused_as_oracle_receipt(run_dir: Path, testbed: tb_mod.Testbed) -> None:
    """The control's reference.json is a stored oracle: a Q2_K target scored at its positions
    lands far above the floor the receipt carries."""
    oracle = load_reference(run_dir / "windows" / "s1-control" / "reference.json")
    assert oracle.provenance["facts"]["model.file_type"] == "Q8_0"
    for server in start(testbed, "-m", str(testbed.models["Q2_K"])):
        for probe in probe_for(server):
            win = probe.score(oracle.kl_items[:3], oracle.top_k)
    res = compare_kl(oracle.kl_scores[:3], win, 10)
    floor = oracle.kl_floor()
    assert floor is not None and res["mean"] > max(10 * floor, KL_MIN)


def test_knob_check_reply_shape_is_real(probe: Probe) -> None:
    """chat() through the adapter: no cached prefix, a usage count, content as text."""
    r: ChatReply = probe.chat("Say hello.", {}, 8, 1234)
    assert r.completion_tokens and r.content and r.reasoning_tokens is None
    assert r.raw["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
