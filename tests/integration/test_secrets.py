"""A real run records no secret and every other value as it is.

The token is a fake value set in this test's environment; the server is the real llama-server of
the testbed. The process command is a shell wrapper that prints ``$HF_TOKEN`` and then execs
llama-server: it stands for a server that echoes its environment into its log.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.commands import launch
from engine.commands.launch import prepare, run_engine
from engine.context import RunContext, WindowContext
from engine.record.journal import read_events
from engine.report import cmd_report
from engine.run.measure import Measurement

TOKEN = "hf_rulerFakeToken0123456789abcdef"
PAT = "ghp_rulerFakePat0123456789abcdefghijklmn"
URL_PASSWORD = "pwSecretInUrl9988"


RUN = """\
name: sec-{suffix}
server: llamacpp
runtime: process
process:
  # The wrapper prints the token the way a chatty server would, then becomes llama-server.
  command: ["/bin/sh", "-c", "echo \\"hf token from env: $HF_TOKEN\\"; echo \\"pat: $GITHUB_PAT\\";
             echo \\"endpoint: $HF_ENDPOINT\\"; exec \\"$0\\" \\"$@\\"", "${{testbed.llama_server}}"]
pass_env: [HF_TOKEN, HF_HOME, GITHUB_PAT]
control:
  model: {models}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {{-m: "${{model}}", -c: 1024, -np: 1, -t: 1}}
  # A password inside a URL, under a name that looks like no secret (issue 49's repeat).
  env: {{HF_ENDPOINT: "${{MIRROR_URL}}"}}
windows:
  - name: flag
    axis: the token as a flag (llama-server's --hf-token; unused with a local -m)
    change:
      args: {{--hf-token: "${{HF_TOKEN}}"}}
sessions:
  s1: [flag]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Say hi."]}}
  concurrency: [1]
  reps: 1
  requests_per_rep: 1
  max_tokens: 4
timeouts: {{boot: 120, request: 60}}
quality: {{enabled: false}}
"""


def test_a_run_records_no_token_and_every_other_value_as_is(
        testbed: tb_mod.Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    models = str(testbed.models["Q4_1"].parent)
    # HF_HOME is passed through but no secret: its value (the models directory, which is in the
    # campaign and in the server's log) must stay as it is everywhere.
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", models)
    monkeypatch.setenv("GITHUB_PAT", PAT)
    monkeypatch.setenv("MIRROR_URL", f"https://user:{URL_PASSWORD}@hf.example")
    spec = tmp_path / "sec.yaml"
    spec.write_text(RUN.format(suffix=uuid.uuid4().hex[:8], models=models))
    run = prepare(str(spec), str(tmp_path / "results"), None)

    # What `ps` shows of the server of each window, read while it runs.
    cmdlines: dict[str, bytes] = {}
    real_phases = launch.default_phases

    def peek(runner: RunContext, ctx: WindowContext) -> None:
        pid = ctx.server.identity["pid"]
        cmdlines[ctx.window] = Path(f"/proc/{pid}/cmdline").read_bytes()

    measurement = [p for p in real_phases() if isinstance(p, Measurement)]  # no quality checks
    monkeypatch.setattr(launch, "default_phases", lambda baseline=None: [peek, *measurement])
    assert run_engine(run, echo=False) == 0
    assert cmd_report(str(run)) == 0
    capsys.readouterr()

    assert TOKEN.encode() not in cmdlines["control"]  # passed as env: not on the command line
    assert TOKEN.encode() in cmdlines["flag"]  # as a flag it is: hence the warning
    for path in run.rglob("*"):
        assert not any(s.lower() in str(path).lower() for s in (TOKEN, PAT, URL_PASSWORD)), path
        if path.is_file():
            text = path.read_text(errors="replace").lower()
            assert not any(s.lower() in text for s in (TOKEN, PAT, URL_PASSWORD)), path
    for name in ("journal.jsonl", "campaign.yaml", "report.md", "windows/s1-control/boot.log",
                 "windows/s1-flag/boot.log"):
        assert (run / name).is_file(), name

    # The server printed the token: its log says which secret stood there.
    boot = (run / "windows/s1-control/boot.log").read_text()
    assert "hf token from env: <redacted:HF_TOKEN>" in boot
    assert "pat: <redacted:GITHUB_PAT>" in boot
    assert "endpoint: https://user:<redacted:HF_ENDPOINT>@hf.example" in boot
    started = {e["window"]: e for e in read_events(run / "journal.jsonl") if e["kind"] == "window_started"}
    argv = started["flag"]["plan"]["argv"]
    assert argv[argv.index("--hf-token") + 1] == "<redacted:HF_TOKEN>"
    assert "--hf-token <redacted:HF_TOKEN>" in (run / "report.md").read_text()
    # Nothing that is no secret was touched: the frozen campaign (less its comments, each line
    # kept: engine.campaign.redact.frozen_copy) and the boot facts are exact.
    source = [re.sub(r"(^|\s+)#.*", "", line) for line in spec.read_text().split("\n")]
    assert (run / "campaign.yaml").read_text().split("\n") == source
    facts = json.loads((run / "windows/s1-control/boot-facts.json").read_text())["facts"]
    assert facts["model.path"] == f"{models}/SmolLM2-135M-Instruct.Q4_1.gguf"
    argv = started["control"]["plan"]["argv"]
    assert argv[argv.index("-m") + 1] == f"{models}/SmolLM2-135M-Instruct.Q4_1.gguf"
