"""The dry run's plan (``ruler run FILE --dry-run``): what a run would start, send and watch.

The operator checks this before burning GPU hours, so the invocation comes from the very code
that starts servers: :func:`engine.campaign.launch.plan_launch`, the runner's own planning, shown the
way ``docker run`` would spell it. Nothing here builds the testbed, pulls an image or opens a
port: ``${testbed.*}`` resolves from the cache when it is already there and otherwise stays
unresolved in the output, like any variable the host does not define.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from engine.campaign import defaults
from engine.campaign.checks.warnings import campaign_warnings
from engine.campaign.launch import (
    WindowStart,
    campaign_items,
    check_quality_files,
    plan_launch,
    resolve_runtime,
)
from engine.campaign.load import load_campaign
from engine.campaign.redact import redactor_for, references
from engine.campaign.secrets import holds_secret
from engine.campaign.sources import Item, chosen, class_notes
from engine.campaign.sources.explain import class_lines
from engine.campaign.spec import Campaign, percent
from engine.runtime.base import LaunchPlan, SlurmJob
from engine.runtime.slurm.script import job_script
from engine.servers import get_adapter
from engine.servers.adapter import ServerAdapter
from engine.servers.client import request_body
from engine.testbed import cached_variables
from engine.words import CONTROL

DRY_RUN_ID = "dry-run"  # the ruler.run label shown; a real run gets a dated, random one
_VARIABLE = re.compile(r"\$\{([^}]+)\}")


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
        value = known.get(name, environ.get(name, reference))
        out[name] = reference if holds_secret(name, value) else value
    return out


def _gpus(gpus: str | int | tuple[str | int, ...] | None) -> str | None:
    if gpus is None:
        return None
    if gpus == "all" or isinstance(gpus, int):
        return str(gpus)
    return '"device=' + ",".join(str(g) for g in gpus) + '"'


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
        kept = ("its value is never recorded" if holds_secret(name, environ.get(name)) else
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


def slurm_lines(plan: LaunchPlan, secrets: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(the window's batch job: its #SBATCH options and the line that starts its server, read from
    the job script the run would submit; notes about it)."""
    job = plan.slurm or SlurmJob()
    workdir = plan.workdir or Path(".")
    script = job_script(plan, workdir, secrets).splitlines()
    lines = [f"sbatch --parsable {workdir / f'job{plan.tag}.sh'}  # with these #SBATCH options:"]
    lines += [f"  {line.removeprefix('#SBATCH ')}" for line in script if line.startswith("#SBATCH ")]
    lines.append(f"server on the node ({START[job.start]}): {script[script.index('server=$!') - 1]}")
    notes = []
    if job.start == "docker":
        notes.append(f"the container's port {plan.container_port} is published to the port the job "
                     "picks on its node; its GPUs are the job's (SLURM_JOB_GPUS)")
    notes += [f"{name} reaches the job through sbatch's exported environment, by name: its value "
              "is never written to job.sh" for name in sorted(plan.secret_env)]
    return lines, notes


START = {"process": "the campaign's command", "docker": "docker run --rm",
         "pyxis": "srun --container-image, pyxis"}


def job_secrets(campaign: Campaign, variables: Mapping[str, str],
                environ: Mapping[str, str]) -> dict[str, str]:
    """What job.sh names by its variable: the host's secret values, and (the dry run keeps a secret
    its reference, ``${HF_TOKEN}``) each secret's reference, so the script reads as the run's."""
    return references(campaign, environ) | {
        f"${{{name}}}": name for name, value in variables.items()
        if value == f"${{{name}}}" and holds_secret(name, environ.get(name, value))}


def _session_node(campaign: Campaign, session: str, window: str) -> str | None:
    """What ``--nodelist`` will name: the node of the session's place, else the node its control
    ran on, once it has run (the control itself goes wherever Slurm puts it)."""
    nodes = [p.node for p in campaign.places if p.node]
    if nodes and len(nodes) == len(campaign.places):
        return nodes[0] if len(nodes) == 1 else f"<the node of the place {session} runs on: " \
                                                 f"{' or '.join(nodes)}>"
    order = campaign.windows_in(session)
    if window == CONTROL or order.index(window) < order.index(CONTROL):
        return None
    return f"<the node {session}'s control ran on>"


def job_script_lines(campaign: Campaign, adapter: ServerAdapter, variables: Mapping[str, str],
                     environ: Mapping[str, str], run_dir: Path) -> list[str]:
    """The whole batch script of the first window, as ``ruler run`` would write and submit it."""
    session = next(iter(campaign.sessions))
    window = campaign.windows_in(session)[0]
    wdir = run_dir / "windows" / f"{session}-{window}"
    try:
        plan = plan_launch(campaign, get_adapter(campaign.server_for(window)), WindowStart(
            "slurm", DRY_RUN_ID, session, window, variables, environ, workdir=wdir,
            node=_session_node(campaign, session, window)))
    except KeyError:  # said in the window's own lines
        return []
    script = job_script(plan, wdir, job_secrets(campaign, variables, environ))
    out = ["", f"job script of {session}-{window}, as `ruler run` would write it to {wdir / 'job.sh'} "
           f"and submit it (a real run's id replaces {DRY_RUN_ID!r}; each window's differs only in "
           "its names, its directory, its server and its --nodelist):", ""]
    return out + [f"    {line}" if line else "" for line in script.splitlines()]


def metrics_note(adapter: ServerAdapter, argv: list[str]) -> str:
    return adapter.metrics_requirement(argv) or "ok: per-rep acceptance from /metrics deltas"


def _change(campaign: Campaign, window: str) -> str:
    if window == CONTROL:
        return "the control itself"
    w = campaign.window(window)
    change = w.change.model_dump(exclude_defaults=True)
    if w.server is not None:
        change = {"server": w.server.model_dump(exclude_defaults=True), **change}
    return json.dumps(change, sort_keys=False)


def describe(campaign: Campaign, variables: Mapping[str, str], runtime: str,
             environ: Mapping[str, str], run_dir: Path | None = None) -> list[str]:
    """The dry-run text; ``run_dir`` is the directory a run would claim (runtime slurm names its
    files in each window's job script)."""
    run_dir = run_dir or Path("results") / f"{dt.date.today().isoformat()}-{campaign.name}"
    c, adapter, wl = campaign, get_adapter(campaign.server), campaign.workload
    items = campaign_items(campaign, variables)
    check_quality_files(campaign, variables)
    q = c.quality
    out = [f"campaign {c.name}: server {c.server}, runtime {runtime}, {len(c.windows)} windows in "
           f"{len(c.sessions)} sessions, control {c.control_position} in every session",
           "nothing is started: this is what `ruler run` would do"]
    out += [str(w) for w in campaign_warnings(c)] + [""]
    out += sweep_lines(c)
    out += request_lines(c, adapter, items)
    out += shape_lines(c, items)
    multi = any(spec.conversations is not None for spec in wl.classes.values())
    how = (f"POST {adapter.flush_path}" if adapter.flush_path
           else f"no endpoint: {json.dumps(adapter.cache_fields('flush'))} on each request"
           + (", on a multi-turn class's first turns only (never between turns)" if multi else ""))
    out.append(f"prefix cache: flush before each warm pass and rep ({how}; a flush that fails "
               "voids the rep)" if wl.cache == "flush" else "prefix cache: keep (never emptied: "
               "reps after the warm pass may be served from it; each row says how much)")
    if q.enabled:
        oracle = q.kl.oracle if isinstance(q.kl.oracle, str) else f"receipt {q.kl.oracle.receipt}"
        out.append(f"quality: knob check {'on' if q.knobs_check else 'off'}; greedy {q.greedy.n} prompts x "
                   f"{q.greedy.max_tokens} tokens; teacher-forced top-{q.teacher_forced.top_k} at "
                   f"{q.teacher_forced.positions} positions (lossless windows); KL top-{q.kl.top_k} "
                   f"vs oracle {oracle} (lossy windows)")
    out.append(f"boot facts watched: {', '.join(adapter.watched_facts)}; ready line: {adapter.ready_text}")
    out.append(f"timeouts: boot {c.timeouts.boot:g} s, request {c.timeouts.request:g} s, "
               f"window {c.timeouts.window:g} s" + (f", queue {c.timeouts.queue:g} s (the boot "
                                                    "timeout starts when the job runs)"
                                                    if runtime == "slurm" else "")
               + (f", connect {c.timeouts.connect:g} s (a place's host over ssh)"
                  if any((p.docker_host or "").startswith("ssh://") for p in c.places) else ""))
    if c.places:
        out.append(places_line(c, runtime))
    if runtime == "slurm":
        out += slurm_notes(c, run_dir)
    for session in c.sessions:
        out += ["", f"session {session}: {' -> '.join(c.windows_in(session))}"]
        for i, window in enumerate(c.windows_in(session), 1):
            out += window_lines(campaign, adapter, WindowStart(
                runtime, DRY_RUN_ID, session, window, variables, environ,
                workdir=run_dir / "windows" / f"{session}-{window}",
                node=_session_node(campaign, session, window)), i)
    if runtime == "slurm":
        out += job_script_lines(campaign, adapter, variables, environ, run_dir)
    return out


def request_lines(c: Campaign, adapter: ServerAdapter, items: Mapping[str, list[Item]]) -> list[str]:
    """What a request looks like: its body, the adapter's fields, how an output length is held,
    and the connections and worker processes a pass sends on."""
    wl, out = c.workload, []
    extra = adapter.load_fields()
    knobs = {**wl.knobs, **adapter.cache_fields(wl.cache)}
    body = request_body("<prompt of the class>", wl.max_tokens, dict(wl.sampling), knobs, extra)
    out.append(f"requests: POST {adapter.chat_path}  {json.dumps(body)}")
    if extra:
        out.append(f"  adapter request fields (per-request acceptance): {json.dumps(extra)}")
    sized = [n for n in wl.classes if any(i["max_tokens"] is not None for i in items[n])]
    if sized:
        fields = adapter.exact_length_fields(1)
        out.append(f"  a request with its own output length N ({', '.join(sized)}): max_tokens N"
                   + (f" and {json.dumps(fields).replace(': 1', ': N')}, so the server generates "
                      "exactly N tokens" if fields else f", a limit only ({adapter.name} has no "
                                                         "field that ignores the end of sequence)"))
    if wl.exact_output:
        fields = adapter.exact_length_fields(wl.max_tokens)
        which = "every request without its own output length" if sized else "every request"
        out.append(f"  exact_output: {which} generates exactly {wl.max_tokens} tokens ("
                   + (f"{json.dumps(fields)})" if fields else
                      f"{adapter.name} has no field that ignores the end of sequence: a limit only)"))
    kept = "one connection per worker, kept" if adapter.keep_alive else "one connection per request"
    out.append(f"  {kept}; a pass splits over worker processes past {wl.shard.concurrency} streams "
               f"or {wl.shard.chunk_rate:g} chunks/s per process (up to one per core)")
    return out


def shape_lines(c: Campaign, items: Mapping[str, list[Item]]) -> list[str]:
    """The shapes measured and how: the warm pass and reps, requests per pass, the leak rule, the
    open loop's arrivals, the capacity search."""
    wl, out = c.workload, []
    classes = ", ".join(f"{n} ({len(items[n])} prompts)" for n in wl.classes)
    requests = ", ".join([f"C{n} {wl.pass_size(n)}" for n in wl.concurrency]
                         + [f"{r:g} req/s {wl.requests_at(r)}" for r in wl.rate])
    loads = " and ".join(([f"concurrency {list(wl.concurrency)}"] if wl.concurrency else [])
                         + ([f"rate {[float(r) for r in wl.rate]} req/s"] if wl.rate else []))
    out.append(f"shapes: {classes} x {loads}; per shape 1 warm pass "
               f"(discarded) + {wl.reps} reps, requests per pass: {requests}; "
               f"leak: at C>={c.leak.min_concurrency} a rep alone below the others past the run's "
               f"noise bar (at least {percent(c.leak.spread)}) voids the row, up to "
               f"{c.leak.max_reruns} reruns")
    if wl.rate:
        seed = wl.sampling.seed if wl.sampling.seed is not None else defaults.SEED
        slo = wl.slo.text()
        out.append(f"open loop: {wl.arrivals()} seeded by {seed} (the same schedule every rep and "
                   "window), each request sent at its time whatever is in flight; goodput: "
                   + (f"requests a second within {slo}" if slo else "no SLO set"))
    if wl.capacity is not None:
        cap = wl.capacity
        holds = " and ".join([f"{k.removesuffix('_ms').replace('_', ' ')} <= {v:g} ms"
                              for k, v in cap.holds.items()]
                             + ([f"goodput >= {cap.goodput:.0%} within the SLO"] if cap.goodput else []))
        out.append(f"capacity: per window and class ({', '.join(wl.capacity_classes())}), the highest "
                   f"{cap.over} in {cap.range[0]:g}..{cap.range[1]:g} at which {holds} in every rep, "
                   f"by a bracketing search of at most {cap.max_probes} probes (each an ordinary "
                   f"row), to a band within {cap.resolution:.0%}")
    return out


def sweep_lines(c: Campaign) -> list[str]:
    """Each sweep: the axis it varies, over which values, and the windows they became."""
    out = []
    for name, windows in c.sweeps().items():
        axis = windows[0].axes()[0] if windows[0].axes() else "?"
        values = ", ".join(json.dumps(w.change.value(axis)) for w in windows if w.axes() == [axis])
        out.append(f"sweep {name}: {axis} over {values} (the control's: "
                   f"{json.dumps(c.control_value(axis))}): windows {', '.join(w.name for w in windows)}")
    return out + ([""] if out else [])


def places_line(c: Campaign, runtime: str) -> str:
    """Where the sessions run: which place takes which session is decided as places free up, so
    the windows below are shown without their place."""
    at_once = min(c.parallel or len(c.places), len(c.places), len(c.sessions))
    line = (f"places: {', '.join(p.describe() for p in c.places)}; {at_once} sessions at once, each "
            "(its control, then its windows) on the first place free, in the order listed")
    pinned = [f"{p.name} CUDA_VISIBLE_DEVICES={p.gpus_text}" for p in c.places
              if runtime == "process" and isinstance(p.gpus, tuple)]
    return line + (f"; the server's GPUs: {', '.join(pinned)}" if pinned else "")


def slurm_notes(c: Campaign, run_dir: Path) -> list[str]:
    out = [f"slurm: each window is one batch job (sbatch --parsable), its server started as "
           f"`{c.slurm.start}`; the run directory ({run_dir}, or -2, -3... when taken) must be on a "
           "filesystem the nodes share (checked before the first window)"]
    if c.control_position == "last":
        out.append("slurm: the control boots last, so the windows before it are not pinned to its "
                   "node: each goes wherever Slurm puts it (first or both pins them all)")
    if c.slurm.start == "pyxis":
        out.append("slurm: start pyxis is rendered and documented but NOT exercised by ruler's tests "
                   "(no pyxis on CI): check the job script below on your cluster before a long "
                   "campaign; the image goes to --container-image as written (enroot's form, e.g. "
                   "nvcr.io#nvidia/tritonserver:24.05-py3, or a squashfs path)")
    return out


def parity_note(campaign: Campaign) -> str:
    """What a window on another stack runs before it measures (engine.quality.stacks)."""
    allowed = ("its deltas are given all the same (verdict.allow_different)"
               if campaign.verdict.allow_different else
               "a class that differs has its deltas withheld (verdict.allow_different gives them)")
    return ("before measuring, every prompt of every class is rendered and tokenized by both "
            f"stacks and the ids compared; {allowed}")


def window_lines(campaign: Campaign, adapter: ServerAdapter, start: WindowStart, index: int) -> list[str]:
    """The window's lines of the dry run: what it changes and the server it would start."""
    window, runtime = start.window, start.runtime
    environ = start.environ or {}
    w = None if window == CONTROL else campaign.window(window)
    kind = CONTROL if w is None else ("lossy: KL vs the oracle" if w.lossy else
                                      "lossless: greedy + teacher-forced |dlogp|")
    axis = CONTROL if w is None else w.axis or "(no axis label)"
    out = ["", f"  [{index}] {window}: {axis}  ({kind}{', multi-axis' if w and w.multi_axis else ''}"
           f"{f', sweep {w.sweep}' if w and w.sweep else ''})",
           f"      change: {_change(campaign, window)}"]
    if w is not None and w.change.knobs:
        out.append(f"      request knobs: {json.dumps(campaign.knobs_for(window))}")
    config = campaign.config_for(window)
    adapter = get_adapter(config.server)
    if w is not None and w.server is not None:
        out.append(f"      on another stack: {config.server} (the control's is {campaign.server}); "
                   f"{parity_note(campaign)}")
        wl = campaign.workload
        fields = adapter.exact_length_fields(wl.max_tokens) if wl.exact_output else {}
        out.append("      its requests: the same sampling; " + (
            f"exactly {wl.max_tokens} tokens ({json.dumps(fields)})" if fields else
            "output length a limit only (" + ("workload.exact_output is off" if not wl.exact_output
                                              else f"{config.server} has no such field") + ")"))
    try:
        plan = plan_launch(campaign, adapter, start)
    except KeyError as e:  # an unresolved ${...}: the real run rejects the window the same way
        return out + [f"      unresolved variable {e}: the run would reject this window"]
    fixed = campaign.host_port is not None
    notes: list[str] = []
    if runtime == "docker":
        command = config.command or (() if config.own_stack else campaign.docker.command) or ()
        lines, notes = docker_lines(plan, list(campaign.pass_env), environ, fixed, len(command))
    elif runtime == "attach":
        lines = [f"attach to {campaign.attach.url}: no server is started, no boot log is read"]
    elif runtime == "slurm":
        lines, notes = slurm_lines(plan, job_secrets(campaign, start.variables, environ))
    else:
        lines = process_lines(plan, fixed)
    out += [f"      {line}" for line in lines]
    out += [f"      note: {n}" for n in notes]
    out.append(f"      metrics: {metrics_note(adapter, plan.argv)}")
    if runtime == "docker" and not campaign.docker.keep:
        out.append("      the container is removed at window end (docker.keep: false)")
    return out


def dry_run(campaign_path: str, runtime: str | None, environ: Mapping[str, str] | None = None,
            testbed: Mapping[str, str] | None = None, results_dir: str = "results",
            today: dt.date | None = None) -> str:
    """The dry-run text; raises SpecError or EngineError like a real run would."""
    return plan_text(load_campaign(campaign_path), runtime, environ, testbed, results_dir, today)


def plan_text(campaign: Campaign, runtime: str | None, environ: Mapping[str, str] | None = None,
              testbed: Mapping[str, str] | None = None, results_dir: str = "results",
              today: dt.date | None = None) -> str:
    """What a run of a loaded campaign would start; raises EngineError for a runtime none serves."""
    env = dict(os.environ if environ is None else environ)
    chosen = runtime or campaign.runtime
    if chosen == "auto":
        chosen = resolve_runtime(campaign, None)
    known = dict(cached_variables() if testbed is None else testbed)
    variables = dry_variables(campaign, env, known)
    # The directory `ruler run` would claim (results.new_run_dir), named as the run would name it.
    run_dir = Path(results_dir) / f"{(today or dt.date.today()).isoformat()}-{campaign.name}"
    # Pasted into tickets and chats: a secret the file itself writes (a literal under a secret's
    # name, a URL's password) is said as the run's records say it.
    return redactor_for(campaign, env)("\n".join(describe(campaign, variables, chosen, env, run_dir)) + "\n")


def classes_text(campaign: Campaign, environ: Mapping[str, str] | None = None,
                 testbed: Mapping[str, str] | None = None) -> str:
    """What each class sends (engine.campaign.sources.explain), its files read as a run reads them."""
    env = dict(os.environ if environ is None else environ)
    variables = dry_variables(campaign, env, dict(cached_variables() if testbed is None else testbed))
    items = campaign_items(campaign, variables)
    wl = campaign.workload
    out = [line for name, spec in wl.classes.items()
           for line in class_lines(name, chosen(spec)[0].key, items[name], wl.max_tokens)
           + [f"  {note}" for note in class_notes(campaign, name, variables)]]
    return "\n".join(out) + "\n"
