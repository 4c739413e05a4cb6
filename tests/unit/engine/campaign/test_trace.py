"""Trace files read, windowed and synthesised (engine.campaign.sources.trace): Mooncake's JSONL
and the plain CSV/JSONL, their errors at file:line, shared blocks shared."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from engine.campaign.prompts import DataFileError
from engine.campaign.sources import trace


def write(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


MOONCAKE = [{"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]},
            {"timestamp": 1250, "input_length": 1000, "output_length": 7, "hash_ids": [1, 2]},
            {"timestamp": 3000, "input_length": 300, "output_length": 3, "hash_ids": [9]}]


def test_mooncake_times_from_the_first_in_seconds(tmp_path: Path) -> None:
    reqs = trace.read_trace(write(tmp_path / "t.jsonl", MOONCAKE))
    assert [r.t for r in reqs] == [0.0, 0.25, 2.0]
    assert [(r.input_length, r.output_length, r.hash_ids, r.line) for r in reqs][0] == (700, 5, (1, 2), 1)


def test_plain_csv_and_jsonl_read_alike(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("time,input_length,output_length\n0.5,10,4\n1.5,20,8\n")
    a = trace.read_trace(tmp_path / "t.csv")
    b = trace.read_trace(write(tmp_path / "t.jsonl", [{"time": 0.5, "input_length": 10, "output_length": 4},
                                                      {"time": 1.5, "input_length": 20, "output_length": 8}]))
    def fields(reqs: list[trace.TraceRequest]) -> list[tuple[object, ...]]:
        return [(r.t, r.input_length, r.output_length, r.hash_ids) for r in reqs]

    assert fields(a) == fields(b) == [(0.0, 10, 4, None), (1.0, 20, 8, None)]
    assert [r.line for r in a] == [2, 3]


@pytest.mark.parametrize(("row", "problem"), [
    ({"timestamp": 5, "input_length": 0, "output_length": 1}, "input_length must be a whole number"),
    ({"timestamp": 5, "input_length": 3}, "no output_length"),
    ({"input_length": 3, "output_length": 1}, "no timestamp (ms) or time (s)"),
    ({"timestamp": -1, "input_length": 3, "output_length": 1}, "at least 0"),
    ({"timestamp": 5, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2]},
     "input_length 1100 is more than its 2 hash_ids of 512 tokens hold"),
    ({"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": ["a"]}, "hash_ids must be"),
    ({"timestamp": 0, "input_length": 3, "output_length": 1}, "time goes backwards (0 s after 1 s)"),
])
def test_a_bad_record_is_named_by_its_line(tmp_path: Path, row: dict[str, object], problem: str) -> None:
    path = write(tmp_path / "t.jsonl", [{"timestamp": 1000, "input_length": 3, "output_length": 1}])
    path.write_text(path.read_text() + "\n" + json.dumps(row) + "\n")  # line 3: a blank line before it
    with pytest.raises(DataFileError) as err:
        trace.read_trace(path)
    assert str(err.value).startswith(f"{path}:3: ") and problem in str(err.value)


def test_bad_json_and_csv_say_where(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"time": 0, "input_length": 1, "output_length": 1}\n{"time": \n')
    with pytest.raises(DataFileError, match=r"a\.jsonl:2: not JSON"):
        trace.read_trace(tmp_path / "a.jsonl")
    (tmp_path / "b.csv").write_text("time,input_length,output_length\n0,1,1\n1,2\n")
    with pytest.raises(DataFileError, match=r"b\.csv:3: expected 3 fields"):
        trace.read_trace(tmp_path / "b.csv")
    (tmp_path / "c.csv").write_text("when,input_length\n0,1\n")
    with pytest.raises(DataFileError, match=r"c\.csv:1: the header must name"):
        trace.read_trace(tmp_path / "c.csv")
    (tmp_path / "d.jsonl").write_text("\n")
    with pytest.raises(DataFileError, match="no records: the file is empty"):
        trace.read_trace(tmp_path / "d.jsonl")


def test_window_keeps_its_span_timed_from_its_start(tmp_path: Path) -> None:
    reqs = trace.read_trace(write(tmp_path / "t.jsonl", MOONCAKE))
    got = trace.window(reqs, start=0.2, seconds=1.0)
    assert [r.line for r in got] == [2] and got[0].t == pytest.approx(0.05)
    assert [r.line for r in trace.window(reqs, start=0.25)] == [2, 3]


def test_shared_blocks_share_their_words_and_lengths_hold(tmp_path: Path) -> None:
    reqs = trace.read_trace(write(tmp_path / "t.jsonl", MOONCAKE))
    a, b, c = (trace.prompt(r, seed=7).split(" ") for r in reqs)
    assert (len(a), len(b), len(c)) == (700, 1000, 300)
    assert a == b[:700]  # the same blocks: the same words
    assert c[:50] != a[:50]
    assert trace.items(reqs, 7) == trace.items(reqs, 7)  # seeded: identical every time
    assert trace.prompt(reqs[0], seed=8) != trace.prompt(reqs[0], seed=7)
    item = trace.items(reqs, 7)[1]
    assert (item["max_tokens"], item["at"], item["messages"][0]["role"]) == (7, 0.25, "user")


def test_requests_without_hash_ids_share_nothing(tmp_path: Path) -> None:
    rows = [{"time": t, "input_length": 40, "output_length": 2} for t in (0, 1)]
    reqs = trace.read_trace(write(tmp_path / "t.jsonl", rows))
    a, b = (trace.prompt(r, 1) for r in reqs)
    assert a != b and trace.shared_fraction(reqs) == 0.0


def test_summary_counts_the_shared_prefix_and_the_rate(tmp_path: Path) -> None:
    reqs = trace.read_trace(write(tmp_path / "t.jsonl", MOONCAKE))
    s = trace.summary(reqs, time_scale=2.0)
    # Request 2 finds both its blocks sent (1000 of its tokens), the others nothing.
    assert s["shared_prefix"] == round(1000 / 2000, 4)
    assert (s["requests"], s["duration_s"], s["mean_rps"]) == (3, 4.0, 0.5)
    assert s["input_length"]["max"] == 1000 and s["output_length"]["p50"] == 5


def test_explain_says_what_the_class_becomes(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", MOONCAKE)
    lines = trace.describe(trace.TraceSpec(file="t.jsonl", time_scale=0.5), path)
    assert "3 requests from 0 s to its end" in lines[0] and "over 1 s" in lines[0]
    assert "input tokens p50 700" in lines[1] and lines[2].startswith("shared blocks: 50.0%")
    with pytest.raises(DataFileError, match="no requests in the window"):
        trace.spec_items(trace.TraceSpec(file="t.jsonl", start=10.0), path)


def test_validate_names_a_damaged_trace_or_chat_record_and_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from engine.campaign.load import SpecError, load_campaign
    from engine.commands.validate import cmd_validate
    from tests.campaigns import campaign

    write(tmp_path / "t.jsonl", [MOONCAKE[0], {"timestamp": 2000, "input_length": 5}])
    (tmp_path / "c.jsonl").write_text('{"messages": [{"role": "assistant", "content": "hi"}]}\n')
    path = tmp_path / "c.yaml"
    for cls, bad in (({"trace": {"file": "t.jsonl"}},
                      f"trace file {tmp_path / 't.jsonl'}:2: no output_length"),
                     ({"conversations": {"file": "c.jsonl"}},
                      f"conversations file {tmp_path / 'c.jsonl'}:1: message 1 is from the assistant")):
        path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={"x": cls}), sort_keys=False))
        with pytest.raises(SpecError) as err:
            load_campaign(path)
        (problem,) = err.value.problems
        assert bad in str(problem)
        assert cmd_validate(str(path)) == 2
        assert bad in capsys.readouterr().err


def test_the_workload_s_loads_for_a_trace_and_a_multi_turn_class(tmp_path: Path) -> None:
    import yaml

    from engine.campaign.load import SpecError, load_campaign
    from tests.campaigns import campaign

    write(tmp_path / "t.jsonl", MOONCAKE)
    path = tmp_path / "c.yaml"
    chat = {"conversations": {"generate": {"conversations": 2, "turns": 2, "user_tokens": 3,
                                           "reply_tokens": 2}}}
    path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={
        "t": {"trace": {"file": "t.jsonl"}}, "chat": chat}, concurrency=[1, 2], rate=[3.0]),
        sort_keys=False))
    wl = load_campaign(path).workload
    assert wl.loads_of("t") == [(0, None)]  # its own times: one row, 'trace'
    assert wl.loads_of("chat") == [(1, None), (2, None)]  # closed loop only
    path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={"chat": chat}, concurrency=[],
                                            rate=[3.0]), sort_keys=False))
    with pytest.raises(SpecError, match="class 'chat' is multi-turn: it needs workload.concurrency"):
        load_campaign(path)
    path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={"t": {"trace": {"file": "t.jsonl"}}},
                                            concurrency=[]), sort_keys=False))
    assert load_campaign(path).workload.loads_of("t") == [(0, None)]  # a trace alone needs no load


def test_a_request_of_thousands_of_blocks_is_explained_in_linear_memory() -> None:
    """Every prefix was a tuple of its blocks: 30000 hash ids held 30000^2 / 2 keys (gigabytes)."""
    n = 5000
    reqs = [trace.TraceRequest(1, 0.0, n * 512, 1, tuple(range(n))),
            trace.TraceRequest(2, 1.0, n * 512, 1, tuple(range(n)))]
    tracemalloc.start()
    try:
        shared = trace.shared_fraction(reqs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert shared == 0.5  # the second request is all the first's prefix
    assert peak < 20 << 20, f"{peak / (1 << 20):.0f} MiB for {n} blocks"  # quadratic: over 100 MiB


def test_validate_reads_a_trace_without_synthesising_its_prompts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Synthesising every prompt (512 seeded words a block) made a 1e6-line trace take minutes to
    validate: the file's records and window are what can be wrong, and all validate reads."""
    import yaml

    from engine.campaign.load import load_campaign
    from tests.campaigns import campaign

    (tmp_path / "t.jsonl").write_text("".join(
        json.dumps({"timestamp": i, "input_length": 600, "output_length": 2, "hash_ids": [i, i + 1]}) + "\n"
        for i in range(5)))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={
        "replay": {"trace": {"file": "t.jsonl"}}}), sort_keys=False))

    def no_prompts(*_: object) -> str:
        raise AssertionError("validate synthesised a prompt")

    monkeypatch.setattr(trace, "prompt", no_prompts)
    assert list(load_campaign(path).workload.classes) == ["replay"]


def _validate_peak(tmp_path: Path, name: str, n: int) -> tuple[int, int]:
    """The peak of traced memory of validating a trace of ``n`` requests, and the file's size."""
    import yaml

    from engine.campaign.load import load_campaign
    from tests.campaigns import campaign

    path = tmp_path / name
    with path.open("w") as f:
        if name.endswith(".csv"):
            f.write("time,input_length,output_length\n")
            f.writelines(f"{i / 10},{600 + i % 7},{1 + i % 300}\n" for i in range(n))
        else:
            f.writelines(json.dumps({"timestamp": i * 100, "input_length": 1000, "output_length": 2,
                                     "hash_ids": [i % 64, i + 1]}) + "\n" for i in range(n))
    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={
        "replay": {"trace": {"file": name, "start": 1.0, "seconds": 10.0}}}), sort_keys=False))
    tracemalloc.start()
    try:
        load_campaign(spec)
        return tracemalloc.get_traced_memory()[1], path.stat().st_size
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", ["t.jsonl", "t.csv"])
def test_validate_streams_a_trace_in_memory_that_does_not_grow_with_it(tmp_path: Path, name: str) -> None:
    """A 1e6-line trace took minutes and 1.5 GB to validate: its text and every request were held.
    Checking streams the file a line at a time: a trace 400 times longer adds far less than its
    own size to the peak."""
    small, _ = _validate_peak(tmp_path, name, 100)
    large, size = _validate_peak(tmp_path, name, 40_000)
    assert large - small < size / 4, (f"{(large - small) / (1 << 20):.2f} MiB more for a "
                                      f"{size / (1 << 20):.1f} MiB trace")
