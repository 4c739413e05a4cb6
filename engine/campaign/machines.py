"""Where a campaign's servers start: the runtime sections (docker, process, attach, slurm), the
places that run its sessions, and how long each step may take."""

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, PlainValidator, Strict
from pydantic_core import PydanticCustomError

from engine.campaign.secrets import MIN_SECRET_LEN, held, inner
from engine.campaign.values import (
    Argv,
    Bool,
    FrozenModel,
    Gpus,
    GpusOut,
    Port,
    Seconds,
    SessionName,
    Str,
    check_gpus,
)
from engine.campaign.yamlmarks import describe
from engine.runtime.slurm import options as sbatch_options


class DockerSpec(FrozenModel):
    image: Str | None = None
    command: Argv = ()  # empty: the image's entrypoint
    container_port: Port | None = None  # None: the adapter's default
    gpus: Annotated[Gpus, PlainValidator(check_gpus, json_schema_input_type=Gpus), GpusOut] = None
    shm_size: Str | None = None
    ipc: Str | None = None
    volumes: tuple[Str, ...] = ()
    keep: Bool = True


class ProcessSpec(FrozenModel):
    command: Argv | None = None


# What sbatch's --time accepts: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
# Digits are 0-9: Python's \d (and int()) also take other scripts' digits, which sbatch does not.
SLURM_TIME = re.compile(r"[0-9]+(:[0-9]{2}){0,2}|[0-9]+-[0-9]+(:[0-9]{2}){0,2}|UNLIMITED|INFINITE", re.I)


def _check_slurm_time(value: str) -> str:
    if not SLURM_TIME.fullmatch(value):
        raise PydanticCustomError("slurm_time", "must be a Slurm time limit (minutes, HH:MM:SS, "
                                                f"D-HH:MM:SS or UNLIMITED), got {describe(value)}")
    return value


def _check_sbatch_option(value: str) -> str:
    if not value.startswith("-") or value in ("-", "--") or sbatch_options.SPECIAL.search(value):
        raise PydanticCustomError("sbatch", "each entry is one sbatch option with its value as on the "
                                            "command line (--mem=0, --constraint=h200), without "
                                            f"whitespace, quotes, backslashes or '#', got {describe(value)}")
    why = sbatch_options.refusal(value)
    if why:
        raise PydanticCustomError("sbatch", why)
    flag, _, given = value.partition("=")
    secret = [name for name, text in [(flag, given), *inner(given)]
              if any(len(s) >= MIN_SECRET_LEN for s in held(name, text))]
    if secret:
        # An #SBATCH line can name no variable: the secret would stand in job.sh, a receipt.
        raise PydanticCustomError("sbatch_secret", f"{flag} gives {secret[0]} a secret, which the "
                                                   "job's script (job.sh, kept in the run directory) "
                                                   "would hold in clear: give it in env or pass_env, "
                                                   "which reach the job by name")
    return value


def _check_sbatch_word(value: str) -> str:
    if not value or sbatch_options.SPECIAL.search(value):
        raise PydanticCustomError("sbatch_word", "must be one word as sbatch reads an #SBATCH line: no "
                                                 "whitespace, control characters, quotes, backslashes "
                                                 f"or '#', got {describe(value)}")
    return value


SbatchWord = Annotated[str, Strict(), AfterValidator(_check_sbatch_word)]  # in #SBATCH --flag=VALUE


class SlurmSpec(FrozenModel):
    start: Literal["process", "docker", "pyxis"] = "process"  # how the job starts the server
    partition: SbatchWord | None = None
    account: SbatchWord | None = None
    qos: SbatchWord | None = None
    time: Annotated[str, Strict(), AfterValidator(_check_slurm_time)] | None = None
    gres: SbatchWord | None = None  # e.g. gpu:4
    exclusive: Bool = True  # a fresh box per window
    sbatch: tuple[Annotated[str, Strict(), AfterValidator(_check_sbatch_option)], ...] = ()


# What docker --cpuset-cpus and taskset -c take: 0-9 digits only (not \d's other scripts).
CPUSET = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")


def _check_cpuset(value: str) -> str:
    if not CPUSET.fullmatch(value):
        raise PydanticCustomError("cpuset", f"must be a CPU list like 0-3 or 0,2, got {describe(value)}")
    return value


def _check_docker_host(value: str) -> str:
    if not re.fullmatch(r"(unix|tcp|ssh)://\S+", value):
        raise PydanticCustomError("docker_host", "must be unix:///path, tcp://host:port or "
                                                 f"ssh://user@host, got {describe(value)}")
    return value


class Place(FrozenModel):
    """A box, or a fixed slice of one, that runs whole sessions: a session's control and all its
    windows run on the same place, so every delta is measured within one box."""

    name: SessionName
    docker_host: Annotated[str, Strict(), AfterValidator(_check_docker_host)] | None = None
    node: SbatchWord | None = None  # runtime slurm: the node (sbatch --nodelist)
    cpus: Annotated[str, Strict(), AfterValidator(_check_cpuset)] | None = None
    gpus: Annotated[Gpus, PlainValidator(check_gpus), GpusOut] = None  # docker device ids or a count

    @property
    def gpus_text(self) -> str:
        return ",".join(map(str, self.gpus)) if isinstance(self.gpus, tuple) else str(self.gpus)

    def describe(self) -> str:
        bits = [f"docker {self.docker_host}" if self.docker_host else "",
                f"node {self.node}" if self.node else "", f"cpus {self.cpus}" if self.cpus else "",
                f"gpus {self.gpus_text}" if self.gpus is not None else ""]
        return f"{self.name} ({', '.join(b for b in bits if b) or 'this machine'})"


class AttachSpec(FrozenModel):
    url: Str | None = None  # with or without /v1: engine.runtime.base normalises it



class Timeouts(FrozenModel):
    boot: Seconds = 600
    request: Seconds = 300
    window: Seconds = 3600
    queue: Seconds = 3600  # a batch job (runtime slurm) waiting in its scheduler's queue
    connect: Seconds = 15  # reaching a place's host over ssh; a link silent as long is given up

