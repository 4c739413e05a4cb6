"""The batch script of a window's job (``job.sh``, kept as its receipt) and its ``#SBATCH`` options."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

from engine.runtime.base import LaunchError, LaunchPlan, SlurmJob
from engine.runtime.slurm.options import CONTROL, SPECIAL

# What a job's server listens on: its node picks the port, so the plan names it by reference.
PORT_REF = "${RULER_PORT}"
# The variables that carry a secret no variable of the campaign or the host holds whole (a flag's
# literal value, a URL's password) to the job: numbered from 1, in sbatch's exported environment.
SECRET_VARIABLE = "RULER_SECRET_"


def _word(text: str, secrets: Mapping[str, str]) -> str:
    """One shell word: a secret's value is written as a reference to its variable (the job gets
    the value from the environment sbatch exports), so job.sh, a receipt, never holds it."""
    if text == PORT_REF:
        return '"$RULER_PORT"'
    parts: list[tuple[bool, str]] = [(False, text)]
    for value, name in sorted(((v, n) for v, n in secrets.items() if len(v) >= 8),
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


def output_name(path: Path) -> str:
    """``path`` as slurmstepd reads an ``--output`` name: ``%`` starts a pattern (``%j``, the job
    id) and a backslash escapes the next character. A path holding either is written escaped:
    each backslash doubled, and one before the file's name, which turns the patterns off."""
    text = str(path)
    if "%" not in text and "\\" not in text:
        return text
    return str(path.parent).replace("\\", "\\\\") + "/\\" + path.name.replace("\\", "\\\\")


def directive(option: str) -> str:
    """One ``#SBATCH`` line: its value double-quoted, backslash before each quote and backslash,
    when it holds what sbatch's reader of the line would split it at or stop at (whitespace, a
    quote, a backslash, ``#``)."""
    if CONTROL.search(option):
        raise LaunchError(f"runtime slurm: an #SBATCH line cannot hold {option!r}: a control "
                          "character (a newline ends the line)")
    flag, eq, value = option.partition("=")
    if eq and SPECIAL.search(value):
        value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"#SBATCH {flag}{eq}{value}"


def sbatch_options(plan: LaunchPlan, job: SlurmJob, workdir: Path) -> list[str]:
    opts = [f"--job-name={job_name(plan)}", f"--comment={job.comment}",
            f"--output={output_name(workdir / f'boot{plan.tag}.log')}", "--open-mode=append",
            "--nodes=1", "--ntasks=1",
            # ruler decides what runs again (a rerun is a new attempt with its own receipts); a
            # job Slurm requeued by itself would boot a second server into the same boot.log.
            "--no-requeue"]
    if job.exclusive:
        opts.append("--exclusive")
    for flag, value in (("partition", job.partition), ("account", job.account), ("qos", job.qos),
                        ("time", job.time), ("gres", job.gres), ("nodelist", plan.node)):
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
        *(directive(opt) for opt in sbatch_options(plan, job, workdir)),
        "",
        "set -u",
        "# Slurm opened boot.log with the submitter's umask: the server's output is the owner's alone.",
        f"chmod 600 {shlex.quote(str(workdir / f'boot{plan.tag}.log'))} 2>/dev/null",
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
        "# Where the server listens, for ruler (it waits for this file, then probes readiness); the",
        "# job's files are its owner's alone, like every other file of the run.",
        "(umask 077; printf '{\"node\": \"%s\", \"host\": \"%s\", \"port\": %s, \"job\": \"%s\", "
        "\"cpus\": \"%s\", \"gpus\": \"%s\"}\\n' \"$node\" \"$host\" \"$RULER_PORT\" "
        "\"${SLURM_JOB_ID:-}\" \"${SLURM_CPUS_ON_NODE:-}\" \"$RULER_GPUS\" > "
        + shlex.quote(f"{place_file}.tmp") + ")",
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
