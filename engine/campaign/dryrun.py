"""``ruler run FILE --dry-run``: what a run would start, send and watch, without starting it.

The operator checks this before burning GPU hours, so the invocation comes from the very code
that starts servers: :func:`engine.campaign.plan.plan_launch`, the runner's own planning, shown the
way ``docker run`` would spell it. Nothing here builds the testbed, pulls an image or opens a
port: ``${testbed.*}`` resolves from the cache when it is already there and otherwise stays
unresolved in the output, like any variable the host does not define.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping

from engine import testbed
from engine.campaign.plan import class_prompts, plan_launch, resolve_runtime
from engine.campaign.redact import argv_warnings, is_secret
from engine.campaign.spec import Campaign, PromptFileError, SpecError, load_campaign, percent
from engine.errors import EngineError
from engine.record.events import CONTROL
from engine.runtime.base import LaunchPlan
from engine.servers import get_adapter
from engine.servers.adapter import ServerAdapter
from engine.servers.client import request_body

DRY_RUN_ID = "dry-run"  # the ruler.run label shown; a real run gets a dated, random one
_VARIABLE = re.compile(r"\$\{([^}]+)\}")


def cached_testbed() -> dict[str, str]:
    """``${testbed.*}`` from the cache when a previous run already prepared it; never builds."""
    root = testbed.cache_root()
    binary = root / f"llama.cpp-{testbed.LLAMA_CPP_PYTHON}" / "bin" / "llama-server"
    models = root / "models"
    out: dict[str, str] = {}
    if binary.is_file() and (binary.parent / "manifest.json").is_file():
        out["testbed.llama_server"] = str(binary)
    if (models / "manifest.json").is_file():
        out["testbed.models"] = str(models)
    return out


def dry_variables(campaign: Campaign, environ: Mapping[str, str],
                  known: Mapping[str, str]) -> dict[str, str]:
    """A value for every ``${name}`` the campaign uses: the host's, or the reference itself.

    A secret stays the reference: the dry run is pasted into tickets and chats.
    ``model`` and ``artifacts.*`` are left to the runner, which derives them per window.
    """
    out: dict[str, str] = {}
    for name in sorted(set(_VARIABLE.findall(campaign.source_text))):
        if name == "model" or name.startswith("artifacts."):
            continue
        reference = f"${{{name}}}"
        out[name] = reference if is_secret(name) else known.get(name, environ.get(name, reference))
    return out


def _gpus(gpus: object) -> str | None:
    if gpus is None:
        return None
    if gpus == "all" or isinstance(gpus, int):
        return str(gpus)
    return '"device=' + ",".join(str(g) for g in gpus) + '"'  # type: ignore[attr-defined]


def argv_groups(argv: list[str], command_len: int = 0) -> list[str]:
    """The command (its first ``command_len`` words) on one line, then each flag with its values."""
    groups: list[list[str]] = [argv[:command_len], []] if command_len else [[]]
    for arg in argv[command_len:]:
        is_flag = arg.startswith("-") and not re.fullmatch(r"-\d+(?:\.\d+)?", arg)
        if is_flag and groups[-1]:
            groups.append([])
        groups[-1].append(arg)
    return [" ".join(shlex.quote(a) for a in g) for g in groups if g]


def docker_lines(plan: LaunchPlan, pass_env: list[str], environ: Mapping[str, str],
                 fixed_port: bool, command_len: int = 0) -> tuple[list[str], list[str]]:
    """(the container start as a ``docker run`` command, notes about it)."""
    port = str(plan.host_port) if fixed_port else "<free port>"
    opts = [f"--name {plan.name}"]
    if (g := _gpus(plan.gpus)) is not None:
        opts.append(f"--gpus {g}")
    if plan.shm_size:
        opts.append(f"--shm-size {plan.shm_size}")
    if plan.ipc:
        opts.append(f"--ipc {plan.ipc}")
    opts.append(f"-p 127.0.0.1:{port}:{plan.container_port}")
    opts += [f"-v {shlex.quote(f'{m}:{m}:ro')}" for m in plan.mounts]
    opts += [f"-v {shlex.quote(v if v.count(':') >= 2 else v + ':rw')}" for v in plan.volumes]
    opts += [f"-e {shlex.quote(f'{k}={v}')}" for k, v in plan.env.items()]
    notes: list[str] = []
    for name in sorted(pass_env):
        opts.append(f"-e {name}")
        state = "set on this host" if name in environ else "NOT set on this host"
        kept = ("its value is never recorded" if is_secret(name) else
                "not a secret's name, so its value is not redacted where it appears")
        notes.append(f"{name} is passed through by name; {kept} ({state})")
    for name in sorted(set(plan.secret_env) - set(pass_env)):
        opts.append(f"-e {name}")
        notes.append(f"{name} looks secret: passed by name, its value is never recorded")
    opts.append(f"-e RULER_CONTAINER={plan.name}")
    opts += [f"--label {k}={v}" for k, v in plan.labels.items()]
    opts.append(shlex.quote(plan.image or "<no image>"))
    opts += argv_groups(plan.argv, command_len) if plan.argv else []
    if not plan.argv:
        notes.append("no command: the image's entrypoint runs with no arguments")
    return ["docker run -d \\"] + [f"  {o} \\" for o in opts[:-1]] + [f"  {opts[-1]}"], notes


def process_lines(plan: LaunchPlan, fixed_port: bool) -> list[str]:
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in plan.env.items())
    argv = " ".join(shlex.quote(a) for a in plan.argv)
    if not fixed_port:
        argv = argv.replace(str(plan.host_port), "<free port>")
    secrets = f"  # + passed through: {', '.join(sorted(plan.secret_env))}" if plan.secret_env else ""
    return [f"{env + ' ' if env else ''}{argv}{secrets}"]


def metrics_note(adapter: ServerAdapter, argv: list[str]) -> str:
    return adapter.metrics_requirement(argv) or "ok: per-rep acceptance from /metrics deltas"


def _change(campaign: Campaign, window: str) -> str:
    if window == CONTROL:
        return "the control itself"
    change = campaign.window(window).change.model_dump(exclude_defaults=True)
    return json.dumps(change, sort_keys=False)


def describe(campaign: Campaign, variables: Mapping[str, str], runtime: str,
             environ: Mapping[str, str]) -> list[str]:
    c, adapter, wl = campaign, get_adapter(campaign.server), campaign.workload
    prompts = class_prompts(campaign, variables)
    q = c.quality
    out = [f"campaign {c.name}: server {c.server}, runtime {runtime}, {len(c.windows)} windows in "
           f"{len(c.sessions)} sessions, control {c.control_position} in every session",
           "nothing is started: this is what `ruler run` would do"]
    out += [str(w) for w in argv_warnings(c)] + [""]
    extra = adapter.load_fields()
    body = request_body("<prompt of the class>", wl.max_tokens, dict(wl.sampling), dict(wl.knobs), extra)
    out.append(f"requests: POST {adapter.chat_path}  {json.dumps(body)}")
    if extra:
        out.append(f"  adapter request fields (per-request acceptance): {json.dumps(extra)}")
    classes = ", ".join(f"{n} ({len(prompts[n])} prompts)" for n in wl.classes)
    out.append(f"shapes: {classes} x concurrency {list(wl.concurrency)}; per shape 1 warm pass "
               f"(discarded) + {wl.reps} reps; leak: C>={c.leak.min_concurrency} spread "
               f">{percent(c.leak.spread)} voids the row, up to {c.leak.max_reruns} reruns")
    if q.enabled:
        oracle = q.kl.oracle if isinstance(q.kl.oracle, str) else f"receipt {q.kl.oracle.receipt}"
        out.append(f"quality: knob check {'on' if q.knobs_check else 'off'}; greedy {q.greedy.n} prompts x "
                   f"{q.greedy.max_tokens} tokens; teacher-forced top-{q.teacher_forced.top_k} at "
                   f"{q.teacher_forced.positions} positions (lossless windows); KL top-{q.kl.top_k} "
                   f"vs oracle {oracle} (lossy windows)")
    out.append(f"boot facts watched: {', '.join(adapter.watched_facts)}; ready line: {adapter.ready_text}")
    out.append(f"timeouts: boot {c.timeouts.boot:g} s, request {c.timeouts.request:g} s, "
               f"window {c.timeouts.window:g} s")
    for session in c.sessions:
        out += ["", f"session {session}: {' -> '.join(c.windows_in(session))}"]
        for i, window in enumerate(c.windows_in(session), 1):
            out += window_lines(campaign, adapter, variables, runtime, environ, session, window, i)
    return out


def window_lines(campaign: Campaign, adapter: ServerAdapter, variables: Mapping[str, str], runtime: str,
                 environ: Mapping[str, str], session: str, window: str, index: int) -> list[str]:
    w = None if window == CONTROL else campaign.window(window)
    kind = CONTROL if w is None else ("lossy: KL vs the oracle" if w.lossy else
                                      "lossless: greedy + teacher-forced |dlogp|")
    axis = CONTROL if w is None else w.axis or "(no axis label)"
    out = ["", f"  [{index}] {window}: {axis}  ({kind}{', multi-axis' if w and w.multi_axis else ''})",
           f"      change: {_change(campaign, window)}"]
    config = campaign.config_for(window)
    try:
        plan = plan_launch(campaign, adapter, runtime, DRY_RUN_ID, session, window, variables, environ)
    except KeyError as e:  # an unresolved ${...}: the real run rejects the window the same way
        return out + [f"      unresolved variable {e}: the run would reject this window"]
    fixed = campaign.host_port is not None
    notes: list[str] = []
    if runtime == "docker":
        command = config.command or campaign.docker.command or ()
        lines, notes = docker_lines(plan, list(campaign.pass_env), environ, fixed, len(command))
    elif runtime == "attach":
        lines = [f"attach to {campaign.attach.url}: no server is started, no boot log is read"]
    else:
        lines = process_lines(plan, fixed)
    out += [f"      {line}" for line in lines]
    out += [f"      note: {n}" for n in notes]
    out.append(f"      metrics: {metrics_note(adapter, plan.argv)}")
    if not (campaign.docker.keep if runtime == "docker" else True):
        out.append("      the container is removed at window end (docker.keep: false)")
    return out


def dry_run(campaign_path: str, runtime: str | None, environ: Mapping[str, str] | None = None,
            testbed: Mapping[str, str] | None = None) -> str:
    """The dry-run text; raises SpecError or EngineError like a real run would."""
    env = dict(os.environ if environ is None else environ)
    campaign = load_campaign(campaign_path)
    chosen = runtime or campaign.runtime
    if chosen == "auto":
        chosen = resolve_runtime(campaign, None)
    known = dict(cached_testbed() if testbed is None else testbed)
    variables = dry_variables(campaign, env, known)
    return "\n".join(describe(campaign, variables, chosen, env)) + "\n"


def cmd_dry_run(campaign_path: str, runtime: str | None) -> int:
    """``ruler run FILE --dry-run``: 0 and the plan, 2 for a bad campaign, 1 if ruler fails."""
    try:
        text = dry_run(campaign_path, runtime)
    except SpecError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        return 2
    except PromptFileError as e:  # a ${...} file path the host resolves to nothing usable
        print(f"{campaign_path}: prompt file {e}", file=sys.stderr)
        return 2
    except EngineError as e:
        print(f"ruler run --dry-run: {e}", file=sys.stderr)
        return 1
    print(text, end="")
    return 0
