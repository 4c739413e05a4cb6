"""A FAKE llama-server and a FAKE runtime, in-process, for the component tier's run-loop tests.

Nothing here is llama.cpp: :class:`FakeLlama` answers, on the one fake streaming server
(tests/sse.py), what the engine asks of llama-server (engine/servers/llamacpp/client.py,
engine/run/loadgen.py, engine/run/boot.py, engine/run/measure.py, engine/quality) with a toy
deterministic "model", so that every path of the run loop (void, rerun, resume, advance, abort,
a dying server, a boot that never becomes ready) runs in seconds and on cue. The behaviours a
real server cannot be made to show on cue (a slow rep, a death mid-stream, a hang) are knobs on
:class:`Behaviour`, flipped by a test the moment the engine journals an event (:class:`Hooks`).
The real server is tested in tests/integration/.

What the fake serves, and where the engine reads it:

- its "boot log": real recorded llama-server output (tests/fixtures/logs/llamacpp_c{2048,4096}_np2.log,
  chosen by the plan's ``-c``), so the llama.cpp adapter extracts real boot facts and sees ready;
- ``GET /health``: 503 "Loading model" until the boot log has been printed, then 200;
- ``POST /v1/chat/completions``: streamed (SSE chunks, a finish reason, then usage and timings
  with draft counts) at a paced rate of tokens per second, or not streamed with per-token
  logprobs and ids (the quality phase's greedy replies);
- ``GET /metrics``: llama.cpp's Prometheus counters, speculative-decoding ones included, that
  advance with every token served;
- a prefix cache as llama-server's: a prompt served before is served again from the cache but
  for its last token (``usage.prompt_tokens_details.cached_tokens``, the cached-tokens counter),
  unless the request says ``cache_prompt: false``;
- ``POST /apply-template``, ``POST /tokenize``, ``POST /completion`` (greedy generation from ids,
  and ``n_probs`` top logprobs for teacher forcing).

The toy model: text splits on whitespace into tokens, a word's id is stable (crc32), and the next
token is a function of the last two ids, drawn from a small vocabulary. So a greedy reply is the
same on every fake server for the same prompt, and teacher forcing agrees with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.record.journal import Event
from engine.runtime.base import Host, LaunchError, LaunchPlan, Placement, QueueReport, free_port
from tests.paths import FIXTURES
from tests.sse import DONE, Reply, Request, SseServer, event

LOGS = FIXTURES / "logs"
READY_LINE = "srv  update_slots: all slots are idle"  # the last line a booted server prints
WORDS = ["the", "sea", "is", "calm", "and", "blue", "under", "a", "wide", "sky", "while", "gulls",
         "call", "over", "waves", "function", "adds", "two", "numbers", "returns", "their", "sum",
         "in", "one", "line", "of", "code"]
EOS = 2
# Request fields that are not knobs: a knob is anything else a request carries.
NOT_KNOBS = {"messages", "max_tokens", "stream", "stream_options", "temperature", "seed",
             "logprobs", "top_logprobs", "cache_prompt", "id_slot", "tools", "tool_choice",
             "return_tokens", "verbose"}


# ------------------------------------------------------------------ the toy model


def token_id(word: str) -> int:
    return 100 + zlib.crc32(word.encode()) % 100_000


VOCAB = {token_id(w): w for w in WORDS}
VOCAB_IDS = sorted(VOCAB)


def tokenize(text: str) -> list[int]:
    return [1] + [token_id(w) for w in text.split()]  # 1: the begin-of-text token (add_special)


def piece(tid: int) -> str:
    return "" if tid == EOS else " " + VOCAB.get(tid, f"<{tid}>")


def ranked(prefix: list[int], salt: int = 0) -> list[int]:
    """The vocabulary in order of preference after ``prefix``: the toy model's logits."""
    a, b = (prefix[-2:] if len(prefix) >= 2 else [0, *prefix[-1:]])
    h = zlib.crc32(f"{a},{b},{salt}".encode())
    first = EOS if h % 23 == 0 and len(prefix) > 12 else VOCAB_IDS[h % len(VOCAB_IDS)]
    rest = [t for t in VOCAB_IDS if t != first]
    k = h % len(rest)
    return [first, *rest[k:], *rest[:k]]


def greedy(prompt_ids: list[int], max_tokens: int, salt: int = 0, stop_at_eos: bool = True) -> list[int]:
    out: list[int] = []
    while len(out) < max_tokens:
        nxt = ranked(prompt_ids + out, salt)[0]
        if nxt == EOS and not stop_at_eos:
            nxt = ranked(prompt_ids + out, salt)[1]
        out.append(nxt)
        if nxt == EOS:
            break
    return out


def render(messages: list[dict[str, Any]], after_role: str = "") -> str:
    text = "".join(f"<|im_start|>{m['role']}{after_role} {m.get('content') or ''} <|im_end|> "
                   for m in messages)
    return text + "<|im_start|>assistant"


def logprob(rank: int) -> float:
    return round(-0.05 - 1.5 * rank, 4)


# ------------------------------------------------------------------ behaviour


@dataclass
class Behaviour:
    """What one fake server does. Tests flip the fields while it runs (from :class:`Hooks`)."""

    tok_s: float = 160.0  # streamed tokens per second per request
    boot_log: Path | None = None  # None: the recorded log for the plan's -c (2048 or 4096)
    ready: bool = True  # False: /health answers 503 "Loading model" forever
    boot_exit: int | None = None  # the process exits with this code once its boot log is out
    die_mid_stream: bool = False  # the next chat request streams two tokens, then the server dies
    hang: bool = False  # chat requests stream one token, then hang until the server ends
    inert_knobs: set[str] = field(default_factory=set)  # knobs the fake's "template" ignores
    # A planted template difference: this after each turn's role ("x": one more token a turn).
    after_role: str = ""
    stream_status: int = 200  # another: each streamed chat request is answered with it, an error
    # With stream_status: the error's body as these bytes (text/plain), not the JSON error object.
    error_body: bytes | None = None
    # Above 0: each streamed chat request sends one SSE line this long with no end, then closes.
    endless_line: int = 0
    malformed_stream: bool = False  # each streamed chat request's events are not JSON
    # A server that echoes what it was given (a secret of its environment): its boot log prints
    # these lines before its ready line, and every reply it generates starts with the first.
    echo: tuple[str, ...] = ()
    stream_error: str = ""  # each streamed chat request ends after its first token with this error
    # Each streamed chat request holds after its first token until the barrier's parties are all
    # in flight: only that many sent at once (an open loop, or as many workers) get through.
    together: threading.Barrier | None = None


def log_for(plan: LaunchPlan) -> Path:
    argv = plan.argv
    ctx = argv[argv.index("-c") + 1] if "-c" in argv else "2048"
    return LOGS / f"llamacpp_c{4096 if ctx == '4096' else 2048}_np2.log"


# ------------------------------------------------------------------ the HTTP side


async def on_a_thread(wait: Callable[[], object]) -> None:
    """A blocking wait (the server's end, a barrier) on a thread of its own, while the loop serves
    the other streams: a barrier's parties are in flight at once, more than a pool may hold."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if not done.done():
            done.set_exception(error) if error is not None else done.set_result(None)

    def run() -> None:
        error: BaseException | None = None
        try:
            wait()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting stream
            error = e
        with contextlib.suppress(RuntimeError):  # the loop closed first
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, daemon=True).start()
    await done


class FakeLlama:
    """The fake server's HTTP side, an answer of the one fake streaming server (tests/sse.py);
    ``handle`` is one :class:`FakeServer`."""

    def __init__(self, handle: FakeServer) -> None:
        self.handle = handle

    async def __call__(self, req: Request, reply: Reply) -> None:
        s = self.handle
        if req.method == "GET":
            if req.path == "/health":
                if s.booted.is_set() and s.behaviour.ready:
                    reply.json(200, {"status": "ok"})
                else:
                    reply.json(503, {"error": {"message": "Loading model", "type": "unavailable_error",
                                               "code": 503}})
            elif req.path == "/metrics":
                reply.send(200, s.metrics_text().encode(), "text/plain; version=0.0.4")
            else:
                reply.json(404, {"error": {"message": "File Not Found", "code": 404}})
            return
        body = req.json()
        if req.path == "/v1/chat/completions":
            s.count("chat")
            s.chats.append(body)
            ids = tokenize(render(body["messages"], s.behaviour.after_role))
            salt = s.salt(body)
            if body.get("stream"):
                await self._stream(reply, ids, int(body.get("max_tokens") or 16), salt,
                                   s.prompt(ids, body.get("cache_prompt", True) is not False))
            else:
                self._chat(reply, ids, int(body.get("max_tokens") or 16), salt, bool(body.get("logprobs")),
                           bool(body.get("verbose") and body.get("return_tokens")))
        elif req.path == "/apply-template":
            reply.json(200, {"prompt": render(body["messages"], s.behaviour.after_role)})
        elif req.path == "/tokenize":
            reply.json(200, {"tokens": tokenize(body["content"])})
        elif req.path == "/completion":
            self._completion(reply, body)
        else:
            reply.json(404, {"error": {"message": "File Not Found", "code": 404}})

    def _chat(self, reply: Reply, ids: list[int], max_tokens: int, salt: int, logprobs: bool,
              verbose: bool) -> None:
        out = greedy(ids, max_tokens, salt)
        text = self.handle.said("".join(piece(t) for t in out).strip())
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop" if out[-1:] == [EOS] else "length"}
        if logprobs:
            choice["logprobs"] = {"content": [
                {"id": t, "token": piece(t), "logprob": logprob(0),
                 "top_logprobs": [{"id": t, "token": piece(t), "logprob": logprob(0)}]} for t in out]}
        reply.json(200, {"choices": [choice], "object": "chat.completion",
                         "usage": {"completion_tokens": len(out), "prompt_tokens": len(ids),
                                   "total_tokens": len(out) + len(ids)},
                         **({"__verbose": {"tokens": out, "content": text}} if verbose else {})})

    async def _stream(self, reply: Reply, ids: list[int], max_tokens: int, salt: int, cached: int) -> None:
        s, b = self.handle, self.handle.behaviour
        if b.stream_status != 200 and b.error_body is not None:
            reply.send(b.stream_status, b.error_body, "text/plain")
            return
        if b.stream_status != 200:
            reply.json(b.stream_status, {"error": {"message": "injected", "code": b.stream_status}})
            return
        reply.stream()
        if b.endless_line:
            block = b"x" * (1 << 20)
            reply.write(b"data: ")
            for _ in range(b.endless_line // len(block)):
                reply.write(block)
                await reply.drain()
            return
        if b.malformed_stream:
            reply.write(b"data: {not json\n\ndata: [DONE]\n\n")
            return
        out = greedy(ids, max_tokens, salt, stop_at_eos=False)  # as a load request: max_tokens
        if not await self._tokens(reply, out):
            return
        drafts, drafted, accepted = s.served(len(out), len(ids))
        last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        usage = {"choices": [], "usage": {"completion_tokens": len(out), "prompt_tokens": len(ids),
                                          "total_tokens": len(out) + len(ids),
                                          "prompt_tokens_details": {"cached_tokens": cached}},
                 "timings": {"predicted_n": len(out), "draft_n": drafted, "draft_n_accepted": accepted}}
        reply.write(event(last) + event(usage) + DONE)

    async def _tokens(self, reply: Reply, out: list[int]) -> bool:
        """The reply's tokens, paced; False when the stream stopped before its end (the server
        gone, or a fault its behaviour injects)."""
        s, b = self.handle, self.handle.behaviour
        dies, b.die_mid_stream = b.die_mid_stream, False
        # Each token at its own time from the first (not a gap after the last): a wake-up a busy
        # host delays is made up at the next token, so a rep lasts what its pace says, where gaps
        # slept one after another would add every delay and spread the reps of a loaded machine.
        gap, loop = 1.0 / b.tok_s, asyncio.get_running_loop()
        start = loop.time()
        for i, t in enumerate(out):
            if i:
                await asyncio.sleep(max(0.0, start + i * gap - loop.time()))
            if s.ended.is_set():
                return False  # the server is gone: the stream stops mid-way, as a killed server's does
            if dies and i == 2:
                s.die()
                return False
            if b.hang and i == 1:
                await on_a_thread(s.ended.wait)
                return False
            if b.together is not None and i == 1:
                try:
                    await on_a_thread(b.together.wait)
                except threading.BrokenBarrierError:  # the server ended first
                    return False
            if b.stream_error and i == 1:
                reply.write(event({"error": {"message": b.stream_error}}))
                return False
            delta = {"choices": [{"index": 0, "delta": {"content": piece(t)}, "finish_reason": None}]}
            reply.write(event(delta))
            await reply.drain()
        return True

    def _completion(self, reply: Reply, body: dict[str, Any]) -> None:
        prompt = body["prompt"]
        ids = [int(t) for t in prompt] if isinstance(prompt, list) else tokenize(str(prompt))
        n_probs = int(body.get("n_probs") or 0)
        if n_probs:
            top = ranked(ids)[:n_probs]
            reply.json(200, {"content": piece(top[0]), "completion_probabilities": [{
                "id": top[0], "token": piece(top[0]), "logprob": logprob(0),
                "top_logprobs": [{"id": t, "token": piece(t), "logprob": logprob(r)}
                                 for r, t in enumerate(top)]}]})
            return
        out = greedy(ids, int(body.get("n_predict") or 16))
        reply.json(200, {"content": self.handle.said("".join(piece(t) for t in out)), "tokens": out,
                         "stop_type": "eos" if out[-1:] == [EOS] else "limit"})


# ------------------------------------------------------------------ the server handle


class FakeServer:
    """A :class:`engine.runtime.base.Server` around one :class:`FakeLlama` (a FAKE, for tests)."""

    def __init__(self, plan: LaunchPlan, behaviour: Behaviour) -> None:
        self.plan, self.behaviour = plan, behaviour
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.identity: dict[str, object] = {"runtime": "fake", "name": plan.name, "port": self.port}
        self.booted, self.ended = threading.Event(), threading.Event()
        self.code: int | None = None
        self.orphaned = False  # see orphan()
        self.requests: dict[str, int] = {}
        self.chats: list[dict[str, Any]] = []  # every chat request's body, as it came
        self._lock = threading.Lock()
        self._counters = {"prompt_tokens": 0, "prompt_tokens_cached": 0, "tokens_predicted": 0,
                          "drafts": 0, "drafted": 0, "accepted": 0}
        self._per_pos = [0, 0]  # verify steps that accepted the draft at position 0, 1
        self._cache: set[tuple[int, ...]] = set()  # prompts in the "prefix cache"
        self.http = SseServer(FakeLlama(self), self.port).start()

    # -- what the engine calls

    def lines(self) -> Iterator[str]:
        text = (self.behaviour.boot_log or log_for(self.plan)).read_text().splitlines()
        cut = next((i + 1 for i, line in enumerate(text) if line.endswith(READY_LINE)), len(text))
        yield from [*self.behaviour.echo, *text[:cut]]
        if self.behaviour.boot_exit is not None:
            self._end(self.behaviour.boot_exit)
            return
        self.booted.set()
        while not self.ended.wait(0.05):
            if self.orphaned:
                return  # the killed engine's end of the log pipe is gone
        yield from text[cut:]  # what llama-server prints on its way out

    def alive(self) -> bool:
        return not self.ended.is_set()

    def said(self, text: str) -> str:
        """A generated reply, after what the server echoes (Behaviour.echo)."""
        return f"{self.behaviour.echo[0]} {text}" if self.behaviour.echo else text

    def exit_code(self) -> int | None:
        return self.code

    def stop(self) -> None:
        if not self.orphaned:
            self._end(0)

    # -- what tests call

    def orphan(self) -> None:
        """As the engine that started it is killed: its log pipe closes, the server runs on and
        stop() does nothing (only a stray sweep ends it)."""
        self.orphaned = True

    def die(self, code: int = 137) -> None:
        """As a SIGKILL: the port closes and every stream in flight is cut."""
        self._end(code)

    def count(self, what: str) -> None:
        with self._lock:
            self.requests[what] = self.requests.get(what, 0) + 1

    def salt(self, body: dict[str, Any]) -> int:
        """Knobs change the reply (as a real template or sampler would), except inert ones."""
        knobs = {k: v for k, v in body.items()
                 if k not in NOT_KNOBS and k not in self.behaviour.inert_knobs}
        return zlib.crc32(json.dumps(knobs, sort_keys=True).encode()) if knobs else 0

    def prompt(self, ids: list[int], reuse: bool) -> int:
        """Counts one prompt: the tokens served from the cache (all but the last, which
        llama-server always computes again), the rest computed."""
        key = tuple(ids)
        with self._lock:
            cached = len(ids) - 1 if reuse and key in self._cache else 0
            self._cache.add(key)
            self._counters["prompt_tokens"] += len(ids) - cached
            self._counters["prompt_tokens_cached"] += cached
        return cached

    def served(self, tokens: int, prompt: int) -> tuple[int, int, int]:
        """Counts one streamed reply: a verify step per token, each drafting two tokens. How many
        it accepts varies with the prompt, so that requests and classes differ: of its steps, k
        (the prompt's length mod 3, at most a third of them) accept both drafts, 2k accept none,
        the rest one."""
        k = min(prompt % 3, tokens // 3)
        drafts, drafted, accepted = tokens, 2 * tokens, tokens - k
        with self._lock:
            c = self._counters
            c["tokens_predicted"] += tokens
            c["drafts"] += drafts
            c["drafted"] += drafted
            c["accepted"] += accepted
            self._per_pos[0] += tokens - 2 * k  # the steps that accepted one or two
            self._per_pos[1] += k  # those that accepted two
        return drafts, drafted, accepted

    def metrics_text(self) -> str:
        names = {"prompt_tokens": "prompt_tokens_total",
                 "prompt_tokens_cached": "prompt_tokens_cached_total",
                 "tokens_predicted": "tokens_predicted_total",
                 "drafts": "spec_decode_num_drafts_total",
                 "drafted": "spec_decode_num_draft_tokens_total",
                 "accepted": "spec_decode_num_accepted_tokens_total"}
        per_pos = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        with self._lock:
            return "".join(f"# TYPE llamacpp:{names[k]} counter\nllamacpp:{names[k]} {v}\n"
                           for k, v in self._counters.items()) + f"# TYPE {per_pos} counter\n" + "".join(
                f'{per_pos}{{position="{i}"}} {v}\n' for i, v in enumerate(self._per_pos))

    def _end(self, code: int) -> None:
        with self._lock:
            if self.ended.is_set():
                return
            self.code = code
            self.ended.set()
        if self.behaviour.together is not None:
            self.behaviour.together.abort()  # a stream held there ends with the server
        self.http.stop()


class FakeRuntime:
    """A :class:`engine.runtime.base.Runtime` whose servers are :class:`FakeServer` (a FAKE).

    ``behave(plan)`` gives each window its behaviour (default: a healthy server).
    """

    name = "fake"

    def __init__(self, behave: Callable[[LaunchPlan], Behaviour] | None = None) -> None:
        self.behave = behave or (lambda plan: Behaviour())
        self.servers: list[FakeServer] = []
        self.strays_asked: list[list[dict[str, object]]] = []
        self.dirs_asked: list[str] = []  # the run directory identity each stray search gave
        self.unreachable = ""  # the reason start() and host() give, when set

    def start(self, plan: LaunchPlan) -> FakeServer:
        if self.unreachable:
            raise LaunchError(self.unreachable)
        server = FakeServer(plan, self.behave(plan))
        self.servers.append(server)
        return server

    @property
    def current(self) -> FakeServer:
        return self.servers[-1]

    def preflight(self, run_dir: Path) -> None:
        """Nothing to check up front: a window that cannot start is rejected with the reason."""

    def stop_strays(self, run_id: str, dir_id: str,
                    servers: Iterable[dict[str, object]]) -> list[dict[str, object]]:
        asked = list(servers)
        self.strays_asked.append(asked)
        self.dirs_asked.append(dir_id)
        stopped = []
        for s in self.servers:
            if s.alive() and any(a.get("name") == s.plan.name and a.get("port") == s.port
                                 for a in asked):
                s.orphaned = False
                s.stop()
                stopped.append({"name": s.plan.name, "port": s.port})
        return stopped

    def host(self, node: str | None = None) -> Host:
        """The fake's "machine"; a test makes a place that does not answer with ``unreachable``."""
        if self.unreachable:
            raise LaunchError(self.unreachable)
        return Host(name=f"fake-{id(self):x}", cpus=1)

    def close(self) -> None:
        for s in self.servers:
            s.orphaned = False
            s.stop()


# ------------------------------------------------------------------ a batch job (Slurm), faked


@dataclass
class Queue:
    """How a FAKE batch job waits in its scheduler's queue: each (state, reason, seconds) in turn,
    then it runs on ``node`` (or never, when ``forever``)."""

    waits: list[tuple[str, str, float]] = field(default_factory=list)
    node: str = "fake-node"
    forever: bool = False


class FakeBatchServer(FakeServer):
    """A :class:`engine.runtime.base.BatchServer` (a FAKE): a :class:`FakeServer` whose job first
    waits in a queue on a timetable (:class:`Queue`) and prints nothing until it runs, as a Slurm
    job's boot.log is empty until its node starts it. The real one is engine.runtime.slurm, run
    against a real Slurm in tests/integration/test_slurm_cluster.py."""

    jobs = 100  # job ids, as a scheduler hands them out

    def __init__(self, plan: LaunchPlan, behaviour: Behaviour, queue: Queue, log_path: Path) -> None:
        super().__init__(plan, behaviour)
        FakeBatchServer.jobs += 1
        self.job, self.queue, self.log_path = str(FakeBatchServer.jobs), queue, log_path
        self.identity = {"runtime": "fake-batch", "name": plan.name, "job": self.job}
        self.placed = threading.Event()
        self.state = "PENDING"

    def wait_placed(self, timeout: float, cancelled: Callable[[], bool],
                    on_queue: QueueReport) -> Placement:
        started = time.monotonic()
        steps = list(self.queue.waits)
        until = started
        while True:
            now = time.monotonic()
            if steps and now >= until:
                state, reason, seconds = steps.pop(0)
                on_queue(state, reason)
                until = now + seconds
            elif not steps and now >= until and not self.queue.forever:
                self.state = "RUNNING"
                self.placed.set()
                return Placement(True, now - started, facts={
                    "node": self.queue.node, "slurm_job": self.job, "slurm_cpus": "2",
                    "slurm_gpus": "none"})
            if cancelled():
                return Placement(False, now - started, "cancelled")
            if now - started > timeout:
                return Placement(False, now - started, f"Fake job {self.job} still {self.state} "
                                                       f"after {timeout:g} s (queue timeout)")
            time.sleep(0.02)

    def lines(self) -> Iterator[str]:
        while not self.placed.wait(0.05):
            if self.ended.is_set():
                return
        # The node writes boot.log itself (ruler only reads it): so does the fake, line by line.
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in super().lines():
                log.write(line + "\n")
                log.flush()
                yield line

    def stop(self) -> None:
        self.state = "CANCELLED" if not self.placed.is_set() else "COMPLETED"
        self.orphaned = False
        super().stop()

    def record(self) -> dict[str, object]:
        return {"JobId": self.job, "JobState": self.state, "NodeList": self.queue.node
                if self.placed.is_set() else ""}

    def ended_text(self) -> str:
        return "" if self.alive() else f"Fake job {self.job} {self.state}"


class FakeBatchRuntime(FakeRuntime):
    """A runtime of :class:`FakeBatchServer` (a FAKE): ``queue(plan)`` gives each job its wait.
    Named slurm, so that the runner plans each window as for Slurm (a batch job, with its window
    directory and the node it must run on)."""

    name = "slurm"

    def __init__(self, queue: Callable[[LaunchPlan], Queue],
                 behave: Callable[[LaunchPlan], Behaviour] | None = None) -> None:
        super().__init__(behave)
        self.queue = queue
        self.plans: list[LaunchPlan] = []

    def start(self, plan: LaunchPlan) -> FakeBatchServer:
        self.plans.append(plan)
        if plan.workdir is None:  # the runner plans a batch job with its window directory
            raise AssertionError(f"{plan.name}: planned without a window directory")
        log = plan.workdir / f"boot{plan.tag}.log"
        server = FakeBatchServer(plan, self.behave(plan), self.queue(plan), log)
        self.servers.append(server)
        return server


def by_window(behaviours: dict[str, Behaviour]) -> Callable[[LaunchPlan], Behaviour]:
    """Behaviour per window name (as in the campaign); a healthy server for the others."""
    def behave(plan: LaunchPlan) -> Behaviour:
        window = re.sub(r"^[^-]+-", "", plan.labels.get("ruler.window", ""))
        return behaviours.get(window, Behaviour())
    return behave


# ------------------------------------------------------------------ driving the engine on cue


class Hooks:
    """The runner's printer: each rule acts once, on the runner's thread, the moment the engine
    journals an event that matches it, before the engine takes its next step (so "after rep 1"
    means exactly that). An exception in an action is kept (the runner swallows a printer's) and
    raised again by :meth:`check`."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.rules: list[tuple[dict[str, Any], Callable[[Event], object]]] = []
        self.errors: list[BaseException] = []

    def on(self, action: Callable[[Event], object], **match: Any) -> None:  # its value unused
        self.rules.append((match, action))

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        for rule in list(self.rules):
            match, action = rule
            if all(event.get(k) == v for k, v in match.items()):
                self.rules.remove(rule)
                try:
                    action(event)
                except BaseException as e:  # noqa: BLE001 - kept for check()
                    self.errors.append(e)

    def check(self) -> None:
        if self.errors:
            raise self.errors[0]
        assert not self.rules, f"rules that never fired: {[m for m, _ in self.rules]}"


# ------------------------------------------------------------------ a GPU


@dataclass
class FakeGpu:
    """A FAKE NVML reader (engine.gpu.Nvml's methods) for GPU 0: no GPU is read. Its power, SM
    clock and clock-event reasons are what a test sets while a campaign runs (a throttle on cue);
    its energy counter integrates that power over time as the real one does; each memory reading
    takes the next of ``used_mib`` (the last repeats), so a test scripts a GPU whose memory comes
    back slowly, or never."""

    power_w: float = 300.0
    sm_mhz: int = 1980
    reasons: int = 0
    used_mib: list[int] = field(default_factory=lambda: [1000])
    total_mib: int = 81920
    holding: list[dict[str, Any]] = field(default_factory=list)
    energy_mj: float = 1_000_000.0
    _last: float = field(default_factory=time.monotonic)
    memory_reads: int = 0

    def count(self) -> int:
        return 1

    def index_of(self, uuid: str) -> int | None:
        return None

    def sample(self, index: int) -> dict[str, Any]:
        now = time.monotonic()
        self.energy_mj += self.power_w * (now - self._last) * 1000
        self._last = now
        return {"t": round(now, 4), "gpu": index, "sm_mhz": self.sm_mhz, "mem_mhz": 3201,
                "power_w": self.power_w, "energy_mj": int(self.energy_mj), "temp_c": 40, "util": 90,
                "mem_util": 30, "mem_used_mib": self.used_mib[0], "reasons": self.reasons}

    def memory(self, index: int) -> dict[str, int]:
        used = self.used_mib[min(self.memory_reads, len(self.used_mib) - 1)]
        self.memory_reads += 1
        return {"used_mib": used, "free_mib": self.total_mib - used, "total_mib": self.total_mib}

    def holders(self, index: int) -> list[dict[str, Any]]:
        return list(self.holding)
