"""runtime slurm, the parts that need no cluster: how ruler reads Slurm (squeue --json, scontrol -o),
the job script it submits, the campaign's ``slurm:`` section, and the fold of a real Slurm run.

Slurm's outputs here are real where this machine's Slurm (22.05.8, Debian's) can print them:
tests/fixtures/slurm/squeue-22.05-*.json and scontrol-22.05.txt were captured from two jobs
submitted for them (one that ran ``sleep 15; exit 3``, one held with ``sbatch --hold`` and then
cancelled). Newer Slurm prints the same jobs in other shapes; those are written out below from
Slurm's own source, each citing where. The real cluster runs are in
tests/integration/test_slurm_cluster.py.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.campaign.dryrun import dry_run
from engine.campaign.launch import WindowStart, plan_launch
from engine.campaign.load import SpecError, load_campaign
from engine.commands.progress import format_event
from engine.record.events import EventKind
from engine.record.fold import fold
from engine.record.journal import read_events
from engine.report import load_run, render
from engine.runtime.base import LaunchPlan
from engine.runtime.slurm.commands import JobState, _exit_of, ended_line, parse_scontrol
from engine.runtime.slurm.script import job_script
from engine.servers import get_adapter
from engine.words import WindowStatus
from tests.paths import FIXTURES
from tui.core.facts import facts_lines
from tui.core.windows import phase, window_status

SLURM = FIXTURES / "slurm"
CAMPAIGN = SLURM / "campaign.yaml"
JOURNAL = SLURM / "journal.jsonl"


def jobs(name: str) -> dict[str, dict[str, Any]]:
    data = json.loads((SLURM / name).read_text())
    return {str(j["job_id"]): j for j in data["jobs"]}


# ------------------------------------------------------------------ squeue --json


def test_squeue_22_05_live_jobs() -> None:
    """A running job and a held one, as `squeue --json` printed them here (Slurm 22.05.8)."""
    live = jobs("squeue-22.05-live.json")
    running, held = JobState.from_json(live["8"]), JobState.from_json(live["9"])
    assert running == JobState("8", "ruler-face-probe", "ruler-run=face-probe", "RUNNING", "", "vm",
                               "0:0")
    assert running.active and not running.queued
    assert held == JobState("9", "ruler-face-held", "ruler-run=face-probe", "PENDING", "JobHeldUser",
                            "", "0:0")
    assert held.active and held.queued


def test_squeue_22_05_ended_jobs() -> None:
    """The same jobs after their end: `exit 3` is the raw wait status 768, read as scontrol's 3:0."""
    ended = jobs("squeue-22.05-ended.json")
    assert ended["8"]["exit_code"] == 768
    failed, cancelled = JobState.from_json(ended["8"]), JobState.from_json(ended["9"])
    assert (failed.state, failed.reason, failed.node, failed.exit_code) == (
        "FAILED", "NonZeroExitCode", "vm", "3:0")
    assert (cancelled.state, cancelled.reason, cancelled.node) == ("CANCELLED", "JobHeldUser", "")
    assert not failed.active and not cancelled.active


def as_23_02(job: dict[str, Any]) -> dict[str, Any]:
    """A 22.05 job as Slurm 23.02's `squeue --json` (data_parser v0.0.39) prints it: job_state is
    still a string (DUMP_FUNC(JOB_STATE) writes job_state_string()), but exit_code is a number that
    may be unset, ``{"set", "infinite", "number"}`` holding the raw wait status (slurm-23-02-7-1,
    src/plugins/data_parser/v0.0.39/parsers.c: ``add_parse(UINT32_NO_VAL, exit_code, "exit_code")``
    in the job-info parser and DUMP_FUNC(UINT32_NO_VAL))."""
    out = copy.deepcopy(job)
    out["exit_code"] = {"set": True, "infinite": False, "number": job["exit_code"]}
    return out


def as_23_11(job: dict[str, Any], status: str, rc: int | None, sig: int | None,
             signame: str = "") -> dict[str, Any]:
    """A job as Slurm 23.11+ prints it (data_parser v0.0.40; the same in v0.0.41 of 24.05 and
    v0.0.43 of 25.05): job_state is a list of flags, the base state first
    (``add_parse_bit_flag_array(slurm_job_info_t, JOB_STATE, ..., "job_state")``), and exit_code
    is PROCESS_EXIT_CODE_VERBOSE: ``status`` flags, ``return_code`` and ``signal/id`` as unset-able
    numbers, ``signal/name`` (slurm-23-11-10-1, src/plugins/data_parser/v0.0.40/parsers.c:
    DUMP_FUNC(PROCESS_EXIT_CODE), PARSER_ARRAY(PROCESS_EXIT_CODE_VERBOSE), DUMP_FUNC(UINT32_NO_VAL)
    and DUMP_FUNC(UINT16_NO_VAL))."""
    def num(n: int | None) -> dict[str, Any]:
        return {"set": n is not None, "infinite": False, "number": n or 0}

    out = copy.deepcopy(job)
    out["job_state"] = [job["job_state"]]
    out["exit_code"] = {"status": [status], "return_code": num(rc),
                        "signal": {"id": num(sig), "name": signame}}
    return out


def test_squeue_23_02_exit_code_is_an_unset_able_wait_status() -> None:
    """Read as "" before: the dict has no return_code, so the job's exit code was lost."""
    ended = jobs("squeue-22.05-ended.json")
    failed = JobState.from_json(as_23_02(ended["8"]))
    assert (failed.state, failed.exit_code) == ("FAILED", "3:0")
    pending = as_23_02(jobs("squeue-22.05-live.json")["9"])
    pending["exit_code"] = {"set": False, "infinite": False, "number": 0}  # NO_VAL: none yet
    assert JobState.from_json(pending).exit_code == ""


def test_squeue_23_11_job_state_list_and_verbose_exit_code() -> None:
    """The signal id is itself an unset-able number: it was printed as the dict ("3:{'set': ...")."""
    ended = jobs("squeue-22.05-ended.json")
    failed = JobState.from_json(as_23_11(ended["8"], "ERROR", 3, None))
    assert (failed.state, failed.reason, failed.exit_code) == ("FAILED", "NonZeroExitCode", "3:0")
    done = JobState.from_json(as_23_11(ended["8"] | {"job_state": "COMPLETED"}, "SUCCESS", 0, None))
    assert (done.state, done.exit_code) == ("COMPLETED", "0:0")
    # WIFSIGNALED: no return code (NO_VAL), the signal's number; scontrol says 0:9.
    killed = JobState.from_json(as_23_11(ended["9"], "SIGNALED", None, 9, "KILL"))
    assert (killed.state, killed.exit_code) == ("CANCELLED", "0:9")
    held = as_23_11(jobs("squeue-22.05-live.json")["9"], "PENDING", None, None)
    state = JobState.from_json(held)
    assert (state.state, state.reason, state.queued, state.exit_code) == (
        "PENDING", "JobHeldUser", True, "")


@pytest.mark.parametrize(("code", "said"), [
    (0, "0:0"), (768, "3:0"), (256, "1:0"), (9, "0:9"), (15, "0:15"), (None, ""), ("1:0", "1:0")])
def test_exit_of_a_raw_wait_status_reads_as_scontrol_writes_it(code: object, said: str) -> None:
    """22.05 prints the raw wait status (exit << 8 | signal): 256 is `exit 1`, 9 a SIGKILL."""
    assert _exit_of({"exit_code": code}) == said


# ------------------------------------------------------------------ scontrol -o show job


def test_parse_scontrol_on_real_lines() -> None:
    """`scontrol -o show job` of the held job (PENDING), the failed one, the cancelled one."""
    held, failed, cancelled = (parse_scontrol(line) for line in
                               (SLURM / "scontrol-22.05.txt").read_text().splitlines())
    assert (held["JobId"], held["JobState"], held["Reason"]) == ("9", "PENDING", "JobHeldUser")
    assert {k: failed[k] for k in ("JobId", "JobName", "JobState", "Reason", "ExitCode", "NodeList",
                                   "BatchHost", "Partition", "NumCPUs", "Comment")} == {
        "JobId": "8", "JobName": "ruler-face-probe", "JobState": "FAILED",
        "Reason": "NonZeroExitCode", "ExitCode": "3:0", "NodeList": "vm", "BatchHost": "vm",
        "Partition": "debug", "NumCPUs": "1", "Comment": "ruler-run=face-probe"}
    # A value holding '=' or ':' stays whole; keys with ':' and '/' are keys; an empty value is "".
    assert failed["TRES"] == "cpu=1,node=1,billing=1"
    assert failed["AllocNode:Sid"] == "localhost:7565"
    assert failed["CPUs/Task"] == "1"
    assert failed["Power"] == ""
    assert (cancelled["JobState"], cancelled["NodeList"]) == ("CANCELLED", "")
    assert ended_line(failed, "8") == "Slurm job 8 FAILED (reason NonZeroExitCode, exit code 3:0, node vm)"
    assert ended_line(cancelled, "9") == "Slurm job 9 CANCELLED (reason JobHeldUser, exit code 0:0)"


# ------------------------------------------------------------------ the job script


def slurm_campaign(tmp_path: Path, start: str, **slurm: Any) -> Path:
    """The fixture campaign with another slurm section; a secret in the control's args and env."""
    spec = yaml.safe_load(CAMPAIGN.read_text())
    spec["slurm"] = {"start": start, **slurm}
    spec["docker"] = {"image": "ghcr.io/ggml-org/llama.cpp:server", "command": ["llama-server"]}
    spec["control"]["args"]["--api-key"] = "${API_KEY}"
    spec["control"]["env"] = {"HF_TOKEN": "${HF_TOKEN}", "LLAMA_LOG_COLORS": "off"}
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


TOKEN, API_KEY = "hf_abcdefghijklmnop", "sk-0123456789abcdef"
VARS = {"testbed.image": "img", "testbed.llama_server": "/opt/llama-server",
        "testbed.models": "/models", "API_KEY": API_KEY}


def plan_for(path: Path, window: str = "ctx", node: str | None = "node7") -> LaunchPlan:
    campaign = load_campaign(path)
    return plan_launch(campaign, get_adapter(campaign.server), WindowStart(
        "slurm", "2026-12-01-sltry.abcd1234", "s1", window, VARS,
        {"HF_TOKEN": TOKEN, "API_KEY": API_KEY},
        workdir=Path("/shared/results/run/windows") / f"s1-{window}", node=node))


SECRETS = {TOKEN: "HF_TOKEN", API_KEY: "API_KEY"}  # value -> its variable


def test_every_sbatch_line(tmp_path: Path) -> None:
    path = slurm_campaign(tmp_path, "process", partition="gpu", account="proj-7", qos="high",
                          time="1-02:00:00", gres="gpu:4", sbatch=["--mem=0", "--constraint=h200"])
    script = job_script(plan := plan_for(path), plan.workdir or Path(), SECRETS)
    assert [line for line in script.splitlines() if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=ruler-sltry-s1-ctx",
        "#SBATCH --comment=ruler-run=2026-12-01-sltry.abcd1234",
        "#SBATCH --output=/shared/results/run/windows/s1-ctx/boot.log",
        "#SBATCH --open-mode=append",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --no-requeue",
        "#SBATCH --exclusive",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj-7",
        "#SBATCH --qos=high",
        "#SBATCH --time=1-02:00:00",
        "#SBATCH --gres=gpu:4",
        "#SBATCH --nodelist=node7",
        "#SBATCH --mem=0",
        "#SBATCH --constraint=h200",
    ]


def test_a_shared_node_and_the_control_go_wherever_slurm_puts_them(tmp_path: Path) -> None:
    path = slurm_campaign(tmp_path, "process", exclusive=False)
    plan = plan_for(path, "control", node=None)
    sbatch = [x for x in job_script(plan, plan.workdir or Path(), {}).splitlines() if "#SBATCH" in x]
    assert not any("--exclusive" in x or "--nodelist" in x for x in sbatch)
    assert "#SBATCH --output=/shared/results/run/windows/s1-control/boot.log" in sbatch


def sbatch_reads(line: str) -> list[str]:
    """The words sbatch makes of an #SBATCH line (src/sbatch/opt.c get_argument, Slurm 22.05.8):
    split at whitespace, quotes group and are dropped, a backslash takes the next character as
    is, an unquoted '#' ends the line."""
    words: list[str] = []
    word: str | None = None
    quote, escape = "", False
    for ch in line.removeprefix("#SBATCH"):
        if escape:
            escape, word = False, (word or "") + ch
        elif ch == "\\":
            escape = True
        elif quote:
            if ch == quote:
                quote = ""
            else:
                word = (word or "") + ch
        elif ch in "\"'":
            quote, word = ch, word or ""
        elif ch == "#":
            break
        elif ch.isspace():
            if word is not None:
                words.append(word)
            word = None
        else:
            word = (word or "") + ch
    assert not quote, f"sbatch refuses the line: unmatched {quote}"
    return words + ([word] if word is not None else [])


@pytest.mark.parametrize("where", ["/shared/with space", "/shared/a#b", '/shared/say "x"',
                                   "/shared/back\\slash", "/shared/50%", "/shared/it's"])
def test_a_window_directory_sbatch_would_split_is_one_quoted_word(tmp_path: Path, where: str) -> None:
    """Issue 26, item 12: the --output line reads as the one path, whatever the directory holds
    (tests/integration/test_slurm_cluster.py runs a campaign under such a directory)."""
    plan = plan_for(slurm_campaign(tmp_path, "process"))
    workdir = Path(where) / "windows" / "s1-ctx"
    line = next(x for x in job_script(plan, workdir, SECRETS).splitlines()
                if x.startswith("#SBATCH --output="))
    (word,) = sbatch_reads(line)
    name = word.removeprefix("--output=")
    if "%" in where or "\\" in where:
        # slurmstepd's own escape (src/slurmd/common/fname.c remove_path_slashes): "\\" is one
        # backslash, a lone one is dropped and turns the %-patterns off.
        assert name == str(workdir).replace("\\", "\\\\") + "/\\boot.log"
    else:
        assert name == f"{workdir}/boot.log"


def test_a_window_directory_with_a_newline_is_refused_before_any_job() -> None:
    from engine.runtime.base import LaunchError
    from engine.runtime.slurm.server import SlurmRuntime

    with pytest.raises(LaunchError, match="has a control character in its path"):
        SlurmRuntime().preflight(Path("/shared/new\nline/run"))


@pytest.mark.parametrize("start", ["process", "docker", "pyxis"])
def test_a_secret_is_a_reference_never_its_value(tmp_path: Path, start: str) -> None:
    """job.sh is a receipt: the API key on the command line and HF_TOKEN in the environment are
    named by their variables (the job has them from sbatch's exported environment)."""
    plan = plan_for(slurm_campaign(tmp_path, start))
    script = job_script(plan, plan.workdir or Path(), SECRETS)
    assert TOKEN not in script and API_KEY not in script
    assert '--api-key "${API_KEY}"' in script
    assert "HF_TOKEN" not in script.replace("--env=HF_TOKEN ", "")  # docker passes it by name only
    assert "export LLAMA_LOG_COLORS=off" in script


@pytest.mark.parametrize("start", ["process", "docker", "pyxis"])
def test_a_secret_no_variable_holds_reaches_the_job_by_a_variable_of_its_own(
        tmp_path: Path, start: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A literal under a secret flag's name, and a URL's password in an argument, were written into
    job.sh in clear (a receipt under the run directory): each is named by a variable of its own,
    which sbatch's environment carries to the job, the rest of the URL kept as it is."""
    from engine.campaign.redact import references
    from engine.runtime.slurm import server

    spec = yaml.safe_load(slurm_campaign(tmp_path, start).read_text())
    spec["control"]["args"] |= {"-hft": "hf_literalInTheFile0123456789",
                                "--hf-endpoint": "https://u:pwInTheArgs1234@h.example"}
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    campaign = load_campaign(path)
    plan = plan_launch(campaign, get_adapter(campaign.server), WindowStart(
        "slurm", "2026-12-01-sltry.abcd1234", "s1", "ctx", VARS, {"HF_TOKEN": TOKEN, "API_KEY": API_KEY},
        workdir=tmp_path / "windows" / "s1-ctx", node="node7"))
    sent: dict[str, str] = {}
    monkeypatch.setattr(server, "sbatch", lambda script, env: sent.update(env) or "42")
    server.SlurmServer(plan, references(campaign, {"HF_TOKEN": TOKEN, "API_KEY": API_KEY}))
    script = (tmp_path / "windows" / "s1-ctx" / "job.sh").read_text()
    assert "hf_literalInTheFile0123456789" not in script and "pwInTheArgs1234" not in script
    [hft] = [k for k, v in sent.items() if v == "hf_literalInTheFile0123456789"]
    [password] = [k for k, v in sent.items() if v == "pwInTheArgs1234"]
    assert f'-hft "${{{hft}}}"' in script and f'https://u:"${{{password}}}"@h.example' in script
    assert '--api-key "${API_KEY}"' in script  # a variable's value: by that variable


def server_line(script: str) -> str:
    lines = script.splitlines()
    return lines[lines.index("server=$!") - 1]


def test_process_start_line(tmp_path: Path) -> None:
    plan = plan_for(slurm_campaign(tmp_path, "process"))
    line = server_line(job_script(plan, plan.workdir or Path(), SECRETS))
    assert line == ("/opt/llama-server -m /models/SmolLM2-135M-Instruct.Q4_1.gguf -c 4096 -np 2 -t 1 "
                    '-fa off --metrics --api-key "${API_KEY}" -lv 4 --host 0.0.0.0 --port "$RULER_PORT" &')


def test_docker_start_line(tmp_path: Path) -> None:
    """The container's port (the adapter's 8080) is published to the job's port; the GPUs are the
    job's; the container goes with the job (--rm, and the trap stops it on scancel's TERM)."""
    plan = plan_for(slurm_campaign(tmp_path, "docker"))
    script = job_script(plan, plan.workdir or Path(), SECRETS)
    assert server_line(script) == (
        "docker run --rm --name=ruler-sltry-s1-ctx-abcd1234 --init --label=ruler.campaign=sltry "
        "--label=ruler.run=2026-12-01-sltry.abcd1234 --label=ruler.window=s1-ctx --env=HF_TOKEN "
        "--env=LLAMA_LOG_COLORS=off --env=RULER_CONTAINER=ruler-sltry-s1-ctx-abcd1234 "
        '--volume=/models:/models:ro --publish="$RULER_PORT:8080" '
        '${RULER_GPUS:+--gpus "device=$RULER_GPUS"} ghcr.io/ggml-org/llama.cpp:server llama-server '
        "-m /models/SmolLM2-135M-Instruct.Q4_1.gguf -c 4096 -np 2 -t 1 -fa off --metrics "
        '--api-key "${API_KEY}" -lv 4 --host 0.0.0.0 --port 8080 &')
    assert "trap 'docker stop --time=10 ruler-sltry-s1-ctx-abcd1234 >/dev/null 2>&1' TERM INT" in script
    assert "RULER_GPUS=${SLURM_JOB_GPUS:-${SLURM_STEP_GPUS:-}}" in script


def test_pyxis_start_line(tmp_path: Path) -> None:
    """Rendered, not run: no pyxis here or on CI. The server listens on the job's port itself."""
    plan = plan_for(slurm_campaign(tmp_path, "pyxis"))
    script = job_script(plan, plan.workdir or Path(), SECRETS)
    assert server_line(script) == (
        "srun --ntasks=1 --container-image=ghcr.io/ggml-org/llama.cpp:server "
        "--container-mounts=/models:/models:ro llama-server -m /models/SmolLM2-135M-Instruct.Q4_1.gguf "
        '-c 4096 -np 2 -t 1 -fa off --metrics --api-key "${API_KEY}" -lv 4 --host 0.0.0.0 '
        '--port "$RULER_PORT" &')
    assert "trap 'kill -TERM \"$server\" 2>/dev/null' TERM INT" in script


@pytest.mark.parametrize("start", ["process", "docker", "pyxis"])
def test_job_script_is_shellcheck_clean(tmp_path: Path, start: str, shellcheck: str) -> None:
    plan = plan_for(slurm_campaign(tmp_path, start, partition="gpu", gres="gpu:2",
                                   sbatch=["--mem=0"]))
    script = tmp_path / "job.sh"
    script.write_text(job_script(plan, plan.workdir or Path(), SECRETS))
    done = subprocess.run([shellcheck, "--shell=bash", str(script)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout


# ------------------------------------------------------------------ the slurm: section


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", "validate", str(path)],
                          capture_output=True, text=True, check=False)


def edited(tmp_path: Path, old: str, new: str) -> Path:
    text = CAMPAIGN.read_text()
    assert old in text
    path = tmp_path / "campaign.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_a_bad_time_and_an_option_ruler_owns_are_refused_where_they_are(tmp_path: Path) -> None:
    path = edited(tmp_path, '  time: "10:00"\n',
                  '  time: "ten minutes"\n  sbatch: ["--mem=0", "--job-name=mine", "-wnode3"]\n')
    done = validate(path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"{path}:9:9: slurm.time: must be a Slurm time limit (minutes, HH:MM:SS, D-HH:MM:SS or "
        "UNLIMITED), got 'ten minutes'",
        f"{path}:10:23: slurm.sbatch[1]: --job-name is set by ruler (job name, comment, output, one "
        "job of one task on one node of this cluster, no requeue, no --wait, the session's node): "
        "leave it out",
        f"{path}:10:42: slurm.sbatch[2]: -wnode3 is set by ruler (job name, comment, output, one "
        "job of one task on one node of this cluster, no requeue, no --wait, the session's node): "
        "leave it out",
    ]


@pytest.mark.parametrize("limit", ["90", "30:00", "02:00:00", "1-0", "1-12:00", "2-00:00:00",
                                   "UNLIMITED", "unlimited", "infinite"])
def test_every_time_format_sbatch_takes(tmp_path: Path, limit: str) -> None:
    """sbatch(1) --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
    days-hours:minutes, days-hours:minutes:seconds; "UNLIMITED"/"INFINITE" in any case
    (time_str2mins in src/common/parse_time.c compares with xstrcasecmp)."""
    done = validate(edited(tmp_path, '  time: "10:00"', f'  time: "{limit}"'))
    assert done.returncode == 0, done.stderr


def test_runtime_slurm_without_a_command_or_image(tmp_path: Path) -> None:
    no_command = edited(tmp_path, 'process:\n  command: ["${testbed.llama_server}"]\n', "")
    done = validate(no_command)
    assert (done.returncode, done.stderr) == (
        2, f"{no_command}:3:10: runtime 'slurm' needs process.command (slurm.start: process)\n")
    no_image = edited(tmp_path, "docker:\n  image: ${testbed.image}\n  keep: true\nslurm:\n  start: process",
                      "slurm:\n  start: docker")
    done = validate(no_image)
    assert (done.returncode, done.stderr) == (
        2, f"{no_image}:3:10: runtime 'slurm' needs docker.image (slurm.start: docker)\n")


# ------------------------------------------------------------------ the fold of a real run


def test_the_fold_of_a_real_slurm_run_queued_then_placed() -> None:
    """tests/fixtures/slurm/journal.jsonl: job 6 (s1-ctx) waited 2.8 s PENDING, then ran on vm."""
    events = read_events(JOURNAL)
    upto = {e["seq"]: i for i, e in enumerate(events)}
    queued = fold(events[:upto[99] + 1]).windows["s1-ctx"]
    assert (queued.status, queued.queue, queued.placed) == (WindowStatus.QUEUED, "", "")
    assert queued.server["job"] == "6"
    placed = fold(events[:upto[100] + 1]).windows["s1-ctx"]
    assert (placed.status, placed.queue, placed.placed, placed.node) == (WindowStatus.BOOTING, "", "vm", "vm")
    end = fold(events)
    assert {k: (w.status, w.placed) for k, w in end.windows.items()} == {
        "s1-control": ("done", "vm"), "s1-ctx": ("done", "vm"), "s1-qv8": ("rejected", "vm")}


# ------------------------------------------------------------------ what the operator reads


def test_progress_lines_of_a_real_slurm_run() -> None:
    lines = [format_event(e) for e in read_events(JOURNAL)
             if e["kind"] in (EventKind.WINDOW_QUEUED, EventKind.WINDOW_PLACED) and e["window"] == "ctx"]
    assert lines == ["s1/ctx queued: Slurm job 6 PENDING",  # Slurm's reason "None": not looked at yet
                     "s1/ctx runs on node vm (job 6, 2.8 s in the queue) http://vm:34354"]
    held = {"kind": EventKind.WINDOW_QUEUED, "session": "s1", "window": "ctx", "job": "12",
            "state": "PENDING", "reason": "Resources"}
    assert format_event(held) == "s1/ctx queued: Slurm job 12 PENDING (Resources)"


def queued_run(tmp_path: Path) -> Path:
    """The real journal cut where s1-ctx waits in the queue, and then one more poll of squeue: the
    reason Slurm gives a job behind another that holds the node (as the integration test's is)."""
    run = tmp_path / "run"
    run.mkdir()
    lines = JOURNAL.read_text().splitlines(keepends=True)[:99]
    assert json.loads(lines[-1])["kind"] == EventKind.WINDOW_QUEUED
    later = {"seq": 100, "ts": 1796096340.39, "kind": "window_queued", "session": "s1",
             "window": "ctx", "job": "6", "state": "PENDING", "reason": "Resources"}
    (run / "journal.jsonl").write_text("".join(lines) + json.dumps(later) + "\n")
    return run


def test_status_shows_a_queued_window_with_its_job_and_each_session_its_node(tmp_path: Path) -> None:
    run = queued_run(tmp_path)
    text = subprocess.run([sys.executable, "-m", "engine", "status", str(run)], capture_output=True,
                          text=True, check=True).stdout.splitlines()
    assert "  queued  s1-ctx: Slurm job 6 queued (Resources)" in text
    assert "  nodes   s1 on vm" in text
    data = json.loads(subprocess.run([sys.executable, "-m", "engine", "status", str(run), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    assert data["windows"]["s1-ctx"] == "queued"
    assert data["queued"] == {"s1-ctx": {"job": "6", "reason": "Resources"}}
    assert data["nodes"] == {"s1": "vm"}


def test_a_session_node_falls_back_to_the_boot_fact() -> None:
    """A journal without window_placed (its events are newer than the run): the job's node fact."""
    events = [e for e in read_events(JOURNAL) if e["kind"] != EventKind.WINDOW_PLACED]
    control = fold(events).windows["s1-control"]
    assert (control.placed, control.node) == ("", "vm")


def test_the_console_shows_queued_with_slurms_reason_and_the_node() -> None:
    """Where "booting" shows (tui/core/windows.py, tui/core/facts.py): the header's phase, the window's status
    word, and its detail (the boot-facts panel) with the job and, once placed, its node."""
    events = list(read_events(JOURNAL))[:99]
    events.append({"seq": 100, "ts": 1796096340.39, "kind": "window_queued", "session": "s1",
                   "window": "ctx", "job": "6", "state": "PENDING", "reason": "Resources"})
    st = fold(events)
    assert phase(st) == ("queued (Resources)", "warning")
    assert window_status(st, "s1-ctx") == ("queued (Resources)", "warning")
    assert facts_lines(st, "s1-ctx")[:2] == [("queued (Resources) · 0 facts", "bold"),
                                                  ("Slurm job 6 · node -", "muted")]
    placed = fold(list(read_events(JOURNAL))[:100])
    assert phase(placed) == ("booting", "accent")
    assert ("Slurm job 6 · node vm", "muted") in facts_lines(placed, "s1-ctx")


# ------------------------------------------------------------------ the report


def report_of(tmp_path: Path, edit: Any = None) -> str:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(CAMPAIGN, run / "campaign.yaml")
    events = [json.loads(line) for line in JOURNAL.read_text().splitlines()]
    for e in events:
        (edit or (lambda e: None))(e)
    (run / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "windows" / "s1-qv8").mkdir(parents=True)
    (run / "windows" / "s1-qv8" / "job.record.txt").write_text("(the receipt the report links)\n")
    return render(load_run(run), [], "no charts")


def test_report_names_the_runtime_each_sessions_node_and_each_windows_job(tmp_path: Path) -> None:
    text = report_of(tmp_path)
    assert "- **Runtime**: slurm;" in text
    assert ("- **Slurm**: each window one batch job, its server started as `process`; time "
            "`10:00`, an exclusive node. The job script of each window is its `job.sh`.") in text
    assert ("- **Nodes**: session s1 on `vm` (each session's windows ran on its control's node)."
            in text)
    assert "- **Timeouts**: boot 120 s, request 60 s, window 3600 s, queue 3600 s." in text
    table = text[text.index("### Slurm jobs"):text.index("## Receipts")].splitlines()
    assert table[4:] == [
        "| window | job | node | queued s | state | reason | exit code |",
        "|---|---|---|---|---|---|---|",
        "| s1-control | 5 | vm | 0.3 | COMPLETED | None | 0:0 |",
        "| s1-ctx | 6 | vm | 2.8 | COMPLETED | None | 0:0 |",
        "| s1-qv8 | 7 | vm | 2.5 | FAILED | NonZeroExitCode | 1:0 |", ""]
    assert "job.sh (the batch script as submitted)" in text


def test_report_shows_slurms_record_of_a_rejected_window(tmp_path: Path) -> None:
    text = report_of(tmp_path)
    start = text.index("### s1-qv8")
    qv8 = text[start:text.index("\n## ", start)]
    assert ("**Rejected at boot**: server exited during boot (exit code 1); Slurm job 7 FAILED "
            "(reason NonZeroExitCode, exit code 1:0, node vm)") in qv8
    assert ("Slurm's record of job 7: JobState `FAILED`, Reason `NonZeroExitCode`, ExitCode `1:0`, "
            "NodeList `vm`, Partition `debug`, SubmitTime `2026-12-01T03:39:11`, StartTime "
            "`2026-12-01T03:39:14`, EndTime `2026-12-01T03:39:14` "
            "([job.record.txt](windows/s1-qv8/job.record.txt)).") in qv8


def test_report_shows_slurms_record_of_a_failed_window(tmp_path: Path) -> None:
    """The real journal with s1-ctx's end rewritten as a scancel mid-rep ends it (what
    tests/integration/test_slurm_cluster.py does on the cluster): failed, and Slurm's record beside it."""
    def cancelled(e: dict[str, Any]) -> None:
        if e.get("window") != "ctx":
            return
        if e["kind"] == EventKind.WINDOW_FINISHED:
            e.update(status="failed", reason="server died during a rep; Slurm job 6 CANCELLED "
                                             "(reason None, exit code 0:15, node vm)")
        if e["kind"] == EventKind.SERVER_STOPPED:
            e["record"].update(JobState="CANCELLED", ExitCode="0:15")
    ctx = report_of(tmp_path, cancelled)
    ctx = ctx[ctx.index("### s1-ctx"):ctx.index("### s1-qv8")]
    assert "Window ended: server died during a rep; Slurm job 6 CANCELLED" in ctx
    assert "Slurm's record of job 6: JobState `CANCELLED`, Reason `None`, ExitCode `0:15`" in ctx


def test_a_report_of_another_runtime_says_nothing_of_slurm() -> None:
    text = render(load_run(FIXTURES / "journals" / "finished"), [], "-")
    assert "Slurm" not in text and "queue" not in text.split("## Methods")[1]


# ------------------------------------------------------------------ the dry run


TESTBED = {"testbed.llama_server": "/opt/llama.cpp-0.3.36/bin/llama-server", "testbed.models": "/models",
           "testbed.image": "ruler-testbed:1"}


def dry(path: Path, environ: dict[str, str] | None = None) -> str:
    return dry_run(str(path), None, environ={"HOME": "/home/operator", **(environ or {})},
                   testbed=TESTBED, results_dir="/shared/results", today=dt.date(2026, 12, 1))


def test_dry_run_shows_each_windows_sbatch_options_and_one_whole_job_script() -> None:
    """It printed the process runtime's line with every "0" replaced by "<free port>"
    (llama.cpp-<free port>.3.36): a Slurm job's port is picked on its node, by reference."""
    text = dry(CAMPAIGN)
    assert ("slurm: each window is one batch job (sbatch --parsable), its server started as "
            "`process`; the run directory (/shared/results/2026-12-01-sltry, or -2, -3... when "
            "taken) must be on a filesystem the nodes share (checked before the first window)") in text
    ctx = text[text.index("  [2] ctx:"):text.index("  [3] qv8:")].splitlines()
    assert ctx[2:15] == [
        "      sbatch --parsable /shared/results/2026-12-01-sltry/windows/s1-ctx/job.sh  # with these "
        "#SBATCH options:",
        "        --job-name=ruler-sltry-s1-ctx",
        "        --comment=ruler-run=dry-run",
        "        --output=/shared/results/2026-12-01-sltry/windows/s1-ctx/boot.log",
        "        --open-mode=append",
        "        --nodes=1",
        "        --ntasks=1",
        "        --no-requeue",
        "        --exclusive",
        "        --time=10:00",
        # Quoted as job.sh holds a value with spaces, which sbatch would split.
        "        --nodelist=\"<the node s1's control ran on>\"",
        "      server on the node (the campaign's command): /opt/llama.cpp-0.3.36/bin/llama-server -m "
        "/models/SmolLM2-135M-Instruct.Q4_1.gguf -c 4096 -np 2 -t 1 -fa off --metrics -lv 4 "
        '--host 0.0.0.0 --port "$RULER_PORT" &',
        "      metrics: ok: per-rep acceptance from /metrics deltas"]
    control = text[text.index("  [1] control:"):text.index("  [2] ctx:")]
    assert "--nodelist" not in control  # the control goes wherever Slurm puts it
    script = text[text.index("job script of s1-control"):].splitlines()
    assert script[0].startswith("job script of s1-control, as `ruler run` would write it to "
                                "/shared/results/2026-12-01-sltry/windows/s1-control/job.sh")
    body = [line.removeprefix("    ") for line in script[2:]]
    assert body[0] == "#!/bin/bash"
    assert "#SBATCH --output=/shared/results/2026-12-01-sltry/windows/s1-control/boot.log" in body
    assert body[-1] == 'exit "$rc"'


def test_the_dry_runs_job_script_is_shellcheck_clean(tmp_path: Path, shellcheck: str) -> None:
    text = dry(CAMPAIGN)
    script = text[text.index("job script of s1-control"):].splitlines()[2:]
    path = tmp_path / "job.sh"
    path.write_text("\n".join(line.removeprefix("    ") for line in script) + "\n")
    done = subprocess.run([shellcheck, str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def test_dry_run_of_pyxis_says_it_is_not_tested_and_keeps_secrets_out(tmp_path: Path) -> None:
    path = slurm_campaign(tmp_path, "pyxis", partition="gpu", gres="gpu:4")
    text = dry(path, {"HF_TOKEN": TOKEN, "API_KEY": API_KEY})
    assert ("slurm: start pyxis is rendered and documented but NOT exercised by ruler's tests (no "
            "pyxis on CI)") in text
    assert TOKEN not in text and API_KEY not in text
    assert ("server on the node (srun --container-image, pyxis): srun --ntasks=1 "
            "--container-image=ghcr.io/ggml-org/llama.cpp:server --container-mounts=/models:/models:ro "
            "llama-server -m /models/SmolLM2-135M-Instruct.Q4_1.gguf -c 2048 -np 2 -t 1 -fa off "
            '--metrics --api-key "${API_KEY}" -lv 4 --host 0.0.0.0 --port "$RULER_PORT" &') in text
    assert ("note: HF_TOKEN reaches the job through sbatch's exported environment, by name: its "
            "value is never written to job.sh") in text


def test_pyxis_without_a_command_is_refused_where_it_is_set(tmp_path: Path) -> None:
    """srun runs a program, not the image's entrypoint: it would take the server's flags as its own."""
    spec = yaml.safe_load(slurm_campaign(tmp_path, "pyxis").read_text())
    del spec["docker"]["command"]
    path = tmp_path / "entrypoint.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if text.strip() == "start: pyxis")
    proc = subprocess.run([sys.executable, "-m", "engine", "validate", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert (f"{path}:{line}:10: slurm.start pyxis needs docker.command (srun runs a program in the "
            "container, not the image's entrypoint)") in proc.stderr + proc.stdout


# ------------------------------------------------------------------ the runner's queue path










def test_dry_run_on_places_names_their_nodes_for_every_window(tmp_path: Path) -> None:
    """With places that name Slurm nodes, a session's jobs all go to its place's node, control
    included; which place takes which session is decided as the run goes."""
    spec = yaml.safe_load(CAMPAIGN.read_text())
    spec["places"] = [{"name": "a", "node": "gpu-01"}, {"name": "b", "node": "gpu-02"}]
    spec["sessions"]["s2"] = ["qv8", "ctx"]
    path = tmp_path / "places.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    text = dry(path)
    # each session: the control, its two windows, the control again
    assert text.count('        --nodelist="<the node of the place s1 runs on: gpu-01 or gpu-02>"') == 4
    assert text.count('        --nodelist="<the node of the place s2 runs on: gpu-01 or gpu-02>"') == 4
    spec["places"] = [{"name": "a", "node": "gpu-01"}]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert dry(path).count("        --nodelist=gpu-01\n") == 8


def test_report_names_the_place_beside_the_node(tmp_path: Path) -> None:
    """The real journal as a campaign with places would have it: session_started names the place."""
    def on_place(e: dict[str, Any]) -> None:
        if e["kind"] == EventKind.SESSION_STARTED:
            e.update(place="a", where={"name": "a", "node": "vm"})
    text = report_of(tmp_path, on_place)
    assert ("- **Nodes**: session s1 on `vm` (place a) (each session's windows ran on its control's "
            "node).") in text


def test_a_place_with_a_gpu_count_is_its_sessions_share_of_the_node(tmp_path: Path) -> None:
    """Two sessions sharing an 8-GPU node: each place asks for its count on its node."""
    from engine.campaign.machines import Place

    campaign = load_campaign(slurm_campaign(tmp_path, "process", gres="gpu:8", exclusive=False))
    half = Place(name="n7a", node="node7", gpus=4)
    plan = plan_launch(campaign, get_adapter(campaign.server), WindowStart(
        "slurm", "2026-12-01-sltry.abcd1234", "s1", "ctx", VARS,
        {"HF_TOKEN": TOKEN, "API_KEY": API_KEY}, workdir=Path("/shared/run/windows/s1-ctx"),
        node="node7", place=half))
    script = job_script(plan, plan.workdir or Path(), SECRETS)
    assert "#SBATCH --gres=gpu:4\n" in script and "gpu:8" not in script
    assert "#SBATCH --nodelist=node7\n" in script and "--exclusive" not in script


def test_a_slurm_place_names_a_gpu_count_not_devices(tmp_path: Path) -> None:
    spec = yaml.safe_load(slurm_campaign(tmp_path, "process").read_text())
    spec["places"] = [{"name": "n7a", "node": "node7", "gpus": [0, 1]}]
    path = tmp_path / "devices.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SpecError, match=r"devices\.yaml:\d+:\d+: on runtime slurm a place's gpus "
                                        r"is a count \(its share of the node: --gres=gpu:N\)"):
        load_campaign(path)


