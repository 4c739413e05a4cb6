"""The campaign's schema: the frozen model a campaign file validates into (Campaign, one section per
key: its value types in engine.campaign.values, where its servers start in .machines, its control
and windows in .windows, its workload in .workload; here the quality checks, the leak and verdict
rules, and the campaign itself), and what a loaded campaign answers (a window's server
configuration, a class's prompts). docs/campaign.md is the reference; engine.campaign.load reads a
file into these, engine.campaign.defaults holds what a key left out means.
"""

from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, PlainValidator, PrivateAttr, Strict

from engine.campaign import defaults
from engine.campaign.frozen import GREEDY, KL, Frozen
from engine.campaign.machines import AttachSpec, DockerSpec, Place, ProcessSpec, SlurmSpec, Timeouts
from engine.campaign.prompts import read_prompts
from engine.campaign.values import (
    Arg,
    Bool,
    EnvName,
    FrozenModel,
    Name,
    Port,
    PosInt,
    Seconds,
    Seed,
    SessionName,
    Str,
    Tokens,
    type_error,
)
from engine.campaign.variables import expand
from engine.campaign.windows import Change, Control, ServerName, Window
from engine.campaign.workload import WorkloadSpec
from engine.campaign.yamlmarks import MarkedDoc
from engine.method.design import control_boots, interleave
from engine.method.verdict import Rule
from engine.words import CONTROL, is_control


def _check_oracle(value: object) -> "str | OracleReceipt":
    # A plain validator: a pydantic union would report one error per member.
    if value == CONTROL:
        return CONTROL
    if isinstance(value, dict) and set(value) == {"receipt"} and isinstance(value["receipt"], str):
        return OracleReceipt(receipt=value["receipt"])
    raise type_error("oracle", "'control' or {receipt: path}", value)



class OracleReceipt(FrozenModel):
    receipt: Str  # a reference.json ruler wrote in an earlier run; relative to the campaign file


class GreedySpec(FrozenModel):
    prompts: Annotated[tuple[Str, ...], Field(min_length=1)] | None = None
    file: Str | None = None  # neither: ruler's campaigns/prompts/greedy.txt
    n: Annotated[int, Strict(), Field(ge=1, le=10_000)] = 20  # the notes: 20 greedy prompts
    max_tokens: Tokens = 48
    seed: Seed | None = None  # None: workload.sampling.seed, else 1234


Positions = Annotated[int, Strict(), Field(ge=1, le=1024)]


class TeacherForcedSpec(FrozenModel):
    top_k: Annotated[int, Strict(), Field(ge=1, le=100)] = 10
    positions: Positions = 4  # scored positions per prompt, spread over the control's continuation


class KLSpec(FrozenModel):
    texts: Annotated[tuple[Str, ...], Field(min_length=1)] | None = None
    file: Str | None = None  # neither: the greedy prompts with the oracle's continuations
    top_k: Annotated[int, Strict(), Field(ge=1, le=100)] = 10
    positions: Positions = 4  # per text
    oracle: Annotated[Any, PlainValidator(_check_oracle, json_schema_input_type=Literal["control"]
                                          | OracleReceipt)] = CONTROL


class ToolProbeSpec(FrozenModel):
    n: Annotated[int, Strict(), Field(ge=1, le=10_000)] = 10
    max_tokens: Tokens = 128
    tool_choice: Literal["auto", "required"] = "auto"  # required: the server must force a call


class QualitySpec(FrozenModel):
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


class Leak(FrozenModel):
    min_concurrency: PosInt = defaults.LEAK_MIN_CONCURRENCY  # above every concurrency: never checked
    # The declared noise: a row within it is clean, and the least drop the leak rule voids.
    spread: Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)] = defaults.LEAK_SPREAD
    max_reruns: Annotated[int, Strict(), Field(ge=0, le=100)] = defaults.LEAK_MAX_RERUNS


Fraction = Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)]


class VerdictSpec(FrozenModel):
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



class ServerConfig(FrozenModel):
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


class Campaign(FrozenModel):
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
    workload: WorkloadSpec
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
    # Where each of its values was written (its sweeps' windows at their sweep's entry): what its
    # warnings are placed by, without reading the file again.
    _marks: MarkedDoc = PrivateAttr(default_factory=lambda: MarkedDoc(None))

    @property
    def source_path(self) -> Path:
        return self._source_path

    @property
    def marks(self) -> MarkedDoc:
        return self._marks

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
