"""A campaign's control and its windows: what the control configures, what a window changes (its
one axis), and a window on another stack with its own server."""

from typing import Annotated, Any, Literal

from pydantic import WithJsonSchema, model_validator

from engine.campaign.values import (
    NAME_PATTERN,
    Arg,
    Argv,
    ArtifactName,
    Bool,
    EnvName,
    EnvStr,
    FrozenModel,
    Name,
    Port,
    Str,
)


class Control(FrozenModel):
    model: Str | None = None  # optional: an attached server, or a model named only in args
    artifacts: dict[ArtifactName, Str] = {}
    args: dict[Str, Arg] = {}
    env: dict[EnvName, EnvStr] = {}


class Change(FrozenModel):
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


class StackServer(FrozenModel):
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


class Window(FrozenModel):
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

