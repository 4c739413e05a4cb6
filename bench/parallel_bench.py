"""Parallel sessions benchmark: the same two-session campaign run one session after the other (no
places) and both at once (its two places), on the local testbed; prints both wall times and their
ratio.

The campaign is campaigns/demo-parallel.yaml; the sequential run is the same file without its
``places`` (written beside a link to its prompts). Each run is a real ``ruler run --headless``; the
wall time is the journal's, run_started to run_finished (the process's own time is printed beside
it). On a 2-core machine the two servers, ruler's load generator and the quality checks share the
cores, so the parallel run is not twice as fast: the servers contend.

    .venv/bin/python bench/parallel_bench.py [--campaign campaigns/demo-parallel.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def run(campaign: Path, results: Path) -> tuple[float, float, Path]:
    """(journal wall seconds, process wall seconds, run directory) of one headless run."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "engine", "run", str(campaign), "--headless",
                           "--results-dir", str(results)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    took = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{campaign.name} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    (run_dir,) = [p for p in results.iterdir() if (p / "journal.jsonl").exists()]
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    ts = {e["kind"]: e["ts"] for e in events if e["kind"] in ("run_started", "run_finished")}
    return ts["run_finished"] - ts["run_started"], took, run_dir


def sequential_copy(campaign: Path, into: Path) -> Path:
    """The campaign without its places: its sessions run one after another on this machine."""
    spec = yaml.safe_load(campaign.read_text())
    spec.pop("places", None)
    spec.pop("parallel", None)
    spec["name"] = f"{spec['name']}-seq"
    (into / "prompts").symlink_to(campaign.parent / "prompts")
    path = into / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", default=str(ROOT / "campaigns" / "demo-parallel.yaml"))
    args = ap.parse_args()
    campaign = Path(args.campaign).resolve()
    with tempfile.TemporaryDirectory(prefix="ruler-parallel-bench-") as d:
        tmp = Path(d)
        seq_campaign = sequential_copy(campaign, tmp)
        seq, seq_took, _ = run(seq_campaign, tmp / "seq")
        par, par_took, par_dir = run(campaign, tmp / "par")
        places = json.loads((par_dir / "env.json").read_text()).get("places", {})
        where = "; ".join(f"{name}: {', '.join(p.get('sessions', []))}" for name, p in places.items())
    sessions = ", ".join(yaml.safe_load(campaign.read_text())["sessions"])
    print(f"campaign   {campaign.name}: sessions {sessions}")
    print(f"sequential {seq:7.1f} s  (no places; process {seq_took:.1f} s)")
    print(f"parallel   {par:7.1f} s  (places {where}; process {par_took:.1f} s)")
    print(f"ratio      {seq / par:7.2f}x  sequential / parallel, on {os.cpu_count()} cores: the two "
          "servers, ruler's load generator and the quality checks share them and contend, so two "
          "places of one CPU each are not twice one place of both")


if __name__ == "__main__":
    main()
