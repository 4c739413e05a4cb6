"""Benchmark (not a test): what one big /metrics answer costs the engine to read (issue 49: a valid
30 MiB scrape took 6.6 s and 244 MB).

    .venv/bin/python bench/scrape_bench.py [--mib 30]

Two bodies of ``--mib`` MiB, each read as the engine reads a scrape (``read_counters``: the
adapter's samples, its counters and their checks), in a process of its own so its peak RSS is its
own:

- ``other``: one sample line of a family no adapter reads, again and again (the attack's body),
  read by the llama.cpp adapter;
- ``vllm``: a big vLLM's answer, a histogram's buckets for many label sets, with the
  speculative-decoding counters at its end, read by the vLLM adapter.

Each is read twice: as ruler reads it (only the families the adapter reads are parsed,
``engine.servers.prometheus.only_families``) and whole (every line parsed, as before). Each figure
is printed: the wall time of the read and the process's peak RSS over what it held before;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time

from engine.run.counters import read_counters
from engine.servers import get_adapter
from engine.servers.prometheus import summed_samples


def body(kind: str, mib: int) -> str:
    if kind == "other":
        line = "llamacpp:n_drafted_total 1\n"
        return line * ((mib << 20) // len(line))
    parts, size, engine = [], 0, 0
    while size < mib << 20:
        part = "".join(f'vllm:request_latency_seconds_bucket{{engine="{engine}",model_name="m",'
                       f'le="{b}"}} {engine}\n' for b in range(40))
        parts.append(part)
        size += len(part)
        engine += 1
    parts.append('vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
                 'vllm:spec_decode_num_draft_tokens_total{engine="0"} 30\n'
                 'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 12\n')
    return "".join(parts)


def read(kind: str, mib: int, whole: bool, out: mp.Queue[str]) -> None:
    adapter = get_adapter("llamacpp" if kind == "other" else "vllm")
    if whole:  # every line parsed, as the adapters read a scrape before
        adapter.metric_samples = summed_samples  # type: ignore[method-assign]
    text = body(kind, mib)
    held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    got = read_counters(adapter, 200, text)
    spent = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.put(f"{kind:5} {'whole' if whole else 'ruler':5}  {len(text) / 2**20:5.1f} MiB  "
            f"{spent:6.2f} s  +{(peak - held) / 1024:4.0f} MB peak RSS  counters: {got.counters}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=30)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    for kind in ("other", "vllm"):
        for whole in (False, True):
            q: mp.Queue[str] = ctx.Queue()
            p = ctx.Process(target=read, args=(kind, args.mib, whole, q))
            p.start()
            print(q.get(), flush=True)
            p.join()


if __name__ == "__main__":
    main()
