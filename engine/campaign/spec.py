"""The campaign's schema: the frozen models a campaign file validates into (Campaign, Window,
Workload...), their strict value types, and what a loaded campaign answers (a window's server
configuration, a class's prompts). docs/campaign.md is the reference; engine.campaign.load reads a
file into these, engine.campaign.defaults holds what a key left out means.
"""

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, TypeGuard, TypeVar

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    Strict,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from engine.campaign import defaults
from engine.campaign.frozen import GREEDY, KL, Frozen
from engine.campaign.prompts import read_prompts
from engine.campaign.sources.conversations import ConversationsSpec
from engine.campaign.sources.dataset import DatasetSpec
from engine.campaign.sources.shared_prefix import SharedPrefixSpec
from engine.campaign.sources.trace import TraceSpec
from engine.campaign.variables import ArgValue, Scalar, expand
from engine.campaign.yamlmarks import describe
from engine.method.design import control_boots, interleave
from engine.method.verdict import Rule
from engine.runtime.slurm import options as sbatch_options
from engine.words import CONTROL, is_control

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

# Bounds past which a value is a typo, not a plan; every one is also finite.
MAX_SECONDS = 7 * 24 * 3600
MAX_CONCURRENCY = 4096
MAX_TOKENS = 1 << 20

Gpus = Literal["all"] | int | tuple[str | int, ...] | None


# --- value types --------------------------------------------------------------------------
# YAML already gives typed scalars, so fields are strict: "4" is not an integer, 1 is not a
# bool. Mixed-type values get a single plain validator instead of a pydantic Union, whose
# errors would come back once per union member.


def _is_scalar(value: object) -> TypeGuard[str | int | float]:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _type_error(kind: str, expected: str, value: object) -> PydanticCustomError:
    return PydanticCustomError(kind, f"expected {expected}, got {describe(value)}")


def _check_arg(value: object) -> ArgValue:
    # A flag's value of .nan or .inf is no setting a server takes, and no JSON record holds it.
    items = value if isinstance(value, list | tuple) else [value]
    for v in items:
        if isinstance(v, float) and not math.isfinite(v):
            raise _type_error("arg_value", "a finite number", v)
    if value is None or isinstance(value, bool) or _is_scalar(value):
        return value
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
        return value
    if isinstance(value, list) and all(_is_scalar(v) and not isinstance(v, float) for v in value):
        return tuple(value)
    raise _type_error("gpus", "null, 'all', a GPU count or a list of device ids", value)


def _dump_gpus(value: Gpus) -> Any:
    # A plain validator leaves pydantic a union to serialize by trial, and a tuple of ids matches
    # none of its members in JSON mode (a warning per id); the value is plain data already.
    return list(value) if isinstance(value, tuple) else value


GpusOut = PlainSerializer(_dump_gpus, when_used="json")


def _named(pattern: str, why: str) -> tuple[Any, ...]:
    """What makes a string a name (``Annotated[str, *_named(...)]``, which a type checker reads as
    str): `pattern`, at most MAX_NAME characters, and why it must be so."""
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > MAX_NAME or not regex.fullmatch(value):
            raise PydanticCustomError("name", f"must match {pattern} (at most {MAX_NAME} "
                                              f"characters; {why}), got {describe(value)}")
        return value

    # The JSON Schema says it too, so an editor flags a bad name as it is typed.
    schema = {"type": "string", "pattern": f"^(?:{pattern})$", "maxLength": MAX_NAME}
    return Strict(), AfterValidator(check), WithJsonSchema(schema)


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
Name = Annotated[str, *_named(NAME_PATTERN, "it names directories, files and containers")]
SessionName = Annotated[str, *_named(SESSION_PATTERN, "no '-', which joins session and window in "
                                                      "directory and container names")]
ArtifactName = Annotated[str, *_named(ARTIFACT_PATTERN, "${artifacts.NAME} must be able to spell it")]
EnvName = Annotated[str, *_named(ENV_PATTERN, "an environment variable name")]
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
    gpus: Annotated[Gpus, PlainValidator(_check_gpus, json_schema_input_type=Gpus), GpusOut] = None
    shm_size: Str | None = None
    ipc: Str | None = None
    volumes: tuple[Str, ...] = ()
    keep: Bool = True


class ProcessSpec(_Frozen):
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
    return value


def _check_sbatch_word(value: str) -> str:
    if not value or sbatch_options.SPECIAL.search(value):
        raise PydanticCustomError("sbatch_word", "must be one word as sbatch reads an #SBATCH line: no "
                                                 "whitespace, control characters, quotes, backslashes "
                                                 f"or '#', got {describe(value)}")
    return value


SbatchWord = Annotated[str, Strict(), AfterValidator(_check_sbatch_word)]  # in #SBATCH --flag=VALUE


class SlurmSpec(_Frozen):
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


class Place(_Frozen):
    """A box, or a fixed slice of one, that runs whole sessions: a session's control and all its
    windows run on the same place, so every delta is measured within one box."""

    name: SessionName
    docker_host: Annotated[str, Strict(), AfterValidator(_check_docker_host)] | None = None
    node: SbatchWord | None = None  # runtime slurm: the node (sbatch --nodelist)
    cpus: Annotated[str, Strict(), AfterValidator(_check_cpuset)] | None = None
    gpus: Annotated[Gpus, PlainValidator(_check_gpus), GpusOut] = None  # docker device ids or a count

    @property
    def gpus_text(self) -> str:
        return ",".join(map(str, self.gpus)) if isinstance(self.gpus, tuple) else str(self.gpus)

    def describe(self) -> str:
        bits = [f"docker {self.docker_host}" if self.docker_host else "",
                f"node {self.node}" if self.node else "", f"cpus {self.cpus}" if self.cpus else "",
                f"gpus {self.gpus_text}" if self.gpus is not None else ""]
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
    knobs: dict[Str, Any] = {}  # request fields over workload.knobs; null removes the knob

    def axes(self) -> list[str]:
        """One name per changed axis, in the order the doc lists them."""
        axes = [f"args {k}" for k in self.args] + [f"env {k}" for k in self.env]
        axes += [key for key in ("image", "command", "model") if getattr(self, key) is not None]
        return axes + [f"artifacts {k}" for k in self.artifacts] + [f"knobs {k}" for k in self.knobs]

    def value(self, axis: str) -> Any:
        """What the change sets the axis (one of :meth:`axes`) to."""
        section, _, key = axis.partition(" ")
        found = getattr(self, section)
        return found[key] if key else found


# A generator (a mapping of values) is expanded before the schema sees it; an editor meets it as
# written, so the file's schema takes both.
SWEEP_SCHEMA = {"anyOf": [
    {"type": "string", "pattern": f"^(?:{NAME_PATTERN})$"},
    {"type": "object", "description": "one key of args, env, artifacts or knobs (or image, model) "
                                      "with a list of values, or {label: value}"},
    {"type": "null"}]}


ServerName = Literal["sglang", "vllm", "llamacpp"]  # the adapters (engine.servers)


class StackServer(_Frozen):
    """A window's own server, another stack than the control's: its adapter and its whole launch.
    Nothing of the control's server is inherited (llama-server's flags mean nothing to vLLM), so
    it names its command (process, slurm) or image (docker), its model, flags and environment."""

    adapter: ServerName
    command: Argv | None = None
    image: Str | None = None
    container_port: Port | None = None  # None: the adapter's default
    model: Str | None = None
    artifacts: dict[ArtifactName, Str] = {}
    args: dict[Str, Arg] = {}
    env: dict[EnvName, EnvStr] = {}


class Window(_Frozen):
    name: Name
    axis: Str = ""
    # A window on another stack (server:) is lossy by nature: another engine's kernels, another
    # model file, its own numerics. Its quality is KL against the control, never "identical".
    lossy: Bool = False
    multi_axis: Bool = False
    # The sweep the window is one value of (engine.campaign.sweep): windows of one sweep change
    # the same one axis, and the trade table compares them.
    sweep: Annotated[Name | None, WithJsonSchema(SWEEP_SCHEMA)] = None
    change: Change = Change()
    server: StackServer | None = None  # another stack than the control's, as the window's axis

    @model_validator(mode="before")
    @classmethod
    def _stack_is_lossy(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("server"), dict) and "lossy" not in data:
            return {**data, "lossy": True}
        return data

    def axes(self) -> list[str]:
        return (["server"] if self.server is not None else []) + self.change.axes()


class PromptClass(_Frozen):
    """Where a class's requests come from: exactly one source (engine.campaign.sources)."""

    prompts: Annotated[tuple[Str, ...], Field(min_length=1)] | None = None
    file: Str | None = None
    dataset: DatasetSpec | None = None
    shared_prefix: SharedPrefixSpec | None = None
    trace: TraceSpec | None = None  # replayed at its own times (engine.campaign.sources.trace)
    conversations: ConversationsSpec | None = None  # multi-turn (engine.campaign.sources.conversations)


class Sampling(_Frozen):
    temperature: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)] = 0.0
    seed: Seed | None = None


class Shard(_Frozen):
    """Past these, per event loop, the load generator splits a pass over worker processes: one
    loop's lag (the error of every timestamp it takes) grows with the chunks it must read."""

    concurrency: Annotated[int, Strict(), Field(ge=1, le=MAX_CONCURRENCY)] = 256
    chunk_rate: Annotated[float, Strict(), Field(gt=0, le=1e9, allow_inf_nan=False)] = 20_000


MAX_RATE = 10_000.0  # requests per second: past it, a typo
MIN_RATE = 0.01  # requests per second: below it a rep's four arrivals outlast any timeout
MIN_REP_SECONDS = 0.001  # a shorter rep sends nothing and measures nothing
MAX_REP_REQUESTS = 100_000  # a rep's requests, as requests_per_rep's bound: each is held in memory


Millis = Annotated[float, Strict(), Field(gt=0, le=MAX_SECONDS * 1000, allow_inf_nan=False)]
OLD_TPOT_KEY = "itl_ms"  # tpot_ms's first name: still read, with a warning (engine.campaign.load)


class Slo(_Frozen):
    """Per request, what counts toward goodput: its time to first token, and its TPOT (the mean gap
    between its tokens after the first, as vLLM's goodput counts it; not the itl_p* chunk gaps),
    both at most these."""

    ttft_ms: Millis | None = None
    # The old key reads as this one; an error it has is placed at the key the file wrote.
    tpot_ms: Millis | None = Field(default=None, validation_alias=AliasChoices("tpot_ms", OLD_TPOT_KEY))

    @model_validator(mode="before")
    @classmethod
    def _one_tpot_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tpot_ms" in data and OLD_TPOT_KEY in data:
            raise PydanticCustomError("slo_keys", f"give tpot_ms only: {OLD_TPOT_KEY} is its old name")
        return data

    def text(self) -> str:
        """``TTFT <= 500 ms, TPOT <= 40 ms``; "" when none is set (the dry run and the report)."""
        return ", ".join(([f"TTFT <= {self.ttft_ms:g} ms"] if self.ttft_ms is not None else [])
                         + ([f"TPOT <= {self.tpot_ms:g} ms"] if self.tpot_ms is not None else []))


LimitKey = Literal["ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms",
                   "tpot_p99_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms"]  # sla.LIMIT_KEYS
Positive = Annotated[float, Strict(), Field(gt=0, le=MAX_RATE, allow_inf_nan=False)]


class CapacitySpec(_Frozen):
    """Capacity at an SLA (engine.method.capacity): per window and class, the highest load at which
    ``holds`` (and ``goodput``) hold, by a bracketing search from ``range``, each probe a row."""

    over: Literal["rate", "concurrency"] = "rate"
    range: tuple[Positive, Positive]  # the low and high end the search starts from
    holds: dict[LimitKey, Millis] = {}  # per rep: TTFT/TPOT/ITL at a percentile at most so many ms
    goodput: Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    resolution: Annotated[float, Strict(), Field(gt=0, le=10, allow_inf_nan=False)] = 0.1
    max_probes: Annotated[int, Strict(), Field(ge=2, le=100)] = 8
    classes: tuple[Name, ...] = ()  # none: every class measured at that kind of load


TIMED_REQUESTS = 100_000  # a rep sized by time: the requests it may send before its seconds end


class Workload(_Frozen):
    classes: Annotated[dict[Name, PromptClass], Field(min_length=1)]
    # Closed loop: C workers, each sending its next request when the last one ends.
    concurrency: tuple[Annotated[int, Strict(), Field(ge=1, le=MAX_CONCURRENCY)], ...] = ()
    # Open loop: requests arrive at this many a second (seeded), whatever is in flight.
    rate: tuple[Annotated[float, Strict(), Field(ge=MIN_RATE, le=MAX_RATE, allow_inf_nan=False)], ...] = ()
    # The rate's gaps: gamma of this shape (vLLM's name), 1 a Poisson process, below 1 burstier.
    # Below 0.01 nearly every gap is 0 in floating point: every arrival at once, no process at all.
    burstiness: Annotated[float, Strict(), Field(ge=0.01, le=100, allow_inf_nan=False)] = 1.0
    slo: Slo = Slo()
    reps: Annotated[int, Strict(), Field(ge=1, le=1000)] = defaults.REPS
    requests_per_rep: Annotated[int, Strict(), Field(ge=1, le=MAX_REP_REQUESTS)] | None = None
    # Reps sized by time: the workers keep sending until this many seconds, then the rep ends
    # with the requests in flight (at a rate: this many seconds of arrivals).
    rep_seconds: Annotated[float, Strict(), Field(ge=MIN_REP_SECONDS, le=MAX_SECONDS,
                                                  allow_inf_nan=False)] | None = None
    # Reps to a precision (engine.method.precision): reps are added to a row until the 95 %
    # interval on its delta against the control is at most this wide each side (a fraction).
    precision: Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)] | None = None
    max_reps: Annotated[int, Strict(), Field(ge=1, le=1000)] = defaults.MAX_REPS  # with precision
    max_tokens: Tokens = defaults.MAX_TOKENS
    # Every request without its own output length generates exactly max_tokens, past its end of
    # sequence, where the server has fields for that (engine.servers: ServerClient's
    # exact_length_fields): each rep then decodes the same tokens. Off by default: text past an
    # end of sequence is no reply a user reads (a draft model accepts it differently).
    exact_output: Bool = False
    sampling: Sampling = Sampling()
    knobs: dict[Str, Any] = {}
    shard: Shard = Shard()
    # The prefix cache before each warm pass and rep: keep (as the previous pass left it: reps
    # after the warm pass measure cache hits) or flush (empty, so every pass computes its prompts).
    cache: Literal["keep", "flush"] = defaults.CACHE
    capacity: CapacitySpec | None = None  # capacity at an SLA, per window and class

    def capacity_classes(self) -> list[str]:
        """The classes whose capacity is searched: those named, else every class measured at the
        search's kind of load (a trace has its own; a multi-turn class takes no rate)."""
        cap = self.capacity
        if cap is None:
            return []
        if cap.classes:
            return list(cap.classes)
        return [n for n, spec in self.classes.items() if spec.trace is None
                and not (spec.conversations is not None and cap.over == "rate")]

    def requests_for(self, concurrency: int) -> int:
        """Requests of a closed-loop pass (with rep_seconds: the most it may send)."""
        if self.rep_seconds and not self.requests_per_rep:
            return TIMED_REQUESTS
        return self.requests_per_rep or defaults.REQUESTS_PER_WORKER * max(concurrency, 1)

    def pass_size(self, concurrency: int) -> str:
        """A closed-loop pass's size as a reader plans by: its requests, or its seconds when it is
        sized by time (its request count is then only a cap)."""
        if self.rep_seconds and not self.requests_per_rep:
            return f"{self.rep_seconds:g} s"
        return str(self.requests_for(concurrency))

    def requests_at(self, rate: float) -> int:
        """Requests of an open-loop pass: ten seconds of arrivals (or rep_seconds), at least four."""
        return self.requests_per_rep or max(4, math.ceil((self.rep_seconds or 10) * rate))

    def arrivals(self) -> str:
        """How a rate row's requests arrive, in words (the dry run's and the report's)."""
        if self.burstiness == 1.0:
            return "Poisson arrivals"
        return f"gamma arrivals of shape {self.burstiness:g} (burstiness; 1 is Poisson)"

    def loads(self) -> list[tuple[int, float | None]]:
        """Every load a class is measured at, in order: (C, None) closed loop, then (0, rate)."""
        return [(c, None) for c in self.concurrency] + [(0, r) for r in self.rate]

    def loads_of(self, cls: str) -> list[tuple[int, float | None]]:
        """The loads class ``cls`` is measured at: a trace at its own times alone ((0, None), the
        row ``trace``), a multi-turn class at each concurrency (a worker owns a conversation),
        any other class at every load."""
        spec = self.classes[cls]
        if spec.trace is not None:
            return [(0, None)]
        if spec.conversations is not None:
            return [(c, None) for c in self.concurrency]
        return self.loads()


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
    min_concurrency: PosInt = defaults.LEAK_MIN_CONCURRENCY  # above every concurrency: never checked
    # The declared noise: a row within it is clean, and the least drop the leak rule voids.
    spread: Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)] = defaults.LEAK_SPREAD
    max_reruns: Annotated[int, Strict(), Field(ge=0, le=100)] = defaults.LEAK_MAX_RERUNS


Fraction = Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)]


class VerdictSpec(_Frozen):
    """How window rows are called against the control (engine.method.verdict)."""

    error_rate: Fraction = defaults.ERROR_RATE
    correction: Literal["holm", "bh"] = defaults.CORRECTION
    margin: Fraction = defaults.MARGIN
    # Declared for a shape whose noise between boots nothing measured (no control boot twice in a
    # session, no window in two sessions, no --baseline): every call that rests on it says so.
    # None: such a shape gets an interval from nothing and is not called.
    boot_noise: Fraction | None = defaults.BOOT_NOISE
    # A window on another stack whose prompts are not token-identical with the control's has its
    # deltas withheld; true gives them anyway (as `ruler compare --allow-different` does).
    allow_different: Bool = False
    # After the campaign's sessions, add sessions of the windows not yet decided (each row an
    # effect or shown within the margin) until all are or the budget ends: max_boots (every boot,
    # the control's included) and/or max_minutes (of booted servers, boot to stop).
    until_decided: Bool = False
    max_boots: PosInt | None = None
    max_minutes: Seconds | None = None
    # What `ruler plan` sizes a campaign for: the least effect worth calling, and the power wanted.
    detect: Fraction = defaults.DETECT
    power: Fraction = defaults.POWER

    def rule(self) -> Rule:
        return Rule(self.error_rate, self.correction, self.margin, self.boot_noise,
                    self.allow_different, self.until_decided, self.max_boots, self.max_minutes)


class Timeouts(_Frozen):
    boot: Seconds = 600
    request: Seconds = 300
    window: Seconds = 3600
    queue: Seconds = 3600  # a batch job (runtime slurm) waiting in its scheduler's queue
    connect: Seconds = 15  # reaching a place's host over ssh; a link silent as long is given up


class ServerConfig(_Frozen):
    """What one window actually boots: the control with the window's change applied."""

    model: str | None
    artifacts: dict[str, str]
    args: dict[str, Arg]  # removed/false flags already dropped
    env: dict[str, str]
    image: str | None
    command: tuple[str, ...] | None  # None: the runtime section's own command
    server: str = ""  # the server it boots (engine.servers)
    # A window on another stack: its command and image are its own, never the runtime section's
    # (which are the control's stack's), and its container port is its adapter's unless given.
    own_stack: bool = False
    container_port: int | None = None


class Campaign(_Frozen):
    name: Name
    server: ServerName
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
    # both: the control first and again last in each session (CONTROL_AGAIN), which measures the
    # noise between boots every delta's interval counts; interleaved: about the root of the
    # session's windows control boots (at least two), first, last and spread between them
    # (Dunnett's allocation); first or last: once (the noise from other sessions or a baseline).
    control_position: Literal["first", "last", "both", "interleaved"] = defaults.CONTROL_POSITION
    workload: Workload
    leak: Leak = Leak()
    verdict: VerdictSpec = VerdictSpec()
    timeouts: Timeouts = Timeouts()
    quality: QualitySpec = QualitySpec()

    # Private, so a YAML key can never set them; filled by load_campaign.
    _source_path: Path = PrivateAttr(default_factory=Path)
    _source_text: str = PrivateAttr(default="")
    # A run's own campaign.yaml: what that run froze (engine.campaign.frozen), which its classes'
    # items and its quality prompts are read from in place of the files it names.
    _frozen: Frozen | None = PrivateAttr(default=None)

    @property
    def source_path(self) -> Path:
        return self._source_path

    @property
    def frozen(self) -> Frozen | None:
        return self._frozen

    @property
    def source_text(self) -> str:
        return self._source_text

    def window(self, name: str) -> Window:
        if is_control(name):  # a later control boot: no change, no axis
            return Window(name=name)
        for window in self.windows:
            if window.name == name:
                return window
        raise KeyError(f"no window named {name!r}")

    def sweeps(self) -> dict[str, list[Window]]:
        """Each sweep's windows, in the order of its values (the campaign's order)."""
        out: dict[str, list[Window]] = {}
        for window in self.windows:
            if window.sweep is not None:
                out.setdefault(window.sweep, []).append(window)
        return out

    def knobs_for(self, window_name: str) -> dict[str, Any]:
        """The request fields a window sends: the workload's knobs with its change's over them."""
        change = Change() if is_control(window_name) else self.window(window_name).change
        return {k: v for k, v in {**self.workload.knobs, **change.knobs}.items() if v is not None}

    def control_value(self, axis: str) -> Any:
        """What the control sets an axis (``args --x``, ``env K``, ``knobs k``, ``model``...) to;
        None where it leaves it out."""
        section, _, key = axis.partition(" ")
        if section == "knobs":
            return self.workload.knobs.get(key)
        config = self.config_for(CONTROL)
        found = getattr(config, section)
        return found.get(key) if key else found

    def windows_in(self, session: str) -> list[str]:
        """The boot order of a session, the control included."""
        names = list(self.sessions[session])
        if self.control_position in ("both", "interleaved"):
            return interleave(names, control_boots(len(names), self.control_position))
        return [CONTROL, *names] if self.control_position == "first" else [*names, CONTROL]

    def config_for(self, window_name: str, runtime: str | None = None) -> ServerConfig:
        """The effective server configuration of a window ("control" gives the control).

        `command` is the window's change.command; when it has none and `runtime` is given
        ("docker" or "process"), that runtime's command; else None. The campaign's own runtime
        is deliberately not assumed: `ruler run --runtime` may override it.
        """
        window = None if is_control(window_name) else self.window(window_name)
        if window is not None and window.server is not None:
            own = window.server
            return ServerConfig(model=own.model, artifacts=dict(own.artifacts),
                                args=_merge(own.args, {}), env=dict(own.env), image=own.image,
                                command=own.command, server=own.adapter, own_stack=True,
                                container_port=own.container_port)
        change = Change() if window is None else window.change
        base = {"docker": self.docker.command, "process": self.process.command}.get(runtime or "")
        return ServerConfig(
            model=self.control.model if change.model is None else change.model,
            artifacts={**self.control.artifacts, **change.artifacts},
            args=_merge(self.control.args, change.args),
            env=_merge(self.control.env, change.env),
            image=self.docker.image if change.image is None else change.image,
            command=base if change.command is None else change.command,
            server=self.server, container_port=self.docker.container_port,
        )

    def server_for(self, window_name: str) -> str:
        """The server a window boots: its own stack's, else the campaign's."""
        if is_control(window_name):
            return self.server
        own = self.window(window_name).server
        return self.server if own is None else own.adapter

    def stack_windows(self) -> list[str]:
        """The windows on another stack than the control's."""
        return [w.name for w in self.windows if w.server is not None]

    def greedy_prompts(self, variables: Mapping[str, str] | None = None) -> list[str]:
        """The first `quality.greedy.n` greedy prompts (fewer when the source has fewer)."""
        g = self.quality.greedy
        if g.prompts is not None:
            prompts = list(g.prompts)
        elif g.file is not None and self._frozen is not None and GREEDY in self._frozen.quality:
            prompts = list(self._frozen.quality[GREEDY])
        elif g.file is not None:
            prompts = read_prompts(self._resolve(g.file, variables))
        else:
            prompts = read_prompts(defaults.GREEDY_FILE)
        return prompts[: g.n]

    def kl_texts(self, variables: Mapping[str, str] | None = None) -> list[str] | None:
        """The fixed KL texts, or None: KL then scores the greedy prompts' continuations."""
        kl = self.quality.kl
        if kl.texts is not None:
            return list(kl.texts)
        if kl.file is not None and self._frozen is not None and KL in self._frozen.quality:
            return list(self._frozen.quality[KL])
        return read_prompts(self._resolve(kl.file, variables)) if kl.file is not None else None

    def oracle_receipt(self, variables: Mapping[str, str] | None = None) -> Path | None:
        oracle = self.quality.kl.oracle
        return self._resolve(oracle.receipt, variables) if isinstance(oracle, OracleReceipt) else None

    def quality_seed(self) -> int:
        seed = self.quality.greedy.seed
        if seed is None:
            seed = self.workload.sampling.seed
        return defaults.SEED if seed is None else seed

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
