"""Slurm's commands as ruler calls them, and the parsers of what they print: ``sbatch --parsable``,
``squeue --json``, ``scontrol -o show job|node``, ``sinfo --json`` and ``scancel``."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.runtime.base import LaunchError

STOP_GRACE_S = 30.0  # after scancel --signal=TERM, before the job is cancelled outright

# Job states in which the job still holds (or waits for) its node; anything else has ended.
QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                           "CONFIGURING", "SUSPENDED", "STOPPED"})
ACTIVE_STATES = QUEUED_STATES | {"RUNNING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT"}
# Still holding its node but no longer serving: the batch script has exited or is being killed (a
# cancelled job stays COMPLETING for Slurm's KillWait; Slurm 22.05 shows the flag, not the state).
ENDING_STATES = frozenset({"COMPLETING", "STAGE_OUT"})


def run_slurm(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 60.0) -> str:
    """One Slurm command's standard output; LaunchError saying why when it cannot run or fails."""
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
    text = run_slurm(["sbatch", "--version"]).strip()
    m = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    if not m:
        raise LaunchError(f"runtime slurm: cannot read a version in `sbatch --version`: {text!r}")
    return int(m.group(1)), int(m.group(2)), m.group(0)


def sbatch(script: Path, env: Mapping[str, str]) -> str:
    """Submit ``script`` (``sbatch --parsable``) with ``env`` as its environment; the job id."""
    out = run_slurm(["sbatch", "--parsable", str(script)], env=env)
    job = out.strip().split(";")[0]
    if not job.isdigit():
        raise LaunchError(f"runtime slurm: sbatch --parsable printed {out.strip()!r}, no job id")
    return job


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
    out = run_slurm(["squeue", "--json"])
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
        return run_slurm(["scontrol", "-o", "show", "job", job]).strip()
    except LaunchError:
        return ""


def scontrol_node(node: str) -> dict[str, str]:
    """Slurm's record of a node (``scontrol -o show node``); LaunchError when it has none."""
    return parse_scontrol(run_slurm(["scontrol", "-o", "show", "node", node]))


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


def ended_line(fields: Mapping[str, str], job: str) -> str:
    """How an ended job's record (``scontrol -o show job``, parsed) says it ended, in one line."""
    state = fields.get("JobState", "?")
    bits = [f"reason {fields.get('Reason', '?')}", f"exit code {fields.get('ExitCode', '?')}"]
    if fields.get("NodeList") not in (None, "", "(null)"):
        bits.append(f"node {fields['NodeList']}")
    return f"Slurm job {job} {state} ({', '.join(bits)})"


def _scancel(job: str, opts: list[str]) -> None:
    with contextlib.suppress(LaunchError):  # the job ended meanwhile; the wait that follows sees it
        run_slurm(["scancel", *opts, job])


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
        return [n for n in json.loads(run_slurm(argv)).get("nodes", []) if isinstance(n, dict)]
    except json.JSONDecodeError as e:
        raise LaunchError(f"runtime slurm: `sinfo --json` printed no JSON ({e})") from e
