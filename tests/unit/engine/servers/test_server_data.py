"""Whatever a server sends is data: the parsers' properties (hypothesis: any bytes, any text, any
JSON) give records, counters or verdicts with a reason, never an exception.

The quality-request properties use an in-process fake server (httpx.MockTransport) that answers
any JSON (fault injection). A whole campaign against bad server data, behind a fault-injecting
proxy in front of the real llama-server, is tests/integration/test_bad_server_campaign.py.
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.quality.probe import Probe
from engine.record.request import RequestRecord
from engine.run.client.record import Events, new_record, token_limit
from engine.run.client.sse import sse_events
from engine.run.counters import Scrape, metrics_delta, read_counters
from engine.servers import get_adapter
from engine.servers.client import Unsupported, chat_reply, request_body
from engine.servers.data import BadServerData
from engine.servers.prometheus import only_families, summed_samples
from tests.paths import FIXTURES

ADAPTERS = [get_adapter(n) for n in ("llamacpp", "sglang", "vllm")]

# -- strategies -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _chunk_like(draw: st.DrawFn) -> Any:
    """A stream chunk an OpenAI server might send, with any field swapped for any JSON value."""
    chunk: dict[str, Any] = {
        "choices": [{"delta": {"content": draw(st.text(max_size=4))},
                     "finish_reason": draw(st.sampled_from([None, "stop", "length"]))}],
        "usage": {"completion_tokens": draw(st.integers(0, 40)), "prompt_tokens": 3},
        "timings": {"draft_n": 4, "draft_n_accepted": 2},
        "sglext": {"spec_tokens_details": [{"spec_num_proposed_drafts": 4, "spec_num_correct_drafts": 2}]},
        "metrics": {"speculative_decoding": {"num_draft_tokens": 4, "num_accepted_draft_tokens": 2}},
    }
    for _ in range(draw(st.integers(0, 3))):  # corrupt a field at some depth
        path = draw(st.sampled_from([("choices",), ("choices", 0), ("choices", 0, "delta"),
                                     ("choices", 0, "delta", "content"), ("choices", 0, "finish_reason"),
                                     ("usage",), ("usage", "completion_tokens"), ("usage", "prompt_tokens"),
                                     ("timings", "draft_n"), ("sglext", "spec_tokens_details"),
                                     ("metrics", "speculative_decoding", "num_draft_tokens")]))
        node: Any = chunk
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier corruption removed the path
    return chunk


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    """Bytes a server could send: SSE events of chunk-like JSON, any JSON, [DONE], comments, line
    ends of every kind, and raw bytes."""
    parts = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["chunk", "json", "done", "comment", "raw"]))
        if kind == "raw":
            parts.append(draw(st.binary(max_size=24)))
            continue
        payload = (b"[DONE]" if kind == "done" else b"keep-alive" if kind == "comment"
                   else json.dumps(_chunk_like(draw) if kind == "chunk" else draw(json_values)).encode())
        field = b": " if kind == "comment" else b"data: "
        end = draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r", b"\n", b"\r\n", b""]))
        parts.append(field + payload + end)
    return b"".join(parts)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def _events_in(blocks: list[bytes]) -> list[bytes]:
    out, buf = [], b""
    for block in blocks:
        payloads, buf = sse_events(buf + block)
        out += payloads
    return out


def _record(blocks: list[bytes], max_tokens: int) -> RequestRecord:
    """A request's record from a stream's body read in these blocks, each parsed on its own."""
    record = new_record(0, 0, 0)
    record["start"] = 0.0
    events = Events(record, ADAPTERS[0])
    for block in blocks:
        if block:
            events.feed([block], [1.0])
    events.finish(2.0, token_limit(request_body("p", max_tokens, {}, {})))
    return record


# -- the SSE client -----------------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(sse_streams(), st.lists(st.integers(0, 400), max_size=12))
def test_sse_events_are_the_same_wherever_the_stream_is_cut(data: bytes, cuts: list[int]) -> None:
    assert _events_in(_cut(data, cuts)) == _events_in([data])


@settings(max_examples=200, deadline=None)
@given(sse_streams(), st.lists(st.integers(0, 400), max_size=12), st.integers(1, 64))
def test_any_stream_gives_a_record_or_its_error_never_an_exception(data: bytes, cuts: list[int],
                                                                  max_tokens: int) -> None:
    record = _record(_cut(data, cuts), max_tokens)
    assert record == _record([data], max_tokens)  # the record, too, whatever the cuts
    if record["error"] is None:
        tokens = record["completion_tokens"]
        assert isinstance(tokens, int) and not isinstance(tokens, bool) and 0 <= tokens <= max_tokens
    else:
        assert isinstance(record["error"], str) and record["error"]
    acc = record.get("acceptance")
    assert acc is None or all(isinstance(v, int) and v >= 0 for v in acc.values())
    json.dumps(record)  # the receipt can be written


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_per_request_acceptance_is_counts_or_bad_data(chunk: Any) -> None:
    for adapter in ADAPTERS:
        try:
            acc = adapter.request_acceptance(chunk if isinstance(chunk, dict) else {"timings": chunk,
                                                                                    "metrics": chunk})
        except BadServerData:
            continue
        assert acc is None or (all(isinstance(v, int) and v >= 0 for v in acc.values())
                               and acc["accepted"] <= acc["drafted"])


# -- /metrics ------------------------------------------------------------------------------------------

METRIC_NAMES = ["llamacpp:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_draft_tokens_total",
                "llamacpp:spec_decode_num_accepted_tokens_total", "sglang:spec_verify_calls_total",
                "sglang:generation_tokens_total", "sglang:spec_num_draft_tokens",
                "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                "vllm:spec_decode_num_accepted_tokens_total", "x", "1bad",
                # A family an adapter reads by another spelling, its _created sample, the cache's,
                # the positions'.
                "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_created",
                "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                "llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total",
                "vllm:spec_decode_num_accepted_tokens_per_pos_total"]


@st.composite
def prometheus_texts(draw: st.DrawFn) -> str:
    """Exposition-like lines (the counters the adapters read, any value, labels, comments) mixed
    with any text."""
    lines = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["sample", "type", "help", "text"]))
        name = draw(st.sampled_from(METRIC_NAMES))
        if kind == "sample":
            labels = draw(st.sampled_from(["", '{model="m"}', '{a="1",b="2"}', "{a=}", '{a="\\q"}',
                                           '{position="0"}', '{position="1",engine="0"}']))
            value = draw(st.sampled_from(["1", "0", "-3", "NaN", "+Inf", "-Inf", "1e400", "7.5", "x", ""])
                         | st.floats().map(repr))
            lines.append(f"{name}{labels} {value}")
        elif kind == "type":
            lines.append(f"# TYPE {name} {draw(st.sampled_from(['counter', 'gauge', 'histogram', 'odd']))}")
        elif kind == "help":
            lines.append(f"# HELP {name} {draw(st.text(max_size=10))}")
        else:
            lines.append(draw(st.text(max_size=30)))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n# EOF\n"]))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prometheus_texts() | st.text(max_size=200))
def test_any_metrics_text_gives_samples_or_a_reason(text: str) -> None:
    try:
        samples = summed_samples(text)
    except BadServerData as e:
        assert str(e).startswith("not Prometheus text")
    else:
        assert all(isinstance(v, float) for v in samples.values())
    for adapter in ADAPTERS:
        got = read_counters(adapter, 200, text)
        if got.counters is None:
            assert isinstance(got.why, str) and got.why
        else:
            assert all(math.isfinite(v) and v >= 0 for v in got.counters.values())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prometheus_texts())
def test_reading_only_the_families_an_adapter_reads_changes_none_of_its_readings(text: str) -> None:
    # An adapter parses only its own families' lines (a 30 MiB /metrics took 12 s whole): what
    # it reads from them is what it read from the whole text, wherever the whole text parses.
    try:
        whole = summed_samples(text)
    except BadServerData:
        return  # a line of a family no adapter reads may be what the parser refused
    for adapter in ADAPTERS:
        part = adapter.metric_samples(text)
        for read in (adapter.spec_counters, adapter.cache_counters):
            assert repr(read(part)) == repr(read(whole)), (adapter, read)
        assert adapter.missing_metrics(200, part) == adapter.missing_metrics(200, whole)


def test_the_families_an_adapter_reads_are_found_without_reading_the_rest() -> None:
    text = ("# a comment\n"
            "<!-- the first line that is no comment is kept whatever it is -->\n"
            "# HELP vllm:spec_decode_num_drafts_total Number of drafts.\n"
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            'vllm:other_total{a="vllm:spec_decode_num_drafts_total"} 5\n'
            "# A comment about vllm:spec_decode_num_drafts_total\n"
            'vllm:spec_decode_num_drafts_total{engine="0"} 7\n'
            "not prometheus at all\n"
            "vllm:spec_decode_num_drafts_total 1")
    assert only_families(text, ("vllm:spec_decode_num_drafts_total",)) == (
        "<!-- the first line that is no comment is kept whatever it is -->\n"
        "# HELP vllm:spec_decode_num_drafts_total Number of drafts.\n"
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 7\n'
        "vllm:spec_decode_num_drafts_total 1\n")
    for name in ("llamacpp_draft_metrics.txt", "vllm_metrics.txt", "sglang_metrics.txt"):
        recorded = (FIXTURES / "logs" / name).read_text()
        for adapter in ADAPTERS:
            assert adapter.spec_counters(adapter.metric_samples(recorded)) == adapter.spec_counters(
                summed_samples(recorded)), (name, adapter)


def test_metrics_that_are_not_prometheus_text_are_rejected_with_the_reason() -> None:
    llama = ADAPTERS[0]
    got = read_counters(llama, 200, "<html><body>502 Bad Gateway</body></html>")
    assert got.counters is None and got.rejected
    assert got.why == ("/metrics: not Prometheus text (ValueError: invalid metric name:<html><body>502 "
                       "Bad Gateway</body></html>)")
    nan = read_counters(llama, 200, _metrics(1, float("nan"), 1))
    assert nan == Scrape(None, "/metrics: drafted is nan, not a finite number", True)
    # A server without the counters is not bad data: the flag is named, nothing is rejected.
    off = read_counters(llama, 200, "llamacpp:prompt_tokens_total 3\n")
    assert off.counters is None and not off.rejected and "speculation is off" in (off.why or "")


def test_counters_that_go_backwards_give_no_delta() -> None:
    before = read_counters(ADAPTERS[0], 200, _metrics(100, 500, 300))
    assert metrics_delta(before, read_counters(ADAPTERS[0], 200, _metrics(110, 560, 330))) == (
        {"drafts": 10.0, "drafted": 60.0, "accepted": 30.0}, None, False)
    assert metrics_delta(before, read_counters(ADAPTERS[0], 200, _metrics(50, 560, 330))) == (
        None, "counters went backwards (drafts 100 -> 50): the server restarted or reset them", True)


def test_a_position_first_counted_during_the_rep_counts_from_zero() -> None:
    """llama-server exports a draft position's counter only once a draft was accepted there (seen
    live: no per_pos sample on a fresh server, tests/integration/test_acceptance_live.py): a
    position absent before the rep had counted nothing, not "no delta"."""
    per_pos = 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="%d"} %d\n'
    before = read_counters(ADAPTERS[0], 200, _metrics(0, 0, 0))
    after = read_counters(ADAPTERS[0], 200, _metrics(10, 40, 12) + per_pos % (0, 8) + per_pos % (1, 4))
    assert metrics_delta(before, after) == (
        {"drafts": 10.0, "drafted": 40.0, "accepted": 12.0, "pos.0": 8.0, "pos.1": 4.0}, None, False)


# -- quality requests -----------------------------------------------------------------------------------


def _probe_against(adapter: Any, answer: Any) -> Probe:
    """A probe whose every request gets ``answer`` (any JSON) with HTTP 200: a fake server that
    sends bad data, in process."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    return Probe(adapter, httpx.Client(base_url="http://server", transport=transport), lambda: False)


@settings(max_examples=80, deadline=None)
@given(json_values | st.fixed_dictionaries({
    "tokens": json_values, "prompt": json_values, "content": json_values, "text": json_values,
    "choices": json_values, "usage": json_values, "meta_info": json_values,
    "completion_probabilities": json_values}))
def test_any_quality_answer_is_a_result_or_bad_data(answer: Any) -> None:
    for adapter in ADAPTERS:
        probe = _probe_against(adapter, answer)
        calls = [lambda p=probe: p.tokenize("a"), lambda p=probe: p.render("a", {}),
                 lambda p=probe: p.chat("a", {}, 4, 1), lambda p=probe: p.reply("a", {}, 4, 1),
                 lambda p=probe: p.greedy(["a"], {}, 4, 1)]
        for call in calls:
            with contextlib.suppress(BadServerData, Unsupported):
                call()


json_with_non_finite = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8)
    | st.sampled_from([math.nan, math.inf, -math.inf]) | st.floats(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["choices", "message", "content", "tool_calls", "function", "name",
                         "arguments", "usage", "tokens", "x"]), inner, max_size=4),
    max_leaves=16)


@settings(max_examples=150, deadline=None)
@given(json_with_non_finite | st.fixed_dictionaries({"choices": st.just([{"message": {
    "content": "x", "tool_calls": [{"function": {"name": "f", "arguments": {"a": math.nan}}}]}}]),
    "usage": json_with_non_finite}))
def test_a_quality_answer_with_nan_or_infinity_is_bad_data(answer: Any) -> None:
    """A server's answer holding NaN or Infinity (Python's json reads them; JSON has no such
    number) is bad data, never a value on its way to a receipt, which the writers refuse
    (allow_nan=False): the fake server sends the text ``json.dumps`` makes of it."""
    body = json.dumps(answer).encode()
    transport = httpx.MockTransport(lambda request: httpx.Response(
        200, content=body, headers={"content-type": "application/json"}))
    for adapter in ADAPTERS:
        probe = Probe(adapter, httpx.Client(base_url="http://server", transport=transport), lambda: False)
        calls = [lambda p=probe: p.tokenize("a"), lambda p=probe: p.render("a", {}),
                 lambda p=probe: p.chat("a", {}, 4, 1), lambda p=probe: p.reply("a", {}, 4, 1),
                 lambda p=probe: p.greedy(["a"], {}, 4, 1)]
        for call in calls:
            with contextlib.suppress(BadServerData, Unsupported):
                json.dumps(call(), default=vars, allow_nan=False)


def test_a_chat_reply_of_the_wrong_shape_is_bad_data() -> None:
    with pytest.raises(BadServerData, match=r"message.content is 5, not a string"):
        chat_reply({"choices": [{"message": {"content": 5}}]})
    with pytest.raises(BadServerData, match=r"usage.completion_tokens is '12', not a count"):
        chat_reply({"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": "12"}})
    probe = _probe_against(ADAPTERS[0], {"tokens": [1, None]})
    with pytest.raises(BadServerData,
                       match=r"^llamacpp tokenize: /tokenize tokens\[1\] is None, not a count$"):
        probe.tokenize("a")


def _metrics(drafts: float, drafted: float, accepted: float) -> str:
    return "".join(f"llamacpp:{name} {value}\n" for name, value in [
        ("spec_decode_num_drafts_total", drafts), ("spec_decode_num_draft_tokens_total", drafted),
        ("spec_decode_num_accepted_tokens_total", accepted)])
