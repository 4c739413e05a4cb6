"""The campaign's value types: strict (YAML already gives typed scalars, so "4" is not an integer
and 1 is not a bool), bounded where past a bound a value is a typo, and names safe in paths. Every
section of the schema (engine.campaign.spec and the modules beside it) is a FrozenModel of these.
"""

import math
import re
from typing import Annotated, Any, Literal, TypeGuard

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    Strict,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from engine.campaign.variables import ArgValue, Scalar
from engine.campaign.yamlmarks import describe

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

# Mixed-type values get a single plain validator instead of a pydantic Union, whose errors would
# come back once per union member.


def is_scalar(value: object) -> TypeGuard[str | int | float]:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def type_error(kind: str, expected: str, value: object) -> PydanticCustomError:
    return PydanticCustomError(kind, f"expected {expected}, got {describe(value)}")


def _check_arg(value: object) -> ArgValue:
    # A flag's value of .nan or .inf is no setting a server takes, and no JSON record holds it.
    items = value if isinstance(value, list | tuple) else [value]
    for v in items:
        if isinstance(v, float) and not math.isfinite(v):
            raise type_error("arg_value", "a finite number", v)
    if value is None or isinstance(value, bool) or is_scalar(value):
        return value
    if isinstance(value, list | tuple) and all(is_scalar(v) for v in value):
        return tuple(value)
    raise type_error("arg_value", "a string, number, true/false/null or a list of those", value)


def _check_env(value: object) -> str:
    # Numbers are fine (CUDA_VISIBLE_DEVICES: 0); a bool is ambiguous ("True"? "1"?), so quote it.
    if is_scalar(value):
        return str(value)
    raise type_error("env_value", "a string", value)


def check_gpus(value: object) -> Gpus:
    if value is None or value == "all" or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, list) and all(is_scalar(v) and not isinstance(v, float) for v in value):
        return tuple(value)
    raise type_error("gpus", "null, 'all', a GPU count or a list of device ids", value)


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


class FrozenModel(BaseModel):
    """A section of the campaign: frozen, and no key it does not name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

