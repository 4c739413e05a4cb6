"""The campaign file: schema, diagnostics with YAML line:col, semantic checks, helpers.

docs/campaign.md is the reference this module implements. Loading never stops at the first
problem: YAML duplicates, every schema error and every semantic error are collected into one
SpecError so a user fixes a file in one pass.
"""

import json
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    Strict,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from engine.campaign.yamlmarks import (
    Issue,
    MarkedDoc,
    Problem,
    describe,
    dotted,
    duplicate_issues,
    load_marked,
    place,
    schema_issue,
    suggest,
    yaml_problem,
)
from engine.record.events import CONTROL

# Names become parts of paths, container names and row keys: the run directory
# `<date>-<campaign>`, `windows/<session>-<window>/`, `reps/<class>-c<N>-...jsonl`, the container
# `ruler-<campaign>-<session>-<window>-<run>` and the row `<session>-<window>/<class>/c<N>`. Lower case
# only (a case-insensitive disk would merge `Code` and `code`), never '/' or a leading '.', and no
# '-' in a session name, so `<session>-<window>` splits one way only: no two windows share a
# directory or a container. Docker names allow [a-zA-Z0-9][a-zA-Z0-9_.-]*, a superset.
NAME_PATTERN = "[a-z0-9][a-z0-9_-]*"  # campaign, window and class names
SESSION_PATTERN = "[a-z0-9][a-z0-9_]*"
ARTIFACT_PATTERN = "[A-Za-z0-9_][A-Za-z0-9_.-]*"  # what ${artifacts.NAME} can spell
ENV_PATTERN = "[A-Za-z_][A-Za-z0-9_]*"  # POSIX; '=' in a name would set another variable
MAX_NAME = 64
RERUN_SUFFIX = re.compile(r"-rerun\d+\Z")  # a rebooted window's container: <name>-rerunN (runner.py)

# Bounds past which a value is a typo, not a plan; every one is also finite.
MAX_SECONDS = 7 * 24 * 3600
MAX_CONCURRENCY = 4096
MAX_TOKENS = 1 << 20
MAX_CAMPAIGN_BYTES = 1 << 20  # a campaign is a few kilobytes; prompts belong in prompt files
# The greedy prompts a campaign gets when its quality section names none (ships with ruler).
DEFAULT_GREEDY_FILE = Path(__file__).resolve().parents[2] / "campaigns" / "prompts" / "greedy.txt"
DEFAULT_SEED = 1234  # quality requests always send a seed; this one when the campaign has none

Scalar = str | int | float
ArgValue = Scalar | bool | tuple[Scalar, ...] | None
Gpus = Literal["all"] | int | tuple[str | int, ...] | None


# --- value types --------------------------------------------------------------------------
# YAML already gives typed scalars, so fields are strict: "4" is not an integer, 1 is not a
# bool. Mixed-type values get a single plain validator instead of a pydantic Union, whose
# errors would come back once per union member.


def _is_scalar(value: object) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _type_error(kind: str, expected: str, value: object) -> PydanticCustomError:
    return PydanticCustomError(kind, f"expected {expected}, got {describe(value)}")


def _check_arg(value: object) -> ArgValue:
    if value is None or isinstance(value, bool) or _is_scalar(value):
        return value  # type: ignore[return-value]
    if isinstance(value, list | tuple) and all(_is_scalar(v) for v in value):
        return tuple(value)
    raise _type_error("arg_value", "a string, number, true/false/null or a list of those", value)


def _check_env(value: object) -> str:
    # Numbers are fine (CUDA_VISIBLE_DEVICES: 0); a bool is ambiguous ("True"? "1"?), so quote it.
    if _is_scalar(value):
        return str(value)
    raise _type_error("env_value", "a string", value)


def _check_gpus(value: object) -> Gpus:
    if value is None or value == "all" or (isinstance(value, int) and not isinstance(value, bool)):
        return value  # type: ignore[return-value]
    if isinstance(value, list) and all(_is_scalar(v) and not isinstance(v, float) for v in value):
        return tuple(value)
    raise _type_error("gpus", "null, 'all', a GPU count or a list of device ids", value)


def _named(pattern: str, why: str) -> Any:
    """A string type for a name: `pattern`, at most MAX_NAME characters, and why it must be so."""
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > MAX_NAME or not regex.fullmatch(value):
            raise PydanticCustomError("name", f"must match {pattern} (at most {MAX_NAME} "
                                              f"characters; {why}), got {describe(value)}")
        return value

    # The JSON Schema says it too, so an editor flags a bad name as it is typed.
    schema = {"type": "string", "pattern": f"^(?:{pattern})$", "maxLength": MAX_NAME}
    return Annotated[str, Strict(), AfterValidator(check), WithJsonSchema(schema)]


def _check_oracle(value: object) -> "str | OracleReceipt":
    # A plain validator: a pydantic union would report one error per member.
    if value == CONTROL:
        return CONTROL
    if isinstance(value, dict) and set(value) == {"receipt"} and isinstance(value["receipt"], str):
        return OracleReceipt(receipt=value["receipt"])
    raise _type_error("oracle", "'control' or {receipt: path}", value)


Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
PosInt = Annotated[int, Strict(), Field(ge=1)]
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
Seconds = Annotated[float, Strict(), Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
Tokens = Annotated[int, Strict(), Field(ge=1, le=MAX_TOKENS)]
Seed = Annotated[int, Strict(), Field(ge=-(1 << 63), lt=1 << 63)]  # what every server parses
Name = _named(NAME_PATTERN, "it names directories, files and containers")
SessionName = _named(SESSION_PATTERN, "no '-', which joins session and window in directory and "
                                      "container names")
ArtifactName = _named(ARTIFACT_PATTERN, "${artifacts.NAME} must be able to spell it")
EnvName = _named(ENV_PATTERN, "an environment variable name")
Argv = tuple[Str, ...]
# A plain validator's JSON Schema is "anything" unless it names the input it takes.
Arg = Annotated[ArgValue, PlainValidator(_check_arg, json_schema_input_type=ArgValue)]
EnvStr = Annotated[str, PlainValidator(_check_env, json_schema_input_type=Scalar)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- schema -------------------------------------------------------------------------------


class DockerSpec(_Frozen):
    image: Str | None = None
    command: Argv = ()  # empty: the image's entrypoint
    container_port: Port | None = None  # None: the adapter's default
    gpus: Annotated[Gpus, PlainValidator(_check_gpus, json_schema_input_type=Gpus)] = None
    shm_size: Str | None = None
    ipc: Str | None = None
    volumes: tuple[Str, ...] = ()
    keep: Bool = True


class ProcessSpec(_Frozen):
    command: Argv | None = None


# What sbatch's --time accepts: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
SLURM_TIME = re.compile(r"\d+(:\d\d){0,2}|\d+-\d+(:\d\d){0,2}|UNLIMITED|INFINITE", re.I)
# sbatch options ruler sets itself, because the method or its receipts depend on them.
SLURM_OWNED = ("--job-name", "-J", "--comment", "--output", "-o", "--error", "-e", "--open-mode",
               "--nodes", "-N", "--ntasks", "-n", "--requeue", "--no-requeue", "--nodelist", "-w",
               "--parsable", "--wrap")


def _check_slurm_time(value: str) -> str:
    if not SLURM_TIME.fullmatch(value):
        raise PydanticCustomError("slurm_time", "must be a Slurm time limit (minutes, HH:MM:SS, "
                                                f"D-HH:MM:SS or UNLIMITED), got {describe(value)}")
    return value


def _check_sbatch_option(value: str) -> str:
    flag = value.split("=", 1)[0]
    if not value.startswith("-") or " " in flag:
        raise PydanticCustomError("sbatch", "each entry is one sbatch option as on the command line "
                                            f"(--mem=0, --constraint=h200), got {describe(value)}")
    if flag in SLURM_OWNED or any(flag.startswith(o) for o in SLURM_OWNED if len(o) == 2):
        raise PydanticCustomError("sbatch", f"{flag} is set by ruler (job name, comment, output, "
                                            "one node, no requeue, the session's node): leave it out")
    return value


class SlurmSpec(_Frozen):
    start: Literal["process", "docker", "pyxis"] = "process"  # how the job starts the server
    partition: Str | None = None
    account: Str | None = None
    qos: Str | None = None
    time: Annotated[str, Strict(), AfterValidator(_check_slurm_time)] | None = None
    gres: Str | None = None  # e.g. gpu:4
    exclusive: Bool = True  # a fresh box per window
    sbatch: tuple[Annotated[str, Strict(), AfterValidator(_check_sbatch_option)], ...] = ()


CPUSET = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")  # what docker --cpuset-cpus and taskset -c take


def _check_cpuset(value: str) -> str:
    if not CPUSET.fullmatch(value):
        raise PydanticCustomError("cpuset", f"must be a CPU list like 0-3 or 0,2, got {describe(value)}")
    return value


def _check_docker_host(value: str) -> str:
    if not re.fullmatch(r"(unix|tcp|ssh)://\S+", value):
        raise PydanticCustomError("docker_host", "must be unix:///path, tcp://host:port or "
                                                 f"ssh://user@host, got {describe(value)}")
    return value


class Place(_Frozen):
    """A box, or a fixed slice of one, that runs whole sessions: a session's control and all its
    windows run on the same place, so every delta is measured within one box."""

    name: SessionName
    docker_host: Annotated[str, Strict(), AfterValidator(_check_docker_host)] | None = None
    node: Str | None = None  # runtime slurm: the node (sbatch --nodelist)
    cpus: Annotated[str, Strict(), AfterValidator(_check_cpuset)] | None = None
    gpus: Annotated[Gpus, PlainValidator(_check_gpus)] = None  # docker device ids or a count

    def describe(self) -> str:
        bits = [f"docker {self.docker_host}" if self.docker_host else "",
                f"node {self.node}" if self.node else "", f"cpus {self.cpus}" if self.cpus else "",
                f"gpus {self.gpus}" if self.gpus is not None else ""]
        return f"{self.name} ({', '.join(b for b in bits if b) or 'this machine'})"


class AttachSpec(_Frozen):
    url: Str | None = None  # with or without /v1: engine.runtime.base normalises it


class Control(_Frozen):
    model: Str | None = None  # optional: an attached server, or a model named only in args
    artifacts: dict[ArtifactName, Str] = {}
    args: dict[Str, Arg] = {}
    env: dict[EnvName, EnvStr] = {}


class Change(_Frozen):
    args: dict[Str, Arg] = {}  # null removes the flag
    env: dict[EnvName, EnvStr | None] = {}  # null removes the variable
    image: Str | None = None
    command: Argv | None = None
    model: Str | None = None
    artifacts: dict[ArtifactName, Str] = {}

    def axes(self) -> list[str]:
        """One name per changed axis, in the order the doc lists them."""
        axes = [f"args {k}" for k in self.args] + [f"env {k}" for k in self.env]
        axes += [key for key in ("image", "command", "model") if getattr(self, key) is not None]
        return axes + [f"artifacts {k}" for k in self.artifacts]


class Window(_Frozen):
    name: Name
    axis: Str = ""
    lossy: Bool = False
    multi_axis: Bool = False
    change: Change = Change()

    def axes(self) -> list[str]:
        return self.change.axes()


class PromptClass(_Frozen):
    prompts: Annotated[tuple[Str, ...], Field(min_length=1)] | None = None
    file: Str | None = None


class Sampling(_Frozen):
    temperature: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)] = 0.0
    seed: Seed | None = None


class Shard(_Frozen):
    """Past these, per event loop, the load generator splits a pass over worker processes: one
    loop's lag (the error of every timestamp it takes) grows with the chunks it must read."""

    concurrency: Annotated[int, Strict(), Field(ge=1, le=MAX_CONCURRENCY)] = 256
    chunk_rate: Annotated[float, Strict(), Field(gt=0, le=1e9, allow_inf_nan=False)] = 20_000


MAX_RATE = 10_000.0  # requests per second: past it, a typo


class Slo(_Frozen):
    """Per request, what counts toward goodput: its time to first token, and its inter-token
    latency (the mean gap between its tokens after the first, vLLM's TPOT), both at most these."""

    ttft_ms: Annotated[float, Strict(), Field(gt=0, le=MAX_SECONDS * 1000, allow_inf_nan=False)] | None = None
    itl_ms: Annotated[float, Strict(), Field(gt=0, le=MAX_SECONDS * 1000, allow_inf_nan=False)] | None = None


class Workload(_Frozen):
    classes: Annotated[dict[Name, PromptClass], Field(min_length=1)]
    # Closed loop: C workers, each sending its next request when the last one ends.
    concurrency: tuple[Annotated[int, Strict(), Field(ge=1, le=MAX_CONCURRENCY)], ...] = ()
    # Open loop: requests arrive at this many a second (Poisson, seeded), whatever is in flight.
    rate: tuple[Annotated[float, Strict(), Field(gt=0, le=MAX_RATE, allow_inf_nan=False)], ...] = ()
    slo: Slo = Slo()
    reps: Annotated[int, Strict(), Field(ge=1, le=1000)] = 3  # the notes: three after the warm pass
    requests_per_rep: Annotated[int, Strict(), Field(ge=1, le=100_000)] | None = None
    max_tokens: Tokens = 128
    sampling: Sampling = Sampling()
    knobs: dict[Str, Any] = {}
    shard: Shard = Shard()
    # The prefix cache before each warm pass and rep: keep (as the previous pass left it: reps
    # after the warm pass measure cache hits) or flush (empty, so every pass computes its prompts).
    cache: Literal["keep", "flush"] = "keep"

    def requests_for(self, concurrency: int) -> int:
        return self.requests_per_rep or max(2 * concurrency, 4)

    def requests_at(self, rate: float) -> int:
        """Requests of an open-loop pass: ten seconds of arrivals, at least four."""
        return self.requests_per_rep or max(4, math.ceil(10 * rate))

    def loads(self) -> list[tuple[int, float | None]]:
        """Every load a class is measured at, in order: (C, None) closed loop, then (0, rate)."""
        return [(c, None) for c in self.concurrency] + [(0, r) for r in self.rate]


class OracleReceipt(_Frozen):
    receipt: Str  # a reference.json ruler wrote in an earlier run; relative to the campaign file


class GreedySpec(_Frozen):
    prompts: Annotated[tuple[Str, ...], Field(min_length=1)] | None = None
    file: Str | None = None  # neither: ruler's campaigns/prompts/greedy.txt
    n: Annotated[int, Strict(), Field(ge=1, le=10_000)] = 20  # the notes: 20 greedy prompts
    max_tokens: Tokens = 48
    seed: Seed | None = None  # None: workload.sampling.seed, else 1234


Positions = Annotated[int, Strict(), Field(ge=1, le=1024)]


class TeacherForcedSpec(_Frozen):
    top_k: Annotated[int, Strict(), Field(ge=1, le=100)] = 10
    positions: Positions = 4  # scored positions per prompt, spread over the control's continuation


class KLSpec(_Frozen):
    texts: Annotated[tuple[Str, ...], Field(min_length=1)] | None = None
    file: Str | None = None  # neither: the greedy prompts with the oracle's continuations
    top_k: Annotated[int, Strict(), Field(ge=1, le=100)] = 10
    positions: Positions = 4  # per text
    oracle: Annotated[Any, PlainValidator(_check_oracle, json_schema_input_type=Literal["control"]
                                          | OracleReceipt)] = CONTROL


class ToolProbeSpec(_Frozen):
    n: Annotated[int, Strict(), Field(ge=1, le=10_000)] = 10
    max_tokens: Tokens = 128
    tool_choice: Literal["auto", "required"] = "auto"  # required: the server must force a call


class QualitySpec(_Frozen):
    enabled: Bool = True
    greedy: GreedySpec = GreedySpec()
    teacher_forced: TeacherForcedSpec = TeacherForcedSpec()
    kl: KLSpec = KLSpec()
    knobs_check: Bool = True
    tool_probe: ToolProbeSpec | None = None


def percent(fraction: float) -> str:
    """A threshold as a percentage with every digit it was given: 0.1 -> 10%, 0.005 -> 0.5%.

    `:.0%` would print a 0.005 leak spread as "0%", a threshold nothing passes.
    """
    digits = format(Decimal(repr(fraction)) * 100, "f")
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".")
    return f"{digits}%"


class Leak(_Frozen):
    min_concurrency: PosInt = 8  # above every concurrency: the check never runs
    spread: Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)] = 0.10
    max_reruns: Annotated[int, Strict(), Field(ge=0, le=100)] = 2


class Timeouts(_Frozen):
    boot: Seconds = 600
    request: Seconds = 300
    window: Seconds = 3600
    queue: Seconds = 3600  # a batch job (runtime slurm) waiting in its scheduler's queue


class ServerConfig(_Frozen):
    """What one window actually boots: the control with the window's change applied."""

    model: str | None
    artifacts: dict[str, str]
    args: dict[str, Arg]  # removed/false flags already dropped
    env: dict[str, str]
    image: str | None
    command: tuple[str, ...] | None  # None: the runtime section's own command


class Campaign(_Frozen):
    name: Name
    server: Literal["sglang", "vllm", "llamacpp"]
    runtime: Literal["docker", "process", "attach", "slurm", "auto"] = "auto"
    description: Str | None = None
    docker: DockerSpec = DockerSpec()
    process: ProcessSpec = ProcessSpec()
    attach: AttachSpec = AttachSpec()
    slurm: SlurmSpec = SlurmSpec()
    host_port: Port | None = None
    pass_env: tuple[EnvName, ...] = ()
    control: Control
    windows: tuple[Window, ...]
    sessions: dict[SessionName, tuple[Str, ...]]
    places: tuple[Place, ...] = ()  # none: one place, this machine (or wherever Slurm puts it)
    parallel: PosInt | None = None  # sessions at once: at most one per place (None: every place)
    control_position: Literal["first", "last"] = "first"
    workload: Workload
    leak: Leak = Leak()
    timeouts: Timeouts = Timeouts()
    quality: QualitySpec = QualitySpec()

    # Private, so a YAML key can never set them; filled by load_campaign.
    _source_path: Path = PrivateAttr(default_factory=Path)
    _source_text: str = PrivateAttr(default="")

    @property
    def source_path(self) -> Path:
        return self._source_path

    @property
    def source_text(self) -> str:
        return self._source_text

    def window(self, name: str) -> Window:
        for window in self.windows:
            if window.name == name:
                return window
        raise KeyError(f"no window named {name!r}")

    def windows_in(self, session: str) -> list[str]:
        """The boot order of a session, the control included."""
        names = list(self.sessions[session])
        return [CONTROL, *names] if self.control_position == "first" else [*names, CONTROL]

    def config_for(self, window_name: str, runtime: str | None = None) -> ServerConfig:
        """The effective server configuration of a window ("control" gives the control).

        `command` is the window's change.command; when it has none and `runtime` is given
        ("docker" or "process"), that runtime's command; else None. The campaign's own runtime
        is deliberately not assumed: `ruler run --runtime` may override it.
        """
        change = Change() if window_name == CONTROL else self.window(window_name).change
        base = {"docker": self.docker.command, "process": self.process.command}.get(runtime or "")
        return ServerConfig(
            model=self.control.model if change.model is None else change.model,
            artifacts={**self.control.artifacts, **change.artifacts},
            args=_merge(self.control.args, change.args),
            env=_merge(self.control.env, change.env),
            image=self.docker.image if change.image is None else change.image,
            command=base if change.command is None else change.command,
        )

    def prompts(self, class_name: str, variables: Mapping[str, str] | None = None) -> list[str]:
        """The prompts of a class; a file path is expanded with `variables` when given."""
        cls = self.workload.classes[class_name]
        if cls.prompts is not None:
            return list(cls.prompts)
        assert cls.file is not None  # validation guarantees exactly one of the two
        file = cls.file if variables is None else expand(cls.file, variables)
        return read_prompts(self.source_path.parent / file)

    def greedy_prompts(self, variables: Mapping[str, str] | None = None) -> list[str]:
        """The first `quality.greedy.n` greedy prompts (fewer when the source has fewer)."""
        g = self.quality.greedy
        if g.prompts is not None:
            prompts = list(g.prompts)
        elif g.file is not None:
            prompts = read_prompts(self._resolve(g.file, variables))
        else:
            prompts = read_prompts(DEFAULT_GREEDY_FILE)
        return prompts[: g.n]

    def kl_texts(self, variables: Mapping[str, str] | None = None) -> list[str] | None:
        """The fixed KL texts, or None: KL then scores the greedy prompts' continuations."""
        kl = self.quality.kl
        if kl.texts is not None:
            return list(kl.texts)
        return read_prompts(self._resolve(kl.file, variables)) if kl.file is not None else None

    def oracle_receipt(self, variables: Mapping[str, str] | None = None) -> Path | None:
        oracle = self.quality.kl.oracle
        return self._resolve(oracle.receipt, variables) if isinstance(oracle, OracleReceipt) else None

    def quality_seed(self) -> int:
        seed = self.quality.greedy.seed
        if seed is None:
            seed = self.workload.sampling.seed
        return DEFAULT_SEED if seed is None else seed

    def _resolve(self, file: str, variables: Mapping[str, str] | None) -> Path:
        return self.source_path.parent / (file if variables is None else expand(file, variables))


def campaign_schema() -> dict[str, Any]:
    """The campaign format as a JSON Schema (draft 2020-12), from the models that validate it, so
    an editor checks and completes a campaign as it is typed.

    The schema is the shape only: what spans keys (sessions naming defined windows, one axis per
    window, prompt files that exist) is ``ruler validate``'s alone.
    """
    schema = Campaign.model_json_schema()

    def close(node: Any) -> None:
        # pydantic spells a dict with constrained keys as patternProperties, which lets any key
        # that matches no pattern through: a name ruler would refuse must be refused here too.
        if isinstance(node, dict):
            if "patternProperties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema,
            "title": "ruler campaign",
            "description": "A ruler campaign file (YAML); docs/campaign.md is the reference."}


V = TypeVar("V")


def _merge(base: Mapping[str, V], delta: Mapping[str, V | None]) -> dict[str, V]:
    """Set/replace from delta; null (and false, for flags) means absent."""
    merged = {**base, **delta}
    return {k: v for k, v in merged.items() if v is not None and v is not False}


# --- prompts and variables ------------------------------------------------------------------


class NotUtf8(ValueError):
    def __init__(self, line: int, col: int, byte: int) -> None:
        super().__init__(f"not UTF-8 text (byte 0x{byte:02x} at line {line}, column {col})")
        self.line, self.col, self.byte = line, col, byte


def decode_text(data: bytes) -> str:
    """UTF-8 bytes as text with universal newlines, as `Path.read_text` gives; NotUtf8 says where not."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = data[:exc.start]
        line_start = head.rfind(b"\n") + 1
        col = len(head[line_start:].decode("utf-8", errors="replace")) + 1
        raise NotUtf8(head.count(b"\n") + 1, col, data[exc.start]) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


class PromptFileError(ValueError):
    """A prompt file ruler cannot send prompts from; reads as `path[:line]: problem`."""

    def __init__(self, path: Path, problem: str, line: int | None = None) -> None:
        super().__init__(f"{path}{f':{line}' if line else ''}: {problem}")
        self.path, self.problem, self.line = path, problem, line


def read_prompts(path: Path) -> list[str]:
    """.txt (or anything else): non-empty lines; .yaml/.yml/.json: a list of strings;
    .jsonl: one JSON string or {"prompt": ...} per non-empty line.

    A file that gives no prompt, an empty prompt or anything but UTF-8 text is a PromptFileError:
    sending nothing would measure nothing and still print rows.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PromptFileError(path, f"cannot read ({exc.strerror or exc})") from None
    try:
        text = decode_text(data)
    except NotUtf8 as exc:
        raise PromptFileError(path, f"not UTF-8 text (byte 0x{exc.byte:02x} at column {exc.col})",
                              exc.line) from None
    if not text.strip():
        raise PromptFileError(path, "no prompts: the file is empty")
    suffix = path.suffix.lower()
    lines = list(enumerate(text.split("\n"), 1))
    if suffix == ".jsonl":
        found = [(n, _jsonl_prompt(path, n, line)) for n, line in lines if line.strip()]
    elif suffix in (".yaml", ".yml", ".json"):
        found = _listed_prompts(path, text, suffix == ".json")
    else:
        found = [(n, line) for n, line in lines if line.strip()]
    if not found:
        raise PromptFileError(path, "no prompts")
    for n, prompt in found:
        if not prompt.strip():
            raise PromptFileError(path, "an empty prompt", n)
    return [prompt for _, prompt in found]


def _listed_prompts(path: Path, text: str, is_json: bool) -> list[tuple[int | None, str]]:
    """A JSON or YAML list of strings, with the line of each where the parser keeps it."""
    doc: MarkedDoc | None = None
    try:
        if is_json:
            data = json.loads(text)
        else:
            doc = load_marked(text)  # the campaign's limits: no alias bomb in a prompt file either
            data = doc.data
    except json.JSONDecodeError as exc:
        raise PromptFileError(path, f"not JSON ({exc.msg}, column {exc.colno})", exc.lineno) from None
    except yaml.YAMLError as exc:
        problem = yaml_problem(str(path), exc)
        raise PromptFileError(path, problem.message, problem.line) from None
    except RecursionError:
        raise PromptFileError(path, "not a list of strings (nested too deeply)") from None
    if not isinstance(data, list):
        raise PromptFileError(path, f"expected a list of strings, got {describe(data)}")
    found: list[tuple[int | None, str]] = []
    for i, item in enumerate(data):
        line = doc.locate((i,)).line if doc else None
        if not isinstance(item, str):
            raise PromptFileError(path, f"item {i + 1} is {describe(item)}, not a string", line)
        found.append((line, item))
    return found


def _jsonl_prompt(path: Path, n: int, line: str) -> str:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PromptFileError(path, f"not JSON ({exc.msg}, column {exc.colno})", n) from None
    except RecursionError:
        raise PromptFileError(path, "not JSON ruler reads (nested too deeply)", n) from None
    if isinstance(item, dict):
        item = item.get("prompt")
    if not isinstance(item, str):
        raise PromptFileError(path, "expected a JSON string or {\"prompt\": ...}", n)
    return item


_VARIABLE = re.compile(r"\$\{([^{}]*)\}")


class UnresolvedVariable(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:  # reads well alone and in "unresolved variable {exc}"
        return f"${{{self.name}}}"


def expand(s: str, variables: Mapping[str, str]) -> str:
    """Replace every ${name} with variables[name]; unknown names raise UnresolvedVariable."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            raise UnresolvedVariable(name)
        return str(variables[name])

    return _VARIABLE.sub(substitute, s)


def render_args(args: Mapping[str, ArgValue], variables: Mapping[str, str]) -> list[str]:
    """Flags mapping -> argv: true is a bare flag, false/null are skipped, a list repeats."""
    argv: list[str] = []
    for flag, value in args.items():
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            items = value if isinstance(value, tuple | list) else (value,)
            for item in items:
                argv += [flag, expand(str(item), variables)]
    return argv


# --- loading --------------------------------------------------------------------------------


class SpecError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))


def load_campaign(path: str | Path) -> Campaign:
    path = Path(path)
    file = str(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CAMPAIGN_BYTES + 1)  # never more: the file may be /dev/zero
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SpecError([Problem(file, 1, 1, f"cannot read campaign file ({reason})")]) from None
    if len(data) > MAX_CAMPAIGN_BYTES:
        raise SpecError([Problem(file, 1, 1, f"campaign file is larger than {MAX_CAMPAIGN_BYTES // 1024} "
                                             "KiB; a campaign is a few (prompts belong in prompt files)")])
    try:
        text = decode_text(data)
    except NotUtf8 as exc:
        message = f"not UTF-8 text (byte 0x{exc.byte:02x}); save the file as UTF-8"
        raise SpecError([Problem(file, exc.line, exc.col, message)]) from None
    try:
        doc = load_marked(text)
    except yaml.YAMLError as exc:
        raise SpecError([yaml_problem(file, exc)]) from None
    if doc.data is None:
        raise SpecError([Problem(file, 1, 1, "campaign file is empty")])

    issues = duplicate_issues(doc)
    campaign: Campaign | None = None
    try:
        campaign = Campaign.model_validate(doc.data)
    except ValidationError as exc:
        issues += [schema_issue(err, Campaign) for err in exc.errors()]
    if isinstance(doc.data, dict):
        issues += _semantic_issues(doc.data, doc, path.parent)
    if issues or campaign is None:
        raise SpecError(sorted({place(file, doc, issue) for issue in issues}))
    campaign._source_path = path.resolve()
    campaign._source_text = text
    return campaign


# --- semantic checks ---------------------------------------------------------------------
# These run on the raw YAML data, whatever the schema said, so one pass reports everything.
# Each check only looks at values of the right shape; wrong shapes are the schema's to report.


def _semantic_issues(raw: Mapping[Any, Any], doc: MarkedDoc, base_dir: Path) -> list[Issue]:
    return (_check_windows(raw, doc) + _check_axes(raw) + _check_sessions(raw) + _check_places(raw)
            + _check_classes(raw, base_dir) + _check_load(raw) + _check_runtime(raw)
            + _check_quality(raw, base_dir) + _check_knobs(raw))


def _check_load(raw: Mapping[Any, Any]) -> list[Issue]:
    """A workload measures at a concurrency (closed loop), a rate (open loop), or both."""
    workload = raw.get("workload")
    if not isinstance(workload, dict) or workload.get("concurrency") or workload.get("rate"):
        return []
    return [(("workload",), True, "the workload has no load: give concurrency (closed loop: C "
                                  "workers) or rate (open loop: requests per second), or both")]


def _window_names(raw: Mapping[Any, Any]) -> list[tuple[int, str]]:
    items = raw.get("windows")
    if not isinstance(items, list):
        return []
    return [(i, w["name"]) for i, w in enumerate(items) if isinstance(w, dict)
            and isinstance(w.get("name"), str)]


def _session_lists(raw: Mapping[Any, Any]) -> dict[Any, list[Any]]:
    sessions = raw.get("sessions")
    if not isinstance(sessions, dict):
        return {}
    return {name: items for name, items in sessions.items() if isinstance(items, list)}


def _check_windows(raw: Mapping[Any, Any], doc: MarkedDoc) -> list[Issue]:
    issues: list[Issue] = []
    first: dict[str, int] = {}
    listed = {n for items in _session_lists(raw).values() for n in items if isinstance(n, str)}
    for i, name in _window_names(raw):
        where = ("windows", i, "name")
        if name == CONTROL:
            issues.append((where, False, "'control' is reserved and cannot name a window"))
        elif RERUN_SUFFIX.search(name):
            issues.append((where, False, f"window {name!r}: a name ending in -rerun<N> is reserved "
                                         "(a window booted again for a rerun gets that suffix on "
                                         "its container's name)"))
        elif name in first:
            line = doc.locate(("windows", first[name], "name")).line
            issues.append((where, False, f"duplicate window name {name!r} (first at line {line})"))
        else:
            first[name] = i
        if name != CONTROL and isinstance(raw.get("sessions"), dict) and name not in listed:
            issues.append((where, False, f"window {name!r} is in no session"))
    return issues


def _check_axes(raw: Mapping[Any, Any]) -> list[Issue]:
    issues: list[Issue] = []
    for i, item in enumerate(raw["windows"] if isinstance(raw.get("windows"), list) else []):
        try:
            window = Window.model_validate(item)
        except ValidationError:
            continue  # the schema reports it; counting axes of a broken change would mislead
        axes = window.axes()
        if not axes:
            message = f"window {window.name!r} changes nothing; a window changes exactly one axis"
        elif len(axes) > 1 and not window.multi_axis:
            message = (f"window {window.name!r} changes {len(axes)} axes ({', '.join(axes)}); "
                       "set multi_axis: true to allow it")
        else:
            continue
        issues.append((("windows", i, "change"), True, message))
    return issues


def _check_sessions(raw: Mapping[Any, Any]) -> list[Issue]:
    names = [name for _, name in _window_names(raw)]
    issues: list[Issue] = []
    for session, items in _session_lists(raw).items():
        seen: set[str] = set()
        for j, name in enumerate(items):
            where = ("sessions", session, j)
            if not isinstance(name, str):
                continue
            if name == CONTROL:
                message = f"session {session!r} lists 'control'; every session boots it already"
            elif name not in names:
                message = f"session {session!r} names unknown window {name!r}"
                message += suggest(name, names)
            elif name in seen:
                message = f"window {name!r} is listed twice in session {session!r}"
            else:
                seen.add(name)
                continue
            issues.append((where, False, message))
    return issues


def _check_places(raw: Mapping[Any, Any]) -> list[Issue]:
    places = raw.get("places")
    if not isinstance(places, list):
        return []
    issues: list[Issue] = []
    seen: set[str] = set()
    runtime = raw.get("runtime", "auto")
    for i, spot in enumerate(places):
        if not isinstance(spot, dict):
            continue
        name = spot.get("name")
        if isinstance(name, str) and name in seen:
            issues.append((("places", i, "name"), False, f"place {name!r} is listed twice"))
        seen.add(str(name))
        if spot.get("docker_host") and runtime not in ("docker", "auto"):
            issues.append((("places", i, "docker_host"), False,
                           f"docker_host needs runtime docker (the campaign's is {runtime!r})"))
        gpus = spot.get("gpus")
        if runtime == "slurm" and gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int)):
            issues.append((("places", i, "gpus"), False,
                           "on runtime slurm a place's gpus is a count (its share of the node: "
                           "--gres=gpu:N); Slurm picks the devices"))
        if spot.get("node") and runtime != "slurm":
            issues.append((("places", i, "node"), False,
                           f"node needs runtime slurm (the campaign's is {runtime!r})"))
    return issues


def _check_classes(raw: Mapping[Any, Any], base_dir: Path) -> list[Issue]:
    workload = raw.get("workload")
    classes = workload.get("classes") if isinstance(workload, dict) else None
    issues: list[Issue] = []
    for name, cls in classes.items() if isinstance(classes, dict) else []:
        if not isinstance(cls, dict):
            continue
        where = ("workload", "classes", name)
        has_prompts, file = cls.get("prompts") is not None, cls.get("file")
        if has_prompts == (file is not None):
            state = "has both 'prompts' and 'file'" if has_prompts else "has no 'prompts' or 'file'"
            issues.append((where, True, f"class {name!r} {state}; give exactly one"))
        else:
            issues += _check_file((*where, "file"), file, base_dir, "prompt file", read_prompts)
    return issues


def _check_file(where: tuple[Any, ...], file: object, base_dir: Path, what: str,
                read: Callable[[Path], object] | None = None) -> list[Issue]:
    """The file exists and, with `read` (a reader raising ValueError), reads; else one issue."""
    if not isinstance(file, str) or "${" in file:  # ${...} resolves only at run time
        return []
    try:
        resolved = (base_dir / file).resolve()
        found = resolved.is_file()
    except (OSError, ValueError) as exc:  # a NUL byte, a name longer than the system allows
        reason = getattr(exc, "strerror", None) or str(exc)
        return [(where, False, f"{what} {describe(file)} cannot be a path ({reason})")]
    if not found:
        return [(where, False, f"{what} not found: {resolved}")]
    try:
        if read is not None:
            read(resolved)
    except ValueError as exc:  # PromptFileError: it names the file and the line
        return [(where, False, f"{what} {exc}")]
    return []


def _check_quality(raw: Mapping[Any, Any], base_dir: Path) -> list[Issue]:
    quality = raw.get("quality")
    if not isinstance(quality, dict):
        return []
    issues: list[Issue] = []
    for section, inline in (("greedy", "prompts"), ("kl", "texts")):
        part = quality.get(section)
        if not isinstance(part, dict):
            continue
        where = ("quality", section)
        if part.get(inline) is not None and part.get("file") is not None:
            issues.append((where, True, f"quality.{section} has both {inline!r} and 'file'; give one"))
        issues += _check_file((*where, "file"), part.get("file"), base_dir, "prompt file",
                              read_prompts)
        oracle = part.get("oracle")
        if section == "kl" and isinstance(oracle, dict):
            issues += _check_file((*where, "oracle", "receipt"), oracle.get("receipt"), base_dir,
                                  "oracle receipt")
    return issues


def _check_knobs(raw: Mapping[Any, Any]) -> list[Issue]:
    """Knobs go into every request as JSON, which has no infinity or NaN."""
    issues: list[Issue] = []

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            issues.append((path, False, f"{dotted(path)}: must be a finite number, got "
                                        f"{describe(value)} (requests are JSON)"))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, (*path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, (*path, i))

    walk(_dig(raw, "workload", "knobs"), ("workload", "knobs"))
    return issues


_RUNTIME_NEEDS = {
    "docker": [("docker", "image")],
    "process": [("process", "command")],
    "attach": [("attach", "url")],
    "auto": [("docker", "image"), ("process", "command")],
}


def _check_runtime(raw: Mapping[Any, Any]) -> list[Issue]:
    runtime = raw.get("runtime", "auto")
    needs = _RUNTIME_NEEDS.get(runtime) if isinstance(runtime, str) else None
    start = _dig(raw, "slurm", "start") or "process"
    if runtime == "slurm":  # the job starts the campaign's command, or a container of its image
        needs = [("process", "command")] if start == "process" else [("docker", "image")]
        if start == "pyxis" and not _dig(raw, "docker", "command"):
            # srun runs a program, not the image's entrypoint: the server's flags would be srun's.
            return [(("slurm", "start"), False, "slurm.start pyxis needs docker.command (srun runs "
                                                "a program in the container, not the image's "
                                                "entrypoint)")]
    if not needs or any(_dig(raw, *keys) for keys in needs):
        return []
    wanted = " or ".join(".".join(keys) for keys in needs)
    why = f" (slurm.start: {start})" if runtime == "slurm" else ""
    return [(("runtime",), False, f"runtime {runtime!r} needs {wanted}{why}")]


def _dig(raw: Mapping[Any, Any], section: str, key: str) -> Any:
    value = raw.get(section)
    return value.get(key) if isinstance(value, dict) else None


# --- CLI --------------------------------------------------------------------------------
