"""The engine runs without the UI: no module under engine/ may import Textual."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"


def test_no_engine_module_imports_textual() -> None:
    offenders = []
    for path in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "textual"]
    assert offenders == []


def test_importing_the_whole_engine_loads_no_textual() -> None:
    modules = sorted(
        ".".join(p.relative_to(ENGINE.parent).with_suffix("").parts)
        for p in ENGINE.rglob("*.py") if p.name != "__init__.py")
    code = ";".join(f"import {m}" for m in modules)
    code += ";import sys;assert 'textual' not in sys.modules, 'textual was imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ENGINE.parent)
