"""A window's Slurm job while it runs (its place, its output, its end and record), and the runtime
that submits one per window."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from engine import files
from engine.runtime.base import Host, LaunchError, LaunchPlan, Placement, QueueReport, stray_mark
from engine.runtime.slurm.commands import (
    ENDING_STATES,
    STOP_GRACE_S,
    JobState,
    end_job,
    ended_line,
    job_state,
    parse_scontrol,
    sbatch,
    scontrol_job,
    scontrol_node,
    sinfo_nodes,
    slurm_version,
    squeue,
)
from engine.runtime.slurm.options import CONTROL
from engine.runtime.slurm.script import SECRET_VARIABLE, job_name, job_script

# squeue --json, and the JSON of the jobs it lists, need Slurm 21.08 or newer.
MIN_VERSION = (21, 8)
POLL_S = 1.0  # squeue at most once a second per job, however many readers ask
PLACE_WAIT_S = 60.0  # a running job whose place file never shows: the directory is not shared
# Filesystems that exist on one machine only: a job on another node cannot see files there.
LOCAL_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "f2fs", "vfat",
                      "zfs", "ramfs"})


def _write_owner_only(path: Path, text: str) -> None:
    """A receipt its owner alone may read, like every other file of the run."""
    fd = files.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)  # a file an earlier attempt left keeps its mode otherwise
        f.write(text)


def _fs_of(path: Path) -> tuple[str, str]:
    """(filesystem type, mount point) of the mount holding ``path``, from /proc/mounts."""
    best, kind = "", "unknown"
    target = str(path.resolve())
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind, best
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, parts[2]
    return kind, best


class SlurmServer:
    def __init__(self, plan: LaunchPlan, secrets: Mapping[str, str]) -> None:
        if plan.workdir is None or plan.slurm is None:
            raise LaunchError("runtime slurm: the plan has no window directory or slurm section")
        self._plan = plan
        wdir = plan.workdir
        wdir.parent.mkdir(parents=True, exist_ok=True)
        files.make_dir(wdir)
        self.script_path = wdir / f"job{plan.tag}.sh"
        self.log_path = wdir / f"boot{plan.tag}.log"
        self.place_path = wdir / f"job{plan.tag}.place"
        self.record_path = wdir / f"job{plan.tag}.record.txt"
        for stale in (self.place_path, self.record_path):  # a resumed window's earlier attempt
            files.clear(stale)
        _write_owner_only(self.script_path, job_script(plan, wdir, secrets))
        # The secrets reach the job through sbatch's exported environment, never through job.sh:
        # those no variable held whole under the variables job.sh names them by.
        carried = {name: value for value, name in secrets.items() if name.startswith(SECRET_VARIABLE)}
        env = {**os.environ, **plan.secret_env, **carried}
        self.job = sbatch(self.script_path, env)
        self.base_url = ""  # the job's node and port, once it has said them
        self.identity: dict[str, object] = {
            "runtime": "slurm", "name": plan.name, "job": self.job, "job_name": job_name(plan),
            "comment": plan.slurm.comment, "script": self.script_path.name,
        }
        self._lock = threading.Lock()
        self._seen: JobState | None = None
        self._seen_at = 0.0
        self._record_line = ""
        self._stopped = False

    # -- the job's state, polled at most once a second whoever asks

    def state(self, fresh: bool = False) -> JobState:
        with self._lock:
            now = time.monotonic()
            if fresh or self._seen is None or now - self._seen_at >= POLL_S:
                self._seen, self._seen_at = job_state(self.job), now
            return self._seen

    def wait_placed(self, timeout: float, cancelled: Callable[[], bool],
                    on_queue: QueueReport) -> Placement:
        started = time.monotonic()
        said: tuple[str, str] | None = None
        running_since: float | None = None
        while True:
            waited = time.monotonic() - started
            st = self.state()
            place = self._read_place()
            if place is not None:
                self.base_url = f"http://{place['host']}:{place['port']}"
                facts = {"node": str(place.get("node", "")), "slurm_job": self.job,
                         "slurm_cpus": str(place.get("cpus", "")),
                         "slurm_gpus": str(place.get("gpus", "")) or "none"}
                return Placement(True, waited, facts=facts)
            if not st.active:
                return Placement(False, waited, f"the job ended before it said where its server "
                                                f"listens: {self.ended_text()}")
            if st.queued and (st.state, st.reason) != said:
                said = (st.state, st.reason)
                on_queue(st.state, st.reason)
            if not st.queued:
                running_since = running_since or time.monotonic()
                if time.monotonic() - running_since > PLACE_WAIT_S:
                    return Placement(False, waited, (
                        f"Slurm job {self.job} runs on {st.node or 'its node'} but its place file "
                        f"{self.place_path} has not appeared after {PLACE_WAIT_S:.0f} s: the results "
                        "directory must be on a filesystem the nodes share (ruler reads the job's "
                        "files there)"))
            if cancelled():
                return Placement(False, waited, "cancelled")
            if st.queued and waited > timeout:
                return Placement(False, waited, (
                    f"Slurm job {self.job} still {st.state} after {timeout:g} s (queue timeout; "
                    f"Slurm's reason: {st.reason or 'none given'})"))
            time.sleep(0.25)  # the place file is cheap to look at; squeue is asked once a second

    def _read_place(self) -> dict[str, Any] | None:
        try:
            data = json.loads(files.read_text(self.place_path))  # Unreadable: a ValueError
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("port") and data.get("host") else None

    # -- the server

    def lines(self) -> Iterator[str]:
        """The job's output as its node writes it to boot.log, until the job has ended."""
        handle = None
        while handle is None:
            try:
                handle = files.open_regular(self.log_path)
            except files.Unreadable:  # a FIFO put there: no log to follow, never waited on
                return
            except FileNotFoundError:
                if not self.state().active:
                    return
                time.sleep(0.2)
        with handle:
            buf = b""
            while True:
                chunk = handle.read(1 << 16)
                if chunk:
                    buf += chunk
                    *complete, buf = buf.split(b"\n")
                    for raw in complete:
                        yield raw.decode("utf-8", "replace").rstrip("\r")
                    continue
                if not self.state().active:
                    # The node's last writes may land after the job's end is known: read once more.
                    rest = buf + handle.read()
                    for raw in rest.split(b"\n"):
                        if raw:
                            yield raw.decode("utf-8", "replace").rstrip("\r")
                    return
                time.sleep(0.1)

    def alive(self) -> bool:
        # Read now, not a second ago: a pass whose requests failed blames the server only when its
        # job is seen ending, and a crash between two polls fails its pass within milliseconds.
        st = self.state(fresh=True)
        return st.active and st.state not in ENDING_STATES

    def _settled(self) -> JobState:
        """The job's state; one that is ending is waited for (a cancelled job, Slurm's KillWait)
        so that its exit code and record are the final ones."""
        st = self.state(fresh=True)
        deadline = time.monotonic() + STOP_GRACE_S + 30
        while st.state in ENDING_STATES and time.monotonic() < deadline:
            time.sleep(0.25)
            st = self.state(fresh=True)
        return st

    def exit_code(self) -> int | None:
        st = self._settled()
        if st.active:
            return None
        code = st.exit_code.split(":")[0]
        return int(code) if code.lstrip("-").isdigit() else None

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        end_job(self.job)
        self._keep_record()

    def _keep_record(self) -> None:
        line = scontrol_job(self.job)
        if line:
            self._record_line = line
            _write_owner_only(self.record_path, line + "\n")

    def record(self) -> dict[str, object]:
        line = self._record_line or scontrol_job(self.job)
        f = parse_scontrol(line)
        keys = ("JobId", "JobName", "JobState", "Reason", "ExitCode", "NodeList", "BatchHost",
                "Partition", "NumCPUs", "TRES", "SubmitTime", "StartTime", "EndTime", "Comment")
        return {k: f[k] for k in keys if k in f}

    def ended_text(self) -> str:
        st = self._settled()
        if st.active:
            return ""
        fields = parse_scontrol(self._record_line or scontrol_job(self.job))
        if not fields:
            return f"Slurm job {self.job} {st.state} (Slurm no longer remembers its record)"
        return ended_line(fields, self.job)


class SlurmRuntime:
    """One batch job per window; a killed engine's jobs are found by their comment (the run id)."""

    name = "slurm"

    def __init__(self, secrets: Mapping[str, str] | None = None,
                 partition: str | None = None) -> None:
        # Secret value -> the variable that holds it: job.sh writes a reference to it instead
        # (engine.campaign.redact.Redactor.references).
        self.secrets = dict(secrets or {})
        self.partition = partition

    def preflight(self, run_dir: Path) -> None:
        if CONTROL.search(str(run_dir)):
            raise LaunchError(f"runtime slurm: the results directory {str(run_dir)!r} has a control "
                              "character in its path, which no #SBATCH line can hold (--output): "
                              "--results-dir DIR")
        major, minor, text = slurm_version()
        if (major, minor) < MIN_VERSION:
            raise LaunchError(f"runtime slurm: Slurm {text} is too old: ruler reads `squeue --json`, "
                              f"which needs Slurm {MIN_VERSION[0]}.{MIN_VERSION[1]:02d} or newer")
        squeue()  # raises, saying why, when this Slurm has no JSON output
        here = {socket.gethostname().split(".")[0]}
        nodes = sinfo_nodes(self.partition)
        names = sorted({str(n.get("name", "")) for n in nodes} - {""})
        elsewhere = [n for n in nodes
                     if str(n.get("hostname") or n.get("name") or "").split(".")[0] not in here]
        if not elsewhere:
            return  # every node is this machine: the results directory is shared trivially
        kind, mount = _fs_of(run_dir)
        if kind in LOCAL_FS:
            raise LaunchError(
                f"runtime slurm: the results directory {run_dir} is on {kind} (mounted at {mount}), "
                f"a filesystem of this machine only, but the jobs run on other nodes "
                f"({', '.join(names[:8])}{'...' if len(names) > 8 else ''}): each job writes its "
                "boot.log and says where its server listens in that directory. Put the results on a "
                "filesystem the nodes share (NFS, Lustre, GPFS, BeeGFS, CephFS, WekaFS): --results-dir DIR")

    def start(self, plan: LaunchPlan) -> SlurmServer:
        return SlurmServer(plan, self.secrets)

    def host(self, node: str | None = None) -> Host:
        """The place's node as Slurm describes it; without one, the scheduler picks a node per job
        (each window's boot facts name it)."""
        if not node:
            return Host()
        f = scontrol_node(node)
        host = Host(name=f.get("NodeName", node), os=f.get("OS", ""))
        if f.get("CPUTot", "").isdigit():
            host["cpus"] = int(f["CPUTot"])
        if f.get("Gres") not in (None, "", "(null)"):
            host["gres"] = f["Gres"]
        return host

    def stop_strays(self, run_id: str, dir_id: str,
                    servers: Iterable[dict[str, object]]) -> list[dict[str, object]]:
        stopped: list[dict[str, object]] = []
        run = stray_mark(run_id, "")
        for st in squeue():
            if not (st.name.startswith("ruler-") and st.active
                    and (st.comment == run or st.comment.startswith(run + ";"))):
                continue  # not this run's (its id ends the mark or is followed by the directory)
            if not dir_id or st.comment != stray_mark(run_id, dir_id):
                print(f"ruler: left batch job {st.job} ({st.name}) running: its comment "
                      f"{st.comment!r} does not name this run directory (a copy's original, whose "
                      "run may be live, or an earlier ruler's job): scancel it yourself once its "
                      "run is over", file=sys.stderr)
                continue
            end_job(st.job)
            stopped.append({"name": st.name, "job": st.job, "state": st.state})
        return stopped

