"""The methods section, from the frozen campaign, env.json and the invocations the journal recorded,
so that the report can be argued with."""

from __future__ import annotations

import json
from typing import Any

from engine import __version__, gpu
from engine.campaign.spec import Campaign
from engine.record.events import EventKind
from engine.record.results import ITEMS, PROMPTS
from engine.report import steady
from engine.report.run import RunView, read_json
from engine.report.text import slo_text, table, when
from engine.report.windows import change_text, slurm_record
from engine.sanitize import code, markdown
from engine.servers import get_adapter
from engine.words import CONTROL


def _connections(server: str) -> str:
    try:
        kept = get_adapter(server).keep_alive
    except ValueError:
        return "connections as the server adapter chose"
    return "one connection per worker, kept between its requests" if kept else "one connection per request"


def methods(view: RunView) -> list[str]:
    """What was run and how, from the frozen campaign, env.json and the recorded invocations."""
    c, env, st = view.campaign, view.env, view.state
    host = env.get("host") or {}
    out = ["## Methods", ""]
    m = markdown  # env.json and the journal say what the host and the server were: their words
    out += [f"- **ruler**: {m(env.get('ruler_version', '?'))} measured the run; this report was "
            f"written by ruler {__version__}.",
            f"- **Host**: {m(host.get('node', '?'))}, {m(host.get('platform', '?'))}, "
            f"{m(host.get('cpus', '?'))} CPUs, Python {m(host.get('python', '?'))}.",
            *gpu_lines(env),
            f"- **Runtime**: {m(st.runtime or env.get('runtime', '?'))}; server adapter "
            f"{code(st.server or view.raw_campaign.get('server', '?'))}; run started "
            f"{m(env.get('started', when(st.started_ts)))}"
            + (f", resumed {st.resumes} times" if st.resumes else "") + "."]
    out += images(view)
    out += slurm(view)
    if view.campaign_note:
        out += [f"- **Campaign**: {markdown(view.campaign_note)}; the methods below are partial.", ""]
    if c is not None:
        wl, leak = c.workload, c.leak
        prompts, items = read_json(view.dir / PROMPTS), read_json(view.dir / ITEMS)
        classes = ", ".join(_class_text(k, prompts, items, c) for k in wl.classes)
        per_c = ", ".join([f"C{n}: {wl.pass_size(n)}" for n in wl.concurrency]
                          + [f"{r:g} req/s: {wl.requests_at(r)}" for r in wl.rate])
        loads = ([f"concurrency {', '.join(map(str, wl.concurrency))} (closed loop)"]
                 if wl.concurrency else []) + (
            [f"rate {', '.join(f'{r:g}' for r in wl.rate)} req/s (open loop: {wl.arrivals()}, "
             f"seeded, the same every rep; goodput SLOs: {slo_text(view)})"] if wl.rate else [])
        out += [
            f"- **Workload**: classes {classes}; {'; '.join(loads)}; "
            f"{wl.reps} reps per shape; requests per rep {per_c}; max_tokens {wl.max_tokens}; "
            f"sampling {code(json.dumps(wl.sampling.model_dump()))}; knobs sent verbatim "
            f"{code(json.dumps(wl.knobs)) if wl.knobs else 'none'}. Streaming chat completions, "
            f"{_connections(c.server)}; tok/s counts the server's usage.completion_tokens. A pass "
            f"past {wl.shard.concurrency} streams or {wl.shard.chunk_rate:g} chunks/s per client "
            "process runs on several (each rep's receipt names them and each one's event-loop "
            "lag).",
            "- **Warm policy**: every attempt of a shape starts with one warm pass of the same "
            "shape (prompts, concurrency, request count), recorded as "
            "`<class>-c<C>-<attempt>-warm.jsonl` and discarded; an operator rewarm adds another.",
            (f"- **Leak policy**: at C >= {leak.min_concurrency} a spread over {leak.spread * 100:g} % is "
             f"a leaked pass: the row is void, rewarmed and rerun up to {leak.max_reruns} times, "
             f"every void attempt kept; below C {leak.min_concurrency} such a row is *noisy*. "
             if not steady.measured_steady(view) else "- **Leak policy**: every void attempt is "
             "kept (the rule under Leak or noise below). ")
            + (f"A rep more than {leak.spread * 100:g} % below the median of the earlier reps is "
               "flagged as it lands." if not steady.measured_steady(view) else
               "From a row's third rep, the rep the rule condemns is flagged as it lands."),
            *steady.rules(view),
            "- **Prefix cache**: " + ("**flush**: emptied before each warm pass and rep (SGLang "
                                      "`POST /flush_cache`, vLLM `POST /reset_prefix_cache`, llama.cpp "
                                      "`cache_prompt: false` on each request); a failed flush voids its rep."
                                      if wl.cache == "flush" else
                                      "**keep**: never emptied, so reps after the warm pass may be "
                                      "served from it.")
            + " Each row's `cache_hit` is the share of its reps' prompt tokens the server served "
            "from its cache (docs/servers-cache.md).",
            "- **Acceptance** (engine.method.acceptance, docs/acceptance.md): length = 1 + accepted "
            "/ verify steps; rate = accepted / drafted; per draft position, the share of verify "
            "steps that accepted it; from the server's /metrics counters scraped around each rep "
            "(`metrics`), else summed per request (`per-request`), never a mix in one row; the "
            "reps pooled, with a 95 % t interval across them.",
            f"- **Quality**: {quality_text(c)}",
            f"- **Timeouts**: boot {c.timeouts.boot:g} s, request {c.timeouts.request:g} s, "
            f"window {c.timeouts.window:g} s"
            + (f", queue {c.timeouts.queue:g} s." if (st.runtime or env.get("runtime")) == "slurm"
               else "."),
            f"- **Sessions** (control {c.control_position}): "
            + "; ".join(f"{markdown(s)}: {markdown(', '.join(c.windows_in(s)))}" for s in c.sessions) + "."]
    out += places(view) + [""]
    out += flags(view) + slurm_jobs(view)
    return out


def slurm(view: RunView) -> list[str]:
    """Runtime slurm: the batch jobs' settings, the node of each session (where its control ran,
    and so every window of it), and each window's job as Slurm recorded its end."""
    st, c = view.state, view.campaign
    if (st.runtime or view.env.get("runtime")) != "slurm":
        return []
    out = []
    if c is not None:
        sl = c.slurm
        opts = [f"{k} {code(v)}" for k, v in (("partition", sl.partition), ("account", sl.account),
                                             ("qos", sl.qos), ("time", sl.time), ("gres", sl.gres)) if v]
        opts.append("an exclusive node" if sl.exclusive else "a shared node")
        opts += [f"extra {code(' '.join(sl.sbatch))}"] if sl.sbatch else []
        out.append(f"- **Slurm**: each window one batch job, its server started as {code(sl.start)}; "
                   f"{', '.join(opts)}. The job script of each window is its `job.sh`.")
    nodes = {ws.session: ws.node for ws in view.windows() if ws.window == CONTROL and ws.node}
    if nodes:
        places = st.session_places  # a campaign with places: the place each session ran on
        out.append("- **Nodes**: " + "; ".join(
            f"session {markdown(s)} on {code(n)}" + (f" (place {markdown(places[s])})" if s in places else "")
            for s, n in nodes.items())
                   + " (each session's windows ran on its control's node).")
    return out


def slurm_jobs(view: RunView) -> list[str]:
    """Each window's batch job: its node, its time in the queue, and its end as Slurm recorded it."""
    rows = []
    for ws in view.windows():
        job = ws.server.get("job") or ws.facts.get("slurm_job")
        if not job:
            continue
        placed = view.of(EventKind.WINDOW_PLACED, ws.session, ws.window)
        rec = slurm_record(view, ws)
        rows.append([ws.key, job, ws.node or "-",
                     f"{placed[-1]['queued_s']:.1f}" if placed else "-",
                     rec.get("JobState", "-"), rec.get("Reason", "-"), rec.get("ExitCode", "-")])
    if not rows:
        return []
    return ["### Slurm jobs", "", "One batch job per window (its last boot); state, reason and exit "
            "code as `scontrol -o show job` recorded them when the job ended:", ""] + table(
        ["window", "job", "node", "queued s", "state", "reason", "exit code"], rows)


def places(view: RunView) -> list[str]:
    """Which box measured which session: each place as the campaign names it, its machine as its
    runtime described it when a session began there (env.json), and the sessions it ran."""
    recorded: dict[str, dict[str, Any]] = view.env.get("places") or {}
    ran: dict[str, list[str]] = {}
    for session, place in view.state.session_places.items():
        ran.setdefault(place, []).append(session)
    if not recorded and not ran:
        return []
    out = ["- **Places**: sessions ran in parallel, each on one place for all its windows; every "
           "delta is within one place, and places are compared only through their controls "
           "(control drift below)."]
    for name in dict.fromkeys([*recorded, *ran]):
        info = recorded.get(name, {})
        sessions = ran.get(name, [])
        out.append(f"  - {code(name)} ({markdown(where_text(info.get('where') or {}))}): "
                   f"{markdown(host_text(info.get('host') or {}))}; ran "
                   f"{markdown(', '.join(sessions) or 'no session')}"
                   + node_facts(view, sessions) + ".")
    return out


def where_text(where: dict[str, Any]) -> str:
    bits = [f"Docker {where['docker_host']}" if where.get("docker_host") else "",
            f"node {where['node']}" if where.get("node") else "",
            f"CPUs {where['cpus']}" if where.get("cpus") else "",
            f"GPUs {where['gpus']}" if where.get("gpus") is not None else ""]
    return ", ".join(b for b in bits if b) or "this machine"


def host_text(host: dict[str, Any]) -> str:
    if host.get("error"):
        return f"did not answer ({host['error']})"
    if not host:
        return "machine not described (the scheduler chose a node per window)"
    bits = [str(host.get("name") or "?"),
            f"{host['cpus']} CPUs" if host.get("cpus") else "",
            f"GPUs {', '.join(host['gpus'])}" if host.get("gpus") else "no GPU recorded",
            f"driver {host['driver']}" if host.get("driver") else "",
            f"gres {host['gres']}" if host.get("gres") else "",
            f"Docker {host['docker']}" if host.get("docker") else "",
            f"runtimes {', '.join(host['runtimes'])}" if host.get("runtimes") else ""]
    return ", ".join(b for b in bits if b)


def node_facts(view: RunView, sessions: list[str]) -> str:
    """What a batch job said of its node (runtime slurm), per session's control."""
    said = []
    for session in sessions:
        ws = view.state.windows.get(f"{session}-{CONTROL}")
        f = ws.facts if ws else {}
        if f.get("node"):
            said.append(f"{markdown(session)}'s job on {code(f['node'])}: "
                        f"{markdown(f.get('slurm_cpus') or '?')} CPUs, GPUs "
                        f"{markdown(f.get('slurm_gpus') or 'none')}")
    return f" ({'; '.join(said)})" if said else ""


def gpu_lines(env: dict[str, Any]) -> list[str]:
    """The GPUs as NVML described them in env.json, and how they were measured; a run recorded
    before NVML (nvidia-smi text only) gets the names from that text."""
    g = env.get("gpu")
    if not isinstance(g, dict):
        smi = env.get("nvidia_smi")
        names = [ln.strip(" |") for ln in (smi or "").splitlines() if "NVIDIA" in ln and "SMI" not in ln]
        return [f"- **GPUs**: {markdown('; '.join(n.split('  ')[0] for n in names[:8]) or 'none recorded')} "
                "(nvidia-smi)."]
    if g.get("none"):
        return [f"- **GPUs**: {markdown(g['none'])}: no GPU telemetry."]
    out = [f"- **GPUs** (NVML {markdown(g.get('nvml', '?'))}, driver {markdown(g.get('driver', '?'))}, CUDA "
           f"{markdown(g.get('cuda', '?'))}): "
           + "; ".join(markdown(_gpu(d)) for d in g.get("gpus", []) if isinstance(d, dict)) + "."]
    out.append("- **GPU telemetry**: NVML read each GPU the window's server owns at "
               f"{gpu.SAMPLE_HZ:g} Hz during every warm pass and rep, on a thread of its own; "
               "energy is the energy counter's change over the pass, J/token that energy over the "
               "rep's generated tokens, mean power that energy over the pass's time, SM clocks over "
               "busy samples. A slow rep is *throttled* (not a leak; still rerun) when a power or "
               f"thermal clock-event reason shows in over {gpu.REASON_EXCESS:.0%} more of its samples "
               f"than the other reps', or its median SM clock is over {gpu.CLOCK_DROP:.0%} below "
               "theirs.")
    out.append("- **GPU hygiene**: before each boot ruler waited (at most "
               f"{gpu.SETTLE_S:g} s) for the owned GPUs' used memory to come back within "
               f"{gpu.SLACK_MIB} MiB of its level before the session's first boot, and "
               f"recorded the free memory at boot (`{gpu.FREE_FACT}`); a window with more "
               "than that less free than its control is flagged in its boot-facts diff.")
    return out


def _gpu(d: dict[str, Any]) -> str:
    clocks = d.get("clocks") or {}
    mig, ecc = d.get("mig_mode") or {}, d.get("ecc_mode") or {}
    bits = [f"{d.get('memory_mib', 0):,} MiB" if d.get("memory_mib") else "",
            f"power limit {d['power_limit_w']:g} W" if d.get("power_limit_w") else "",
            f"SM max {clocks['sm_max_mhz']} MHz" if clocks.get("sm_max_mhz") else "",
            f"applications clocks SM {clocks['sm_applications_mhz']} / memory "
            f"{clocks.get('mem_applications_mhz')} MHz" if clocks.get("sm_applications_mhz") else "",
            f"persistence {d['persistence_mode']}" if d.get("persistence_mode") is not None else "",
            f"MIG {mig.get('current')}" if mig else "", f"ECC {ecc.get('current')}" if ecc else ""]
    return f"GPU {d.get('index')} {d.get('name', '?')} (" + ", ".join(b for b in bits if b) + ")"


def quality_text(c: Campaign) -> str:
    q = c.quality
    if not q.enabled:
        return "off (no greedy, teacher-forced or KL checks were run)."
    oracle = q.kl.oracle if isinstance(q.kl.oracle, str) else f"receipt {code(q.kl.oracle.receipt)}"
    return (f"greedy equivalence on {q.greedy.n} prompts x {q.greedy.max_tokens} tokens (seed "
            f"{c.quality_seed()}), first differing character recorded; teacher-forced |Δlogp| of "
            f"the control's continuations, top-{q.teacher_forced.top_k}, "
            f"{q.teacher_forced.positions} positions per prompt; KL(oracle || window) for lossy "
            f"windows, top-{q.kl.top_k}, oracle {oracle}; ruler check of the knobs "
            f"{'on' if q.knobs_check else 'off'}; tool probe "
            f"{f'{q.tool_probe.n} calls' if q.tool_probe else 'off'}.")


def images(view: RunView) -> list[str]:
    docker = view.env.get("docker") or {}
    out = []
    for name, info in (docker.get("images") or {}).items():
        digests = ", ".join(info.get("digests") or []) or "no registry digest"
        out.append(f"- **Image** {code(name)}: id {code(info.get('id', info.get('error', '?')))} "
                   f"({markdown(digests)})")
    seen = {ws.server.get("image_id") for ws in view.windows() if ws.server.get("image_id")}
    if len(seen) > 1:
        out.append(f"- **Images booted**: {len(seen)} distinct image ids (per window below)")
    if docker.get("server_version"):
        out.append(f"- **Docker engine**: {markdown(docker['server_version'])}")
    return out


def flags(view: RunView) -> list[str]:
    """The invocation each window actually booted, as the journal recorded it."""
    rows = []
    for ws in view.windows():
        started = view.of(EventKind.WINDOW_STARTED, ws.session, ws.window)
        plan = started[0].get("plan", {}) if started else {}
        argv = " ".join(str(a) for a in plan.get("argv", [])) or "-"
        lossy = "lossy" if view.lossy(ws.window) else ""
        rows.append([ws.key, ws.axis, lossy, change_text(view, ws.window) or "-",
                     code(argv) if argv != "-" else "-", plan.get("image") or "-",
                     ws.server.get("image_id", "-")[:19] if ws.server.get("image_id") else "-"])
    if not rows:
        return []
    return ["### Flags per window", "", "As booted (recorded argv; `${...}` resolved):", ""] + table(
        ["window", "axis", "lossy", "change vs control", "argv", "image", "image id"], rows)


def _class_text(cls: str, prompts: dict[str, Any], items: dict[str, Any], c: Campaign) -> str:
    """A class as the methods name it: a plain class by its prompts; any other by its source and
    how its requests' answers are sized."""
    if cls not in items:
        return f"{cls} ({len(prompts.get(cls, []))} prompts)"
    spec = c.workload.classes.get(cls)
    source = next((k for k, v in (spec.model_dump() if spec else {}).items() if v is not None), "items")
    own = sum(isinstance(i, dict) and i.get("max_tokens") is not None for i in items[cls])
    sized = f", {own} answered at exactly their own lengths (ignore-EOS)" if own else ""
    return f"{cls} ({len(items[cls])} requests from its {source}{sized})"


def files(view: RunView) -> list[str]:
    names = ["campaign.yaml", "env.json", "journal.jsonl", "throughput.csv", "verdicts.csv",
             "drift.json", PROMPTS, ITEMS]
    present = [f"`{n}`" for n in names if (view.dir / n).exists()]
    return ["## Receipts", "", f"In this run directory: {', '.join(present)}; per window under "
            "`windows/<session>-<window>/`: boot.log, boot-facts.json (with its diff against the "
            "control), boot-excerpt.txt, rejection.txt or failure.txt where it applies, the quality "
            "receipts, and `reps/` with every warm pass and rep, request by request (with a GPU, "
            "beside each its NVML samples, `*.gpu.jsonl`)"
            + ("; with runtime slurm also job.sh (the batch script as submitted), job.place (the "
               "node and port the job reported) and job.record.txt (Slurm's record of the job's end)"
               if view.state.runtime == "slurm" else "") + ".", ""]

