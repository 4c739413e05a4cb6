"""What a reader imports before its first output (issue 17: ``ruler attach`` spent more of its start
importing than reading the run): the console no HTTP client and no adapter but its run's,
``ruler status`` no console, ``ruler attach`` no fold before it hands over to the console. Each is
checked in a fresh interpreter, as the command starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.servers import known_adapters
from tests.paths import FIXTURES

RUN = FIXTURES / "runs" / "demo-smollm2"  # a llamacpp run
HTTP = ("httpx", "certifi", "prometheus_client", "uvloop", "numpy")


def modules(code: str) -> set[str]:
    """Every module imported once ``code`` ran, in an interpreter of its own."""
    dump = "import json, sys; print(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    out = subprocess.run([sys.executable, "-c", f"{code}\n{dump}"], capture_output=True, text=True,
                         check=True)
    return set(json.loads(out.stderr.strip().splitlines()[-1]))


def top(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


def test_the_console_takes_the_spec_defaults_without_the_schema() -> None:
    """tui.core.rules fills what an older journal's rules leave out with the spec's defaults:
    from engine.campaign.defaults, never the pydantic schema (pydantic alone adds tens of
    milliseconds to the console's start)."""
    mods = modules("import tui.app")
    assert "engine.campaign.defaults" in mods
    assert "pydantic" not in top(mods) and "engine.campaign.spec" not in mods


@pytest.mark.parametrize("server", known_adapters())
def test_the_console_imports_no_http_client_and_only_its_runs_adapter(server: str) -> None:
    mods = modules("import tui.app\n"
                   "from engine.servers import get_adapter\n"
                   f"get_adapter({server!r})  # as the console does once the run says its server")
    assert "textual" in top(mods)
    assert not top(mods) & set(HTTP)
    assert {f"engine.servers.{server}.{part}" for part in ("launch", "logs", "client")} <= mods
    packages = {".".join(m.split(".")[:3]) for m in mods}  # engine.servers.<adapter>
    others = {f"engine.servers.{name}" for name in known_adapters() if name != server}
    assert not packages & others


def test_ruler_status_imports_no_console_and_no_http_client() -> None:
    mods = modules("import contextlib, io\n"
                   "from engine.commands.cli import main\n"
                   "with contextlib.redirect_stdout(io.StringIO()):\n"
                   f"    assert main(['status', '--json', {str(RUN)!r}]) == 0")
    assert "engine.record.snapshot" in mods  # it did read the run
    assert not top(mods) & {"textual", "tui", *HTTP}


def test_ruler_attach_reads_no_fold_before_the_console_takes_over() -> None:
    """attach resolves RUN_DIR and exec's the console, which reads the journal itself."""
    mods = modules(f"from engine.commands.cli import run_dir_arg\nrun_dir_arg({str(RUN)!r})")
    assert not mods & {"engine.record.snapshot", "engine.record.state", "engine.gpu"}
    assert not top(mods) & {"textual", "tui", *HTTP}


def test_the_campaign_defaults_load_no_schema() -> None:
    """The console reads a frozen campaign.yaml with the spec's defaults, without pydantic."""
    mods = modules("from engine.campaign import defaults\nassert defaults.REPS >= 1")
    assert "engine.campaign.defaults" in mods
    assert not top(mods) & {"pydantic", "pydantic_core", "yaml"}
    assert not mods & {"engine.campaign.spec", "engine.campaign.load"}


def test_the_console_speaks_the_control_socket_without_the_run_layer() -> None:
    mods = modules("import tui.app, tui.core.follow")
    assert "engine.control" in mods
    assert not {m for m in mods if m == "engine.run" or m.startswith("engine.run.")}
