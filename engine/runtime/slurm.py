"""A server as one Slurm batch job per window, on whatever node the scheduler (or the session's
place) gives it.

The job is a script ruler writes and keeps (``job.sh``): it picks a free port on its node, says
where it runs in a small file beside it (``job.place``), then starts the server (the campaign's
command, a ``docker run`` on the node, or pyxis' ``srun --container-image``) with its output in the
window's ``boot.log``. Everything between ruler and the job goes through the results directory, so
that directory must be on a filesystem the nodes share; ruler checks that before the first window.

Ruler reads Slurm only through its machine-readable outputs: ``sbatch --parsable``, ``squeue
--json`` to find a run's jobs (resume) and ``scontrol -o show job`` (one ``key=value`` line per job;
Slurm 22.05 has no ``--json`` there) for one job's state while it runs and its final record, read
within seconds of its end, while Slurm remembers the job (``MinJobAge``, 300 s by default).
``sacct`` is not used: it needs accounting (slurmdbd), which many clusters and CI's single-node one
lack, and the record is taken long before it matters.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.runtime.base import Host, LaunchError, LaunchPlan, Placement, QueueReport, SlurmJob

# squeue --json, and the JSON of the jobs it lists, need Slurm 21.08 or newer.
MIN_VERSION = (21, 8)
# What a job's server listens on: its node picks the port, so the plan names it by reference.
PORT_REF = "${RULER_PORT}"
POLL_S = 1.0  # squeue at most once a second per job, however many readers ask
PLACE_WAIT_S = 60.0  # a running job whose place file never shows: the directory is not shared
STOP_GRACE_S = 30.0  # after scancel --signal=TERM, before the job is cancelled outright

# Job states in which the job still holds (or waits for) its node; anything else has ended.
QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                           "CONFIGURING", "SUSPENDED", "STOPPED"})
ACTIVE_STATES = QUEUED_STATES | {"RUNNING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT"}
# Still holding its node but no longer serving: the batch script has exited or is being killed (a
# cancelled job stays COMPLETING for Slurm's KillWait; Slurm 22.05 shows the flag, not the state).
ENDING_STATES = frozenset({"COMPLETING", "STAGE_OUT"})
# Filesystems that exist on one machine only: a job on another node cannot see files there.
LOCAL_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "f2fs", "vfat",
                      "zfs", "ramfs"})


# ---------------------------------------------------------------- Slurm's commands


def _slurm(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 60.0) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else dict(env), check=False)
    except FileNotFoundError as e:
        raise LaunchError(f"runtime slurm: {argv[0]} is not on PATH (is this a Slurm login "
                          "node?)") from e
    except subprocess.TimeoutExpired as e:
        raise LaunchError(f"runtime slurm: `{shlex.join(argv)}` did not answer in "
                          f"{timeout:g} s (is slurmctld up?)") from e
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise LaunchError(f"runtime slurm: `{shlex.join(argv)}` failed (exit {done.returncode}): "
                          f"{said[-1] if said else 'no output'}")
    return done.stdout


def slurm_version() -> tuple[int, int, str]:
    """(major, minor, the whole version string) of the Slurm on PATH."""
    text = _slurm(["sbatch", "--version"]).strip()
    m = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    if not m:
        raise LaunchError(f"runtime slurm: cannot read a version in `sbatch --version`: {text!r}")
    return int(m.group(1)), int(m.group(2)), m.group(0)


def _state_of(job: Mapping[str, Any]) -> str:
    state = job.get("job_state")
    if isinstance(state, list):  # Slurm 23.02+: a list of flags, the base state first
        state = state[0] if state else ""
    return str(state or "")


def _set(value: Any) -> Any:
    """A number as Slurm 23.02+ writes one that may be unset: ``{"set", "infinite", "number"}``."""
    if isinstance(value, Mapping):
        return value.get("number") if value.get("set") else None
    return value


def _exit_of(job: Mapping[str, Any]) -> str:
    """``exit:signal`` as scontrol writes it (``1:0``, ``0:15``); "" while the job has none."""
    code = job.get("exit_code")
    if isinstance(code, Mapping) and "set" in code:  # 23.02: the raw wait status, possibly unset
        code = _set(code)
    if isinstance(code, Mapping):  # 23.11+: {"status": [...], "return_code": {...}, "signal": {...}}
        rc, sig = _set(code.get("return_code")), code.get("signal")
        sig = _set(sig.get("id")) if isinstance(sig, Mapping) else sig
        return "" if rc is None and not sig else f"{rc or 0}:{sig or 0}"
    if isinstance(code, int) and not isinstance(code, bool):  # 22.05: the raw wait status
        return f"{code >> 8}:{code & 0x7F}"
    return "" if code is None else str(code)


@dataclass(frozen=True)
class JobState:
    """One job as ``squeue --json`` lists it, in the few fields ruler acts on."""

    job: str
    name: str
    comment: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY
    reason: str  # Slurm's state_reason: Resources, Priority, ReqNodeNotAvail, ... ("None" running)
    node: str
    exit_code: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def queued(self) -> bool:
        return self.state in QUEUED_STATES

    @classmethod
    def from_json(cls, job: Mapping[str, Any]) -> JobState:
        return cls(job=str(job.get("job_id", "")), name=str(job.get("name", "")),
                   comment=str(job.get("comment") or ""), state=_state_of(job),
                   # "None" is Slurm's word for no reason (a job not yet looked at, or running).
                   reason="" if job.get("state_reason") in (None, "None") else str(job["state_reason"]),
                   node=str(job.get("batch_host") or job.get("nodes") or ""),
                   exit_code=_exit_of(job))


def squeue() -> list[JobState]:
    """The jobs Slurm lists now (ended ones too, while it remembers them)."""
    out = _slurm(["squeue", "--json"])
    try:
        data = json.loads(out)
    except json.JSONDecodeError as e:
        raise LaunchError(f"runtime slurm: `squeue --json` printed no JSON ({e}); ruler needs "
                          "Slurm >= 21.08 with its JSON output") from e
    return [JobState.from_json(j) for j in data.get("jobs", []) if isinstance(j, Mapping)]


_SCONTROL_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w/:]*)=")


def parse_scontrol(line: str) -> dict[str, str]:
    """``scontrol -o show job`` prints ``Key=value`` pairs on one line; a value may hold spaces."""
    marks = list(_SCONTROL_FIELD.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def scontrol_job(job: str) -> str:
    """Slurm's record of a job, verbatim (one line); "" once Slurm has forgotten it."""
    try:
        return _slurm(["scontrol", "-o", "show", "job", job]).strip()
    except LaunchError:
        return ""


def job_state(job: str) -> JobState:
    """A job's state now, from its own record (``scontrol -o show job``: one job, where 22.05's
    ``squeue --json`` ignores ``--jobs`` and lists the whole queue, too much to ask twice a second
    on a big cluster); UNKNOWN once Slurm has forgotten the job."""
    fields = parse_scontrol(scontrol_job(job))
    state = fields.get("JobState", "").split(" ")[0] or "UNKNOWN"
    reason = fields.get("Reason", "")
    host = fields.get("BatchHost", "")
    return JobState(job, fields.get("JobName", ""), fields.get("Comment", ""), state,
                    "" if reason == "None" else reason, "" if host == "(null)" else host,
                    fields.get("ExitCode", ""))


def _scancel(job: str, opts: list[str]) -> None:
    with contextlib.suppress(LaunchError):  # the job ended meanwhile; the wait that follows sees it
        _slurm(["scancel", *opts, job])


def _gone(job: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not job_state(job).active:
            return True
        time.sleep(0.5)
    return False


def end_job(job: str) -> None:
    """``scancel --signal=TERM`` (the job script passes it to the server, which exits cleanly),
    then wait until the job has left the queue; one that does not leave in time is cancelled
    outright (Slurm sends TERM, then KILL after its KillWait). A job still queued is just cancelled."""
    st = job_state(job)
    if not st.active:
        return
    if st.queued:
        _scancel(job, [])
    else:
        # To the batch shell only: its trap passes one TERM to the server. A second TERM (which
        # --full would send it directly as well) makes llama.cpp and others exit at once, with 1.
        _scancel(job, ["--signal=TERM", "--batch"])
    if not _gone(job, STOP_GRACE_S):
        _scancel(job, [])
        _gone(job, STOP_GRACE_S + 60)


def sinfo_nodes(partition: str | None) -> list[dict[str, Any]]:
    argv = ["sinfo", "--json"] + ([f"--partition={partition}"] if partition else [])
    try:
        return [n for n in json.loads(_slurm(argv)).get("nodes", []) if isinstance(n, Mapping)]
    except json.JSONDecodeError as e:
        raise LaunchError(f"runtime slurm: `sinfo --json` printed no JSON ({e})") from e


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


# ---------------------------------------------------------------- the job script


def _word(text: str, secrets: Mapping[str, str]) -> str:
    """One shell word: a secret's value is written as a reference to its variable (the job gets
    the value from the environment sbatch exports), so job.sh, a receipt, never holds it."""
    if text == PORT_REF:
        return '"$RULER_PORT"'
    parts: list[tuple[bool, str]] = [(False, text)]
    for value, name in sorted(((v, n) for n, v in secrets.items() if len(v) >= 8),
                              key=lambda vn: -len(vn[0])):
        split: list[tuple[bool, str]] = []
        for is_ref, piece in parts:
            if is_ref or value not in piece:
                split.append((is_ref, piece))
                continue
            for j, chunk in enumerate(piece.split(value)):
                if j:
                    split.append((True, name))
                if chunk:
                    split.append((False, chunk))
        parts = split
    rendered = "".join(f'"${{{p}}}"' if is_ref else shlex.quote(p) for is_ref, p in parts)
    return rendered or "''"


def _line(words: Iterable[str], secrets: Mapping[str, str]) -> str:
    return " ".join(_word(w, secrets) for w in words)


def job_name(plan: LaunchPlan) -> str:
    """``ruler-<campaign>-<session>-<window>``: what ``squeue`` shows the cluster's other users."""
    return f"ruler-{plan.labels.get('ruler.campaign', '')}-{plan.labels.get('ruler.window', '')}"


def sbatch_options(plan: LaunchPlan, job: SlurmJob, workdir: Path) -> list[str]:
    opts = [f"--job-name={job_name(plan)}", f"--comment={job.comment}",
            f"--output={workdir / f'boot{plan.tag}.log'}", "--open-mode=append",
            "--nodes=1", "--ntasks=1",
            # ruler decides what runs again (a rerun is a new attempt with its own receipts); a
            # job Slurm requeued by itself would boot a second server into the same boot.log.
            "--no-requeue"]
    if job.exclusive:
        opts.append("--exclusive")
    for flag, value in (("partition", job.partition), ("account", job.account), ("qos", job.qos),
                        ("time", job.time), ("gres", job.gres), ("nodelist", plan.place)):
        if value:
            opts.append(f"--{flag}={value}")
    return opts + list(job.sbatch)


def _server_start(plan: LaunchPlan, job: SlurmJob, secrets: Mapping[str, str]) -> tuple[str, str]:
    """(the command that starts the server in the background, the one that stops it)."""
    if job.start == "process":
        return _line(plan.argv, secrets) + " &", 'kill -TERM "$server" 2>/dev/null'
    image = plan.image or ""
    if job.start == "pyxis":
        mounts = ",".join(f"{m}:{m}:ro" for m in plan.mounts)
        words = ["srun", "--ntasks=1", f"--container-image={image}"]
        words += [f"--container-mounts={mounts}"] if mounts else []
        return _line(words + plan.argv, secrets) + " &", 'kill -TERM "$server" 2>/dev/null'
    # docker: a container of the campaign's image on the node, removed with the job.
    words = ["docker", "run", "--rm", f"--name={plan.name}", "--init"]
    words += [f"--label={k}={v}" for k, v in sorted(plan.labels.items())]
    words += [f"--env={k}" for k in sorted(plan.secret_env)]  # the value from the job's environment
    words += [f"--env={k}={v}" for k, v in sorted(plan.env.items())]
    words += [f"--env=RULER_CONTAINER={plan.name}"]
    words += [f"--volume={m}:{m}:ro" for m in plan.mounts] + [f"--volume={v}" for v in plan.volumes]
    words += [f"--shm-size={plan.shm_size}"] if plan.shm_size else []
    words += [f"--ipc={plan.ipc}"] if plan.ipc else []
    line = _line(words, secrets)
    # Port and GPUs are the node's to say: the port the job picked, the GPUs Slurm gave the job.
    line += f' --publish="$RULER_PORT:{plan.container_port}"'
    line += ' ${RULER_GPUS:+--gpus "device=$RULER_GPUS"}'
    line += " " + _line([image, *plan.argv], secrets) + " &"
    stop = f"docker stop --time=10 {shlex.quote(plan.name)} >/dev/null 2>&1"
    return line, stop


def job_script(plan: LaunchPlan, workdir: Path, secrets: Mapping[str, str]) -> str:
    """The batch script of one window's job; written as ``job.sh`` and kept as its receipt."""
    job = plan.slurm or SlurmJob()
    place_file = workdir / f"job{plan.tag}.place"
    head = [
        "#!/bin/bash",
        f"# ruler: the server of window {plan.labels.get('ruler.window', '?')} of campaign "
        f"{plan.labels.get('ruler.campaign', '?')}, run {plan.labels.get('ruler.run', '?')},",
        f"# started as `{job.start}`. Written and submitted by ruler (sbatch --parsable); kept as the "
        "window's receipt.",
        *(f"#SBATCH {opt}" for opt in sbatch_options(plan, job, workdir)),
        "",
        "set -u",
        "host=$(hostname)",
        "node=${SLURMD_NODENAME:-$host}",
        "# A port no socket on this node holds (a listener, or a client's end of a connection, which",
        "# the server could not bind either), below the kernel's range for client ports so that no",
        "# connection takes it before the server binds it.",
        "read -r eph _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || eph=32768",
        "lo=10000; hi=$((eph - 1)); [ \"$hi\" -gt 12000 ] || { lo=20000; hi=60999; }",
        "held=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null)",
        "RULER_PORT=",
        "for p in $(shuf -i \"$lo-$hi\" -n 64); do",
        "  [[ $held == *\":$(printf '%04X' \"$p\") \"* ]] && continue",
        "  if ! (exec 3<>\"/dev/tcp/127.0.0.1/$p\") 2>/dev/null; then RULER_PORT=$p; break; fi",
        "done",
        '[ -n "$RULER_PORT" ] || { echo "ruler-job: no free port on $host"; exit 97; }',
        "RULER_GPUS=${SLURM_JOB_GPUS:-${SLURM_STEP_GPUS:-}}",
        "export RULER_PORT RULER_GPUS",
        'echo "ruler-job: job ${SLURM_JOB_ID:-?} on node $node ($host), port $RULER_PORT,'
        ' cpus ${SLURM_CPUS_ON_NODE:-?}, gpus ${RULER_GPUS:-none}"',
        "# Where the server listens, for ruler (it waits for this file, then probes readiness).",
        "printf '{\"node\": \"%s\", \"host\": \"%s\", \"port\": %s, \"job\": \"%s\", \"cpus\": "
        "\"%s\", \"gpus\": \"%s\"}\\n' \"$node\" \"$host\" \"$RULER_PORT\" \"${SLURM_JOB_ID:-}\" "
        "\"${SLURM_CPUS_ON_NODE:-}\" \"$RULER_GPUS\" > " + shlex.quote(f"{place_file}.tmp"),
        f"mv -f {shlex.quote(f'{place_file}.tmp')} {shlex.quote(str(place_file))}",
        "",
        f"export RULER_CONTAINER={shlex.quote(plan.name)}",
        *(f"export {k}={_word(v, secrets)}" for k, v in sorted(plan.env.items())),
    ]
    start, stop = _server_start(plan, job, secrets)
    body = [
        start,
        "server=$!",
        "# scancel --signal=TERM reaches this script: the server is asked to exit cleanly.",
        f"trap '{stop}' TERM INT",
        'wait "$server"; rc=$?',
        '# A trapped signal ends the first wait early: wait for the server\'s own exit.',
        'while kill -0 "$server" 2>/dev/null; do wait "$server"; rc=$?; done',
        'exit "$rc"',
    ]
    return "\n".join(head + body) + "\n"


# ---------------------------------------------------------------- a window's job


def _ended_line(fields: Mapping[str, str], job: str) -> str:
    state = fields.get("JobState", "?")
    bits = [f"reason {fields.get('Reason', '?')}", f"exit code {fields.get('ExitCode', '?')}"]
    if fields.get("NodeList") not in (None, "", "(null)"):
        bits.append(f"node {fields['NodeList']}")
    return f"Slurm job {job} {state} ({', '.join(bits)})"


class SlurmServer:
    def __init__(self, plan: LaunchPlan, secrets: Mapping[str, str]) -> None:
        if plan.workdir is None or plan.slurm is None:
            raise LaunchError("runtime slurm: the plan has no window directory or slurm section")
        self._plan = plan
        wdir = plan.workdir
        wdir.mkdir(parents=True, exist_ok=True)
        self.script_path = wdir / f"job{plan.tag}.sh"
        self.log_path = wdir / f"boot{plan.tag}.log"
        self.place_path = wdir / f"job{plan.tag}.place"
        self.record_path = wdir / f"job{plan.tag}.record.txt"
        for stale in (self.place_path, self.record_path):  # a resumed window's earlier attempt
            stale.unlink(missing_ok=True)
        self.script_path.write_text(job_script(plan, wdir, secrets))
        # The secrets reach the job through sbatch's exported environment, never through job.sh.
        env = {**os.environ, **plan.secret_env}
        out = _slurm(["sbatch", "--parsable", str(self.script_path)], env=env)
        self.job = out.strip().split(";")[0]
        if not self.job.isdigit():
            raise LaunchError(f"runtime slurm: sbatch --parsable printed {out.strip()!r}, no job id")
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
            data = json.loads(self.place_path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("port") and data.get("host") else None

    # -- the server

    def lines(self) -> Iterator[str]:
        """The job's output as its node writes it to boot.log, until the job has ended."""
        handle = None
        while handle is None:
            try:
                handle = self.log_path.open("rb")
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
            self.record_path.write_text(line + "\n")

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
        return _ended_line(fields, self.job)


class SlurmRuntime:
    """One batch job per window; a killed engine's jobs are found by their comment (the run id)."""

    name = "slurm"

    def __init__(self, secrets: Mapping[str, str] | None = None,
                 partition: str | None = None) -> None:
        # Values that job.sh writes as references to their variables (the Redactor's secrets).
        self.secrets = dict(secrets or {})
        self.partition = partition

    def preflight(self, run_dir: Path) -> None:
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
        f = parse_scontrol(_slurm(["scontrol", "-o", "show", "node", node]))
        host = Host(name=f.get("NodeName", node), os=f.get("OS", ""))
        if f.get("CPUTot", "").isdigit():
            host["cpus"] = int(f["CPUTot"])
        if f.get("Gres") not in (None, "", "(null)"):
            host["gres"] = f["Gres"]
        return host

    def stop_strays(self, run_id: str, servers: Iterable[dict[str, object]]) -> list[dict[str, object]]:
        stopped: list[dict[str, object]] = []
        mark = f"ruler-run={run_id}"
        for st in squeue():
            if st.comment == mark and st.name.startswith("ruler-") and st.active:
                end_job(st.job)
                stopped.append({"name": st.name, "job": st.job, "state": st.state})
        return stopped

