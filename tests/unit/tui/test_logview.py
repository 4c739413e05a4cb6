"""The log pane's serving view (tui/core/logview.py) on recorded logs, and the follower that applies it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from engine.servers import get_adapter
from engine.servers.logs import LogReader
from tests.paths import FIXTURES
from tests.unit.engine.servers.wordings import SGLANG, VLLM
from tui.core.follow import Batch, Follower
from tui.core.logview import MARK, LineClassifier, ServingView, overstruck, shape

SERVING = FIXTURES / "journals" / "finished" / "windows" / "s2-control" / "boot.log"


def recorded_lines() -> dict[str, list[str]]:
    """Every recorded log line per adapter: llama.cpp's logs, vLLM's and SGLang's wordings."""
    llama = [line for p in sorted((FIXTURES / "logs").glob("llamacpp*.log"))
             for line in p.read_text(errors="replace").splitlines()]
    llama += [line for p in sorted((FIXTURES / "journals").glob("*/windows/*/boot.log"))
              for line in p.read_text().splitlines()]
    return {"llamacpp": llama,
            "vllm": [line for line, _ in VLLM.values()],
            "sglang": [line for line, _ in SGLANG.values()]}


def tag(a: LogReader, line: str) -> str:
    return ("error" if a.is_error(line) else "warning" if a.is_warning(line)
            else "fact" if a.parse_line(line) else "")


@pytest.mark.parametrize("server", ["llamacpp", "vllm", "sglang"])
def test_a_line_and_its_shape_are_classed_alike(server: str) -> None:
    """The classifier caches by shape (digits as 0): sound only while no adapter pattern asks
    for a given digit. Every recorded line is classed as its shape is."""
    a = get_adapter(server)
    lines = recorded_lines()[server]
    assert len(lines) > 20
    differ = [line for line in lines if tag(a, line) != tag(a, shape(line))]
    assert differ == []
    classify = LineClassifier(a)
    assert [classify(line) for line in lines] == [tag(a, line) for line in lines]
    assert classify(f"{MARK}12 lines folded]") == "muted"


def test_the_serving_view_keeps_the_boot_then_what_matters_and_counts_the_rest() -> None:
    a = get_adapter("llamacpp")
    lines = SERVING.read_text().splitlines()
    ready = next(i for i, line in enumerate(lines) if a.is_ready_line(line))
    view = ServingView(a)
    shown = view.feed(lines[:500]) + view.feed(lines[500:])  # in two reads, as a follower does
    # The boot, ready line included, as it was.
    assert shown[: ready + 1] == lines[: ready + 1]
    serving = lines[ready + 1:]
    kept = [x for x in shown[ready + 1:] if not x.startswith(MARK)]
    marks = [x for x in shown[ready + 1:] if x.startswith(MARK)]
    # Every error and every line the adapter reads is kept, in order; a warning once per wording.
    assert kept == [x for x in serving if x in kept]
    assert [x for x in serving if tag(a, x) in ("error", "fact")] == \
        [x for x in kept if tag(a, x) in ("error", "fact")]
    warnings = [x for x in serving if tag(a, x) == "warning"]
    assert len({shape(x) for x in warnings}) == sum(tag(a, x) == "warning" for x in kept) < len(warnings)
    # The rest is counted: each count line says how many lines it stands for.
    folded = sum(int(m[len(MARK):].split()[0].replace(",", "")) for m in marks) + view.pending
    assert folded == view.folded == len(serving) - len(kept)
    assert len(shown) < len(lines) / 3  # request lines were most of it


def test_the_follower_hands_over_the_serving_view_and_raw_on_request(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "w").mkdir(parents=True)
    (run / "journal.jsonl").write_text("")
    (run / "w" / "boot.log").write_bytes(SERVING.read_bytes())
    got: list[Batch] = []
    cond = threading.Condition()

    def post(b: Batch) -> None:
        with cond:
            got.append(b)
            cond.notify_all()
        f.ack()

    f = Follower(run, post, interval=0.02)
    stop = threading.Event()
    t = threading.Thread(target=f.run, args=(stop.is_set,), daemon=True)
    t.start()

    def lines_of(gen: int) -> list[str]:
        deadline = time.monotonic() + 10
        with cond:
            while not any(b.log_gen == gen and b.caught_up for b in got):
                assert time.monotonic() < deadline
                cond.wait(0.1)
            return [x for b in got if b.log_gen == gen for x in b.log]

    try:
        expected = ServingView(get_adapter("llamacpp"))
        want = expected.feed(SERVING.read_text().splitlines())
        gen = f.watch_log("w/boot.log", ServingView(get_adapter("llamacpp")))
        assert lines_of(gen) == want
        last = [b for b in got if b.log_gen == gen][-1].log_view
        assert last is not None and last.ready
        assert last.folded == expected.folded and last.pending == expected.pending
        raw = f.watch_log("w/boot.log")
        assert lines_of(raw) == SERVING.read_text().splitlines()
        assert [b for b in got if b.log_gen == raw][-1].log_view is None
    finally:
        stop.set()
        t.join(timeout=5)


def test_a_huge_log_says_what_it_left_unread_and_serves_from_there(tmp_path: Path) -> None:
    """Only a huge log's end is read: its boot is long over, so the serving view applies at once,
    and the pane says how much it did not read."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "journal.jsonl").write_text("")
    request = "9.99.000.001 I slot update_slots: id  0 | task 7 | prompt processing progress\n"
    timing = ("9.99.000.002 I slot print_timing: id  0 | task 7 |        eval time =     600.00 ms /"
              "    16 tokens (   37.50 ms per token,    26.67 tokens per second)\n")
    (run / "boot.log").write_text((request * 9 + timing) * 2000)
    got: list[Batch] = []

    def post(b: Batch) -> None:
        got.append(b)
        f.ack()

    f = Follower(run, post, interval=0.02, log_tail_bytes=64 * 1024)
    stop = threading.Event()
    t = threading.Thread(target=f.run, args=(stop.is_set,), daemon=True)
    t.start()
    try:
        gen = f.watch_log("boot.log", ServingView(get_adapter("llamacpp")))
        deadline = time.monotonic() + 10
        while not any(b.log_gen == gen and b.caught_up for b in got):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(timeout=5)
    shown = [x for b in got if b.log_gen == gen for x in b.log]
    assert shown[0].startswith(f"{MARK}the first ") and "MiB of this log are not shown" in shown[0]
    assert all(x.startswith(MARK) or "print_timing" in x for x in shown)
    assert sum("print_timing" in x for x in shown) > 30


def test_a_progress_bar_redrawn_in_place_shows_as_a_terminal_shows_it() -> None:
    """Issue 48: the vLLM boot log pane showed \\x0d: its weight loading's progress bar goes back
    to the line's start (CR) and draws itself again. Read as the follower reads a log (lines end
    at LF), each line is what a terminal would show: the last drawing over the ones before."""
    raw = (FIXTURES / "logs" / "vllm_cpu_0320_boot.log").read_bytes().split(b"\n")
    lines = [b.decode("utf-8", "replace").rstrip("\r") for b in raw]
    assert any("\r" in line for line in lines)  # the recorded boot draws its bars with CRs
    shown = [overstruck(line) for line in lines]
    assert not any("\r" in line for line in shown)
    assert "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00,  2.14it/s]" in shown
    bars = "\r".join(f"Loading shards: {p:3}% Completed | {p // 50}/2" for p in (0, 50, 100))
    assert overstruck(bars) == "Loading shards: 100% Completed | 2/2"
    assert overstruck("Loading shards: 100%\rdone") == "doneing shards: 100%"  # what a terminal shows
    assert overstruck("ready\r") == "ready"
