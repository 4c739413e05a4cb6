"""Every command ruler prints for the operator to type works as printed: it names ruler as
engine.commands.invocation.ruler_command() says (``ruler`` only where that is this ruler on the
PATH; else the path that runs it), never a bare ``ruler`` written into the text (``ruler tune``
printed ``ruler attach RUN`` after ``make demo``, where ruler is not on the PATH)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[4]
# A command the operator is told to type: ``ruler <command> [--flag...] `` right before the value
# it is given (a run directory, a file), in an f-string.
COMMAND = re.compile(r"(?<![\w/.-])ruler (attach|status|report|compare|run|ctl|tune|export|prune|"
                     r"validate|parity|facts|testbed)( --?[\w-]+)* $")


def test_no_printed_command_names_a_bare_ruler() -> None:
    found = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.JoinedStr):
                continue
            for part, after in zip(node.values, node.values[1:], strict=False):
                if (isinstance(part, ast.Constant) and isinstance(part.value, str)
                        and isinstance(after, ast.FormattedValue) and COMMAND.search(part.value)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {part.value[-60:]!r}")
    assert not found, "\n".join(found)
