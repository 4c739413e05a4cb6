"""``${name}`` variables: a campaign's values name the host's environment, the testbed, the model and
the window's artifacts, resolved when a window is planned; a name nothing defines is an error."""

from __future__ import annotations

import re
from collections.abc import Mapping

Scalar = str | int | float
# A server argument's value as the campaign writes it (a flag alone is true, a list repeats it).
ArgValue = Scalar | bool | tuple[Scalar, ...] | None

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

