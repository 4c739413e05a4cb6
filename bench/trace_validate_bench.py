"""How long `ruler validate` takes on a long trace, and how much memory: a Mooncake-style JSONL trace
of N requests (each 2-8 hash ids, a quarter of them shared) written to a temporary directory, then
``load_campaign`` on a campaign that replays it, timed, with its peak of traced Python memory.

    .venv/bin/python bench/trace_validate_bench.py [--requests 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from engine.campaign.load import load_campaign
from tests.campaigns import campaign


def write_trace(path: Path, n: int) -> None:
    rng = random.Random(1)
    with path.open("w") as f:
        for i in range(n):
            ids = [rng.randrange(64) if k == 0 else i * 8 + k for k in range(rng.randint(2, 8))]
            f.write(json.dumps({"timestamp": i * 10, "input_length": len(ids) * 512 - 7,
                                "output_length": rng.randint(1, 300), "hash_ids": ids}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "t.jsonl"
        write_trace(trace, args.requests)
        path = Path(d) / "c.yaml"
        path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={
            "replay": {"trace": {"file": trace.name}}}), sort_keys=False))
        tracemalloc.start()
        started = time.perf_counter()
        load_campaign(path)
        took = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        size = trace.stat().st_size
    print(f"{args.requests} requests ({size / (1 << 20):.0f} MiB): "
          f"validated in {took:.1f} s, peak traced memory {peak / (1 << 20):.0f} MiB")


if __name__ == "__main__":
    main()
