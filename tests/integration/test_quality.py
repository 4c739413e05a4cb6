"""engine.quality: the maths on known numbers, then the checks against the real testbed server.

The server tests talk to a real llama-server (no mocks): one small campaign run through the Runner
with [Measurement(), Quality()] (control, a lossless drafter-block window, a lossy Q4_1 target and
a no-op flag, with a knob SmolLM2's template ignores), plus a few direct probes.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import testbed as tb_mod
from engine.commands.progress import format_event
from engine.quality import Quality
from engine.quality.drift import control_drift
from engine.quality.effect import fact_diff, no_effect_verdict, rows_inside
from engine.quality.knobs import knob_check
from engine.quality.maths import (
    abs_stats,
    first_divergence,
    forced_logprob,
    greedy_compare,
    kl_topk,
    spread_positions,
    topk_distribution,
)
from engine.quality.probe import Probe, greedy_items
from engine.quality.reference import Item, Reference, compare_kl, compare_scores, load_reference
from engine.quality.tools import tool_probe
from engine.quality.verdicts import verdict_row, write_verdicts
from engine.quality.window import KL_MIN, TF_CLOSE
from engine.record.journal import read_events
from engine.runtime import process as rp
from engine.runtime.base import LaunchPlan, Server, free_port
from engine.servers.client import ChatReply, chat_reply, tool_arguments
from engine.servers.llamacpp import LlamaCppAdapter

FIXTURES = Path(__file__).parents[1] / "fixtures"

# ------------------------------------------------------------------------------ pure maths


def test_first_divergence() -> None:
    assert first_divergence("same", "same") is None
    assert first_divergence("abcd", "abXd") == 2
    assert first_divergence("abc", "abcdef") == 3  # a prefix differs where it ends
    assert first_divergence("", "x") == 0
    assert first_divergence("x", "y") == 0


def test_spread_positions() -> None:
    assert spread_positions(0, 4) == []
    assert spread_positions(3, 4) == [0, 1, 2]
    assert spread_positions(10, 4) == [0, 3, 6, 9]
    assert spread_positions(100, 1) == [0]


def test_abs_stats() -> None:
    st = abs_stats([0.0, -1.0, 2.0, -3.0, 4.0])
    assert st["n"] == 5 and st["p50"] == 2.0 and st["max"] == 4.0
    assert st["p99"] == pytest.approx(3.96)  # linear interpolation between 3 and 4
    assert abs_stats([])["p99"] is None


def test_forced_logprob_floors_outside_top_k() -> None:
    top = [(5, -0.1), (7, -2.5), (9, -4.0)]
    assert forced_logprob(top, 7) == (-2.5, False)
    assert forced_logprob(top, 42) == (-4.0, True)  # the k-th: an upper bound of the truth


def lp(p: float) -> float:
    return math.log(p)


def test_kl_with_tail_bucket_by_hand() -> None:
    oracle = [(1, lp(0.5)), (2, lp(0.3))]  # tail 0.2
    window = [(1, lp(0.4)), (3, lp(0.35))]  # tail 0.25; token 2 is somewhere in it
    # Token 2 gets min(k-th 0.35, tail / (missing + 1) = 0.125); the tail keeps 0.125.
    assert topk_distribution(window, [1, 2]) == pytest.approx([0.4, 0.125, 0.125])
    expected = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.125) + 0.2 * math.log(0.2 / 0.125)
    assert kl_topk(oracle, window) == pytest.approx(expected)


def test_kl_is_zero_for_equal_and_positive_otherwise() -> None:
    a = [(1, lp(0.6)), (2, lp(0.3)), (3, lp(0.05))]
    assert kl_topk(a, a) == 0.0
    b = [(2, lp(0.7)), (1, lp(0.2)), (3, lp(0.05))]
    assert kl_topk(a, b) > 0.1
    assert kl_topk(a, b) != pytest.approx(kl_topk(b, a))  # not symmetric: oracle first


def score(t: int, top: list[tuple[int, float]]) -> dict[str, Any]:
    return {"t": t, "top": [[i, v] for i, v in top]}


def test_compare_scores_dlogp_and_floored() -> None:
    item = Item("x", [1, 2], [10, 11, 12], [0, 2])
    ref = [[score(0, [(10, -0.1), (99, -3.0)]), score(2, [(12, -0.5), (98, -1.5)])]]
    same = compare_scores([item], ref, ref, k=2)
    assert same["identical"] and same["stats"]["max"] == 0 and same["floored"] == 0
    win = [[score(0, [(10, -0.3), (99, -2.0)]), score(2, [(98, -0.2), (97, -0.9)])]]
    cmp = compare_scores([item], ref, win, k=2)
    assert not cmp["identical"]
    assert [r["abs_dlogp"] for r in cmp["positions"]] == pytest.approx([0.2, 0.4])  # |-0.9 - -0.5|
    assert cmp["floored"] == 1 and cmp["worst"][0]["t"] == 2


def test_compare_kl_per_position() -> None:
    a = [[score(0, [(1, lp(0.9))]), score(1, [(1, lp(0.5)), (2, lp(0.4))])]]
    res = compare_kl(a, a, k=10)
    assert res["n"] == 2 and res["mean"] == 0.0 and res["p99"] == 0.0


def test_greedy_compare() -> None:
    ref = [{"prompt": "p", "prompt_ids": [1], "text": "hello world"},
           {"prompt": "q", "prompt_ids": [2], "text": "abc"}]
    mine = [{"prompt": "p", "prompt_ids": [1], "text": "hello world"},
            {"prompt": "q", "prompt_ids": [2], "text": "abd"}]
    cmp = greedy_compare(ref, mine)
    assert (cmp["identical"], cmp["n"], cmp["first_divergence"]) == (1, 2, 2)
    assert cmp["prompts"][1]["same_prompt_ids"]


def test_fact_diff_ignores_per_boot_facts() -> None:
    control = {"model.path": "/a/q8.gguf", "server.url": "http://127.0.0.1:1", "kv.cells": 1024,
               "timing.eval_ms": 3.0, "spec.draft_model": "/a/d.gguf", "spec.accepted": 4}
    window = {"model.path": "/b/q8.gguf", "server.url": "http://127.0.0.1:2", "kv.cells": 1024,
              "timing.eval_ms": 9.0, "spec.draft_model": "/b/d.gguf", "spec.accepted": 7}
    assert fact_diff(window, control) == {}
    assert fact_diff({**window, "kv.cells": 2048}, control) == {"kv.cells": [2048, 1024]}
    assert fact_diff({**window, "spec.n_max": 5}, control) == {"spec.n_max": [5, None]}
    assert fact_diff({"kv.cells": 1024.0}, {"kv.cells": 1024}) != {}  # a type change is a change


def test_rows_inside_the_noise() -> None:
    def row(reps: list[float], status: str = "ok") -> dict[str, object]:
        return {"agg_tok_s": sorted(reps)[1], "rep_tok_s": reps, "status": status}
    control = {("prose", 1): row([100.0, 102.0, 98.0])}
    inside = rows_inside({("prose", 1): row([101.0, 99.0, 103.0])}, control)
    assert inside["judged"] and inside["inside"]  # the interval holds 0
    outside = rows_inside({("prose", 1): row([110.0, 112.2, 107.8])}, control)
    assert outside["judged"] and not outside["inside"]
    got = outside["rows"][0]
    assert got["delta"] == pytest.approx(0.10) and 0 < got["delta_lo"] < 0.10 < got["delta_hi"]
    assert got["method"] == "Welch's t on log tok/s of the reps, 95 %"
    void = rows_inside({("prose", 1): row([100.0, 50.0, 100.0], "void")}, control)
    assert not void["judged"]
    # The campaign's declared noise is a floor: a delta whose interval excludes 0 is still no
    # effect when it is no larger than the floor.
    floored = rows_inside({("prose", 1): row([88.0, 89.8, 86.2])}, control, floor=0.20)
    assert floored["inside"] and floored["rows"][0]["floor"] == 0.20
    assert floored["rows"][0]["delta_hi"] < 0  # excludes 0: only the floor keeps it inside
    assert not rows_inside({("prose", 1): row([75.0, 76.5, 73.5])}, control, floor=0.20)["inside"]
    _, reasons = no_effect_verdict({}, outside, {"identical": 1, "n": 1})
    assert reasons == [f"prose/c1 +10.0% [{got['delta_lo']:+.1%}, {got['delta_hi']:+.1%}] beyond "
                       "the noise (floor 0.0%)"]


def write_throughput(run_dir: Path, rows: list[tuple[str, str, str, int, float, float]]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "throughput.csv").open("w") as f:
        w = csv.writer(f)
        w.writerow(["session", "window", "class", "concurrency", "agg_tok_s", "spread", "status"])
        for session, window, cls, c, tok, spread in rows:
            w.writerow([session, window, cls, c, tok, spread, "ok"])


def test_control_drift(tmp_path: Path) -> None:
    """Rows without receipts (no source): the medians, no interval, the floor alone decides."""
    run, base = tmp_path / "run", tmp_path / "base"
    write_throughput(run, [("s1", "control", "prose", 1, 100.0, 0.01),
                           ("s1", "control", "prose", 4, 300.0, 0.01),
                           ("s1", "block5", "prose", 1, 120.0, 0.01),
                           ("s2", "control", "prose", 1, 100.1, 0.01),
                           ("s3", "control", "prose", 1, 95.0, 0.01)])
    write_throughput(base, [("s1", "control", "prose", 1, 90.0, 0.02),
                            ("s2", "control", "prose", 1, 110.0, 0.03)])
    order = ["s1", "s2", "s3"]
    drift = control_drift(run, order, {}, floor=0.02)
    assert [(d["session"], d["against"], d["delta_pct"], d["delta_lo_pct"], d["verdict"])
            for d in drift] == [("s2", "s1-control", 0.1, None, "within noise"),
                                ("s3", "s2-control", -5.09, None, "drift")]
    with_base = control_drift(run, order, {}, base, floor=0.02)[2:]
    assert [d["against"] for d in with_base] == ["baseline base"] * 3
    assert with_base[0]["reference_tok_s"] == 100.0  # the median of the baseline's controls
    assert with_base[0]["delta_pct"] == 0.0 and with_base[2]["verdict"] == "drift"
    assert control_drift(run, order, {}, floor=0.06)[1]["verdict"] == "within noise"


def test_verdict_row_and_csv(tmp_path: Path) -> None:
    verdicts: dict[str, dict[str, Any]] = {
        "knobs": {"verdict": "ruler suspect", "summary": "RULER SUSPECT: x"},
        "greedy": {"verdict": "diverged", "figures": {"identical": 19, "n": 20,
                                                      "first_divergence": 4,
                                                      "reference": "s1-control"}},
        "teacher_forced": {"verdict": "differs", "figures": {"p50": 0.01, "p99": 0.4,
                                                             "max": 1.2, "floored": 3}},
        "kl": {"verdict": "above floor", "figures": {"mean": 0.05, "p99": 0.3, "floor": 0.0}},
        "tool_probe": {"verdict": "ok", "summary": "10/10 parseable tool calls"},
    }
    row = verdict_row("s1", "w3", "fused verify", True, verdicts)
    assert row["greedy"] == "19/20" and row["first_divergence"] == 4
    assert row["dlogp_p99"] == 0.4 and row["kl_mean"] == 0.05 and row["tool_calls"] == "10/10"
    write_verdicts(tmp_path, [row])
    back = list(csv.DictReader((tmp_path / "verdicts.csv").open()))
    assert back[0]["knobs"] == "ruler suspect" and back[0]["floored"] == "3"


def test_reference_round_trip(tmp_path: Path) -> None:
    items = [Item("greedy-0", [1, 2], [3, 4], [0, 1], "ab")]
    scores = [[score(0, [(3, -0.1)]), score(1, [(4, -0.2)])]]
    ref = Reference("s1", "control", 10, [{"prompt": "p"}], items, scores, scores, items, scores,
                    None, {"run": "r"}, {"repeat": {"mean": 0.0}})
    path = tmp_path / "reference.json"
    path.write_text(json.dumps(ref.to_json()))
    back = load_reference(path)
    assert back == ref and back.kl_floor() == 0.0


def test_tool_arguments_and_chat_reply() -> None:
    ok = {"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert tool_arguments(ok) == {"city": "Paris"}
    assert tool_arguments({"function": {"name": "f", "arguments": "{not json"}}) is None
    assert tool_arguments({"function": {"arguments": "{}"}}) is None  # no name
    reply = chat_reply({"choices": [{"message": {"content": "x", "reasoning_content": "r"},
                                     "finish_reason": "stop"}],
                        "usage": {"completion_tokens": 5,
                                  "completion_tokens_details": {"reasoning_tokens": 3}}})
    assert (reply.reasoning, reply.reasoning_tokens, reply.completion_tokens) == ("r", 3, 5)


def test_verdicts_read_on_the_progress_line() -> None:
    base = {"seq": 9, "ts": 0.0, "session": "s1", "window": "noop"}
    suspect = {**base, "kind": "verdict", "check": "knobs", "verdict": "ruler suspect",
               "summary": "RULER SUSPECT: chat_template_kwargs inert (identical on 3/3 prompts)"}
    assert format_event(suspect) == ("s1/noop knobs: RULER SUSPECT: chat_template_kwargs inert "
                                     "(identical on 3/3 prompts)")
    greedy = {**base, "kind": "verdict", "check": "greedy", "verdict": "diverged",
              "summary": "3/8 identical, first divergence at character 4"}
    assert format_event(greedy) == "s1/noop greedy: diverged: 3/8 identical, first divergence at character 4"
    assert format_event({**base, "kind": "quality_started"}) == "s1/noop quality checks"


def test_bad_baseline_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.commands.cli import main

    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN.format(n=2))
    code = main(["run", str(spec), "--headless", "--results-dir", str(tmp_path / "r"),
                 "--baseline", str(tmp_path / "nowhere")])
    assert code == 2
    assert "--baseline" in capsys.readouterr().err and not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------ the real server


def start(testbed: tb_mod.Testbed, *args: str) -> Iterator[Server]:
    port = free_port()
    argv = [str(testbed.llama_server), *args, "-c", "2048", "-np", "1", "-t", "1",
            "--host", "127.0.0.1", "--port", str(port)]
    server = rp.ProcessServer(LaunchPlan(f"ruler-test-quality-{port}", argv, {}, {}, port))
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
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours."]}}
  concurrency: [1]
  reps: 3
  requests_per_rep: 4    # long enough reps that a contended machine's noise shows in their spread
  max_tokens: 24
  sampling: {{temperature: 0, seed: 1234}}
  knobs:
    chat_template_kwargs: {{enable_thinking: false}}
quality:
  greedy: {{n: {n}, max_tokens: 16}}
  teacher_forced: {{top_k: 10, positions: 3}}
leak: {{spread: 0.20}}  # the declared noise of a shared 2-core CPU: the no-effect tolerance's floor
timeouts: {{boot: 120, request: 120}}
"""
N = 5


@pytest.fixture(scope="module")
def run_dir(testbed: tb_mod.Testbed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from engine.campaign.load import load_campaign
    from engine.commands.launch import ENGINE_JSON, prepare
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
    assert ne["verdict"] == "no observable effect", ne["summary"]
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
