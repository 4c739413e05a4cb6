"""Starting, detaching and resuming runs.

``ruler run`` validates, resolves the runtime and the testbed, claims the run directory and records
``engine.json`` (what the engine process needs). The engine itself (``ruler engine RUN_DIR``, run in
the foreground by ``--headless`` or in a new session by ``--detach``) takes the run lock, writes
``engine.pid``, serves the control socket and runs the campaign to its end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import errno
import fcntl
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO, Any, TextIO

from engine import __version__, files, gpu, testbed
from engine.campaign.checks.warnings import campaign_warnings
from engine.campaign.launch import (
    campaign_items,
    check_quality_files,
    images,
    quality_texts,
    resolve_runtime,
)
from engine.campaign.load import SpecError, load_campaign
from engine.campaign.prompts import DataFileError
from engine.campaign.redact import frozen_copy, redactor_for
from engine.campaign.spec import Campaign
from engine.campaign.variables import UnresolvedVariable
from engine.commands.console import open_console
from engine.commands.invocation import ruler_command
from engine.commands.progress import printer
from engine.context import Phase
from engine.control import SOCKET, ControlServer
from engine.errors import (
    EXIT_NOTHING_MEASURED,
    EXIT_OK,
    EXIT_STOPPED,
    BadInput,
    EngineError,
)
from engine.quality import Quality
from engine.quality.stacks import StackParity
from engine.record import results
from engine.record.journal import damage_report
from engine.record.liveness import LOCK, PID, lock_state, read_pid
from engine.record.snapshot import fold_journal
from engine.run.measure import Measurement
from engine.run.runner import Runner, frozen_items
from engine.sanitize import terminal
from engine.words import RunStatus

# A results disk that fills up or turns read-only mid-run: the run stops and says so.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}

LOG = "engine.log"


def testbed_variables(campaign: Campaign, with_image: bool) -> dict[str, str]:
    """Prepare the local testbed only when the campaign references it."""
    if "${testbed." not in campaign.source_text:
        return {}
    try:
        return testbed.ensure(with_image=with_image,
                              with_vllm="${testbed.vllm_" in campaign.source_text).variables()
    except testbed.TestbedError as e:
        raise EngineError(f"testbed: {e}") from e


def default_phases(baseline: str | None = None) -> list[Phase]:
    """Parity across stacks (a campaign with a window on another stack), measurement, then the
    quality and ruler checks (``baseline``: a run for control drift)."""
    return [StackParity(), Measurement(), Quality(Path(baseline) if baseline else None)]


def baseline_arg(value: str | None) -> str | None:
    """``--baseline RUN_DIR``: a finished run with a throughput.csv, as an absolute path."""
    if not value:
        return None
    path = Path(value)
    if not (path / results.THROUGHPUT).is_file():
        raise BadInput(f"--baseline {value}: not a ruler run directory with a {results.THROUGHPUT}")
    return str(path.resolve())


def _load(path: str | Path) -> Campaign:
    try:
        return load_campaign(path)
    except SpecError as e:
        raise BadInput("\n".join(str(p) for p in e.problems)) from e
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror or e}") from e


def prepare(file: str, results_dir: str, runtime_override: str | None,
            baseline: str | None = None) -> Path:
    """Validate and claim a run directory; nothing is started yet."""
    campaign = _load(file)
    for warning in campaign_warnings(campaign):
        print(warning, file=sys.stderr)
    baseline = baseline_arg(baseline)
    results.writable_dir(Path(results_dir), "--results-dir")
    runtime = resolve_runtime(campaign, runtime_override)
    # A Slurm job that starts a container (docker, pyxis) runs the campaign's image too.
    needs_image = runtime == "docker" or (runtime == "slurm" and campaign.slurm.start != "process")
    variables = testbed_variables(campaign, with_image=needs_image)
    try:  # a file only the run can resolve (${...}) is read before a run directory exists
        campaign_items(campaign, variables)
        check_quality_files(campaign, variables)
    except DataFileError as e:
        raise BadInput(f"{file}: {e.what} {e}") from e
    except UnresolvedVariable as e:
        raise BadInput(f"{file}: unresolved variable {e} in a prompt file's path") from e
    try:
        run_dir = results.new_run_dir(Path(results_dir), campaign.name)
        # Every file the run's start writes passes its filter, as every later one does (a prompt
        # frozen into prompts.json may hold a secret).
        results.guard(run_dir, redactor_for(campaign))
        results.write_json(run_dir / results.ENGINE_JSON, {
            "run_id": f"{run_dir.name}.{uuid.uuid4().hex[:8]}",
            "campaign_source": str(Path(file).resolve()), "runtime": runtime,
            "variables": variables, "baseline": baseline})
        frozen_items(campaign, run_dir, variables)
        if texts := quality_texts(campaign, variables):  # the campaign's copy reads them back
            results.write_json(run_dir / results.QUALITY, texts)
        frozen = frozen_copy(campaign.source_text, redactor_for(campaign))  # no secret, however written
        results.write_atomic(run_dir / results.CAMPAIGN, frozen)
        results.write_json(run_dir / results.ENV, env_facts(
            runtime, images(campaign, variables) if runtime == "docker" else [],
            {"testbed": variables}))
    except OSError as e:
        raise BadInput(f"--results-dir {results_dir}: cannot write there "
                       f"({e.strerror or e}{f': {e.filename}' if e.filename else ''})") from e
    return run_dir


def _docker_facts(images: list[str]) -> dict[str, Any]:
    from engine.runtime import docker  # the Docker SDK only for a docker run's env.json

    return docker.env_facts(images)


def env_facts(runtime: str, images: list[str], extra: dict[str, Any]) -> dict[str, Any]:
    """env.json: the machine the run starts on, each fact from where it is gathered."""
    return {
        "ruler_version": __version__,
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "runtime": runtime,
        "host": {
            "node": platform.node(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "docker": _docker_facts(images) if runtime == "docker" else None,
        # From NVML, per GPU (engine.gpu): or why there is none ("no NVIDIA GPU (...)").
        "gpu": gpu.env_facts(),
        **extra,
    }


def _take_lock(run_dir: Path) -> IO[str]:
    """One engine per run directory: the lock lives as long as the engine process."""
    f = results.open_append(run_dir / LOCK, text=True)  # held until the process exits
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = read_pid(run_dir)
        f.close()
        raise BadInput(f"another engine (pid {pid}) is already running {run_dir}; "
                       f"attach to it with: {ruler_command()} attach {run_dir}") from None
    return f


def _campaign_for(run_dir: Path, info: dict[str, Any]) -> Campaign:
    """The campaign as it was frozen: a source edited since then is refused, not silently used."""
    source = Path(info["campaign_source"])
    campaign = _load(source)
    frozen = files.read_text(run_dir / results.CAMPAIGN)
    if frozen_copy(campaign.source_text, redactor_for(campaign)) != frozen:
        raise BadInput(f"{source} changed since the run started; the run's frozen copy is "
                       f"{run_dir / results.CAMPAIGN}: restore the source to resume")
    return campaign


def refuse_damaged(run_dir: Path) -> None:
    """A damaged journal is not resumed: it is the run's only record, and appending after the
    damage would bury it. Nothing is written; the operator decides what the bad lines were."""
    path = run_dir / results.JOURNAL
    damage = fold_journal(path).damage
    if damage:
        raise BadInput(
            f"{damage_report(path, damage)}\n"
            f"ruler will not resume {run_dir}: its journal has {len(damage)} damaged line(s), "
            f"named above, and is left as it is. Move each one out of the journal (into a file "
            f"of its own) or restore the journal from a copy, check it with "
            f"`{ruler_command()} status {run_dir}`, then resume again.")


def run_engine(run_dir: Path, echo: bool) -> int:
    """The engine process: lock, pid, control socket, signals, then the campaign."""
    try:
        lock = _take_lock(run_dir)
        refuse_damaged(run_dir)
        info = results.read_frozen(run_dir / results.ENGINE_JSON, lambda d: isinstance(d, dict) and all(
            k in d for k in ("campaign_source", "runtime", "variables")))
        campaign = _campaign_for(run_dir, info)
        results.write_atomic(run_dir / PID, f"{os.getpid()}\n")
        files.clear(run_dir / SOCKET)  # a dead engine's socket, or what else was put there
        runner = Runner(campaign, run_dir, info["runtime"], info["variables"],
                        printer() if echo else None, default_phases(info.get("baseline")),
                        baseline=Path(info["baseline"]) if info.get("baseline") else None)
    except files.Unwritable:  # said as it is: the path and what is there
        raise
    except OSError as e:
        raise BadInput(f"{run_dir}: cannot use the run directory "
                       f"({e.strerror or e}{f': {e.filename}' if e.filename else ''})") from e

    def graceful(signum: int, _frame: object) -> None:
        # Not emitted here: the handler may run inside JournalWriter.append, whose lock the interrupted
        # code holds; the runner's next event records it first (Runner.emit).
        runner.controls.signals.append(signal.Signals(signum).name)
        runner.controls.abort.set()

    signal.signal(signal.SIGTERM, graceful)
    signal.signal(signal.SIGINT, graceful)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a dropped SSH link is not a reason to stop
    control = ControlServer(run_dir, runner.command)
    try:
        status = runner.run()
        _summary(run_dir)  # while the run is still this engine's: its lock held, its files its own
    except OSError as e:
        if e.errno not in STORAGE_ERRNOS:
            raise
        raise EngineError(
            f"the run stopped: cannot write {e.filename or run_dir} ({e.strerror or e}). Its "
            f"journal keeps every event written before that; once the disk takes writes again "
            f"(room made, the file system repaired or remounted), continue with: "
            f"{ruler_command()} run --resume {run_dir}") from e
    finally:
        # Each cleanup on its own: a disk that failed (EIO, EROFS) keeps the stale socket and pid,
        # which the next engine replaces (the lock says who is alive); the error to say is the
        # run's, above.
        control.close()
        with contextlib.suppress(OSError):
            (run_dir / PID).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            lock.close()
    if status == RunStatus.ABORTED:
        return EXIT_STOPPED
    if not runner.state.measured:
        print(terminal(f"ruler run: measured nothing: {runner.state.nothing_measured()}"), file=sys.stderr)
        return EXIT_NOTHING_MEASURED
    return EXIT_OK


def _summary(run_dir: Path) -> None:
    """The end of a run: results.json written and the summary table printed (each row's figures,
    latencies and call, as ``vllm bench serve`` ends), once, after the last progress line."""
    from engine.report.export import summary_text, write_results
    from engine.report.run import ReportError

    try:
        path, doc = write_results(run_dir)
    except (ReportError, OSError) as e:  # the run's record stands; this summary is read from it
        print(terminal(f"ruler run: no summary ({e})"), file=sys.stderr)
        return
    print(summary_text(doc) + f"results: {path}", flush=True)


def spawn_detached(run_dir: Path) -> int:
    """Start the engine in its own session: a hangup of this terminal does not reach it."""
    with results.open_append(run_dir / LOG) as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine", "engine", str(run_dir)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until it serves, so `ctl` works right away
        if (run_dir / SOCKET).exists():
            return proc.pid
        if proc.poll() is not None:
            tail = files.read_text(run_dir / LOG, errors="replace")[-2000:]
            raise EngineError(f"the engine exited at once (code {proc.returncode}):\n{tail}")
        time.sleep(0.05)
    return proc.pid


def cmd_run(args: argparse.Namespace) -> int:
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / results.ENGINE_JSON).exists():
            raise BadInput(f"{run_dir} is not a ruler run directory (no {results.ENGINE_JSON})")
        live, why = lock_state(run_dir)
        if live:
            raise BadInput(f"an engine is still running {run_dir}: nothing to resume")
        if live is None:  # a second engine only on a run proven over, as ruler prune asks
            raise BadInput(f"whether an engine still runs {run_dir} is unknown: {why}")
        refuse_damaged(run_dir)
    else:
        if not args.file:
            raise BadInput("ruler run: give a campaign FILE or --resume RUN_DIR")
        run_dir = prepare(args.file, args.results_dir, args.runtime,
                          getattr(args, "baseline", None))
    print(f"run directory: {run_dir}", flush=True)
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if args.headless or not (args.detach or interactive):
        code = run_engine(run_dir, echo=True)
        print(f"run directory: {run_dir}")
        return code
    pid = spawn_detached(run_dir)
    if args.detach or not interactive:
        print(f"engine detached (pid {pid}); follow it with: {ruler_command()} attach {run_dir}")
        return 0
    return open_console(run_dir)


class Guarded:
    """A text stream that is a file under a run directory (the detached engine's stdout and
    stderr are its engine.log): each write passes the directory's filter, as every other file
    there does, once the run has registered one (results.guard); an error or a traceback may quote
    what a server said."""

    def __init__(self, stream: TextIO, run_dir: Path) -> None:
        self._stream, self._run_dir = stream, run_dir

    def write(self, text: str) -> int:
        scrub = results.scrub_for(self._run_dir)
        self._stream.write(scrub(text) if scrub else text)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def cmd_engine(args: argparse.Namespace) -> int:
    """The detached engine (spawn_detached), its output the run's engine.log."""
    run_dir = Path(args.run_dir)
    sys.stdout = Guarded(sys.stdout, run_dir)
    sys.stderr = Guarded(sys.stderr, run_dir)
    return run_engine(run_dir, echo=True)
