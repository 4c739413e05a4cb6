"""Launch planning: from the campaign to each window's fully resolved server start (a LaunchPlan).

Pure, apart from picking a free port: the runner calls it to start a window, the dry run calls it
to show what a run would start, so what the operator reads is what runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engine.campaign.frozen import GREEDY, KL
from engine.campaign.machines import Place
from engine.campaign.prompts import read_receipt
from engine.campaign.secrets import holds_secret
from engine.campaign.sources import Item, class_items
from engine.campaign.spec import Campaign, ServerConfig
from engine.campaign.variables import expand, render_args
from engine.errors import EngineError
from engine.runtime.base import (
    LABEL_CAMPAIGN,
    LABEL_DIR,
    LABEL_DIR_ID,
    LABEL_RUN,
    LABEL_WINDOW,
    LaunchPlan,
    SlurmJob,
    free_port,
    stray_mark,
)
from engine.runtime.slurm.script import PORT_REF
from engine.servers.adapter import ServerAdapter
from engine.words import CONTROL


def configs(campaign: Campaign) -> list[ServerConfig]:
    return [campaign.config_for(CONTROL)] + [campaign.config_for(w.name) for w in campaign.windows]


def images(campaign: Campaign, variables: Mapping[str, str]) -> list[str]:
    """Every image the campaign boots, resolved, for env.json's ids and digests."""
    out: list[str] = []
    for c in configs(campaign):
        image = c.image if c.own_stack else c.image or campaign.docker.image
        if image:
            img = expand(image, dict(os.environ) | dict(variables))
            if img not in out:
                out.append(img)
    return out


def campaign_items(campaign: Campaign, variables: Mapping[str, str]) -> dict[str, list[Item]]:
    """Every class's items, a ${...} in a file path resolved like the server configuration's.

    Raises the source's file error (a ValueError naming file:line) or UnresolvedVariable.
    """
    v = dict(os.environ) | dict(variables)
    return {cls: class_items(campaign, cls, v) for cls in campaign.workload.classes}


def check_quality_files(campaign: Campaign, variables: Mapping[str, str]) -> None:
    """Read the quality checks' files (greedy prompts, KL texts, a stored oracle receipt) as the
    quality phase will, a ${...} in their paths resolved like a class's file: the phase reads them
    mid-run, after a server booted, so ``ruler run`` and the dry run read them first.

    Raises the file's error (a DataFileError naming file:line) or UnresolvedVariable.
    """
    if not campaign.quality.enabled:
        return
    v = dict(os.environ) | dict(variables)
    q = campaign.quality
    # The dry run stands a variable this host does not define for itself (dryrun.dry_variables):
    # a file named through one is the run's to read, where it is defined or refused.
    if q.greedy.prompts is None and q.greedy.file is not None and "${" not in expand(q.greedy.file, v):
        campaign.greedy_prompts(v)
    if q.kl.texts is None and q.kl.file is not None and "${" not in expand(q.kl.file, v):
        campaign.kl_texts(v)
    receipt = campaign.oracle_receipt(v)
    if receipt is not None and "${" not in str(receipt):
        read_receipt(receipt)


def quality_texts(campaign: Campaign, variables: Mapping[str, str]) -> dict[str, list[str]]:
    """The quality checks' prompts read from files, as a run freezes them at its start beside its
    copy of the campaign (engine.campaign.frozen): the greedy prompts it sends, the KL texts."""
    q = campaign.quality
    if not q.enabled:
        return {}
    v = dict(os.environ) | dict(variables)
    texts = {GREEDY: campaign.greedy_prompts(v)} if q.greedy.prompts is None and q.greedy.file else {}
    kl = campaign.kl_texts(v) if q.kl.texts is None and q.kl.file else None
    return texts | ({KL: kl} if kl is not None else {})


def resolve_runtime(campaign: Campaign, requested: str | None) -> str:
    runtime = requested or campaign.runtime
    if runtime != "auto":
        return runtime
    if campaign.docker and campaign.docker.image:
        from engine.runtime import docker as rd  # the SDK only when a campaign may use it

        if rd.daemon_answers():
            return "docker"
    if campaign.process and campaign.process.command:
        return "process"
    raise EngineError("runtime auto: no Docker daemon answers and the campaign has no process.command")


def run_token(run_id: str) -> str:
    """The run's part of its server names: the random part of the run id (the whole id of a run
    that has none), so no two runs ever ask for the same container name."""
    return run_id.rsplit(".", 1)[-1]


def window_vars(config: ServerConfig, variables: Mapping[str, str],
                environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a window's configuration expands with: the host's, the run's (testbed), and
    the window's own ``model`` and ``artifacts.*``."""
    v = dict(environ) | dict(variables)
    v["model"] = expand(config.model, v) if config.model else ""
    for name, path in config.artifacts.items():
        v[f"artifacts.{name}"] = expand(str(path), v)
    return v


@dataclass(frozen=True)
class WindowStart:
    """A window's server start as asked: the run and the window, and where it is to run.

    ``variables`` are the run's (the testbed's, the host's); ``environ`` the environment the
    server inherits (None: this process's). ``workdir`` is the window's directory (a Slurm job
    keeps its script and record there, and writes its boot.log there); ``node`` the Slurm node the
    window must run on (its session's); ``place`` the session's place (its CPU set and GPUs)."""

    runtime: str
    run_id: str
    session: str
    window: str
    variables: Mapping[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None
    tag: str = ""
    workdir: Path | None = None
    node: str | None = None
    place: Place | None = None
    run_dir: Path | None = None  # the run directory (resolved) and its identity, on the labels
    run_dir_id: str = ""


@dataclass(frozen=True)
class _Resolved:
    """What every runtime's plan shares once the window's variables are resolved."""

    config: ServerConfig
    v: Mapping[str, str]
    args: list[str]
    env: dict[str, str]
    secret_env: dict[str, str]
    name: str
    labels: dict[str, str]
    mounts: list[str]


def plan_launch(campaign: Campaign, adapter: ServerAdapter, start: WindowStart) -> LaunchPlan:
    """One window's server start. Raises KeyError (UnresolvedVariable) for a ${...} nobody defines:
    the run rejects that window, the dry run says it would."""
    environ = os.environ if start.environ is None else start.environ
    config = campaign.config_for(start.window)
    v = window_vars(config, start.variables, environ)
    args = render_args(config.args, v)
    env = {k: expand(str(val), v) for k, val in config.env.items() if val is not None}
    secret = {k: val for k, val in env.items() if holds_secret(k, val)}  # passed, never recorded
    env = {k: val for k, val in env.items() if k not in secret}
    secret_env = {**{k: environ[k] for k in campaign.pass_env if k in environ}, **secret}
    port = campaign.host_port or free_port()
    name = (f"ruler-{campaign.name}-{start.session}-{start.window}-{run_token(start.run_id)}"
            f"{start.tag}")
    labels = {LABEL_CAMPAIGN: campaign.name, LABEL_RUN: start.run_id,
              LABEL_WINDOW: f"{start.session}-{start.window}"}
    if start.run_dir is not None and start.run_dir_id:
        labels |= {LABEL_DIR: str(start.run_dir), LABEL_DIR_ID: start.run_dir_id}
    mounts = sorted({str(Path(p).parent) for p in [v["model"]] + [
        v[f"artifacts.{a}"] for a in config.artifacts] if p and os.path.isabs(p)})
    place = start.place
    cpus = place.cpus if place else None
    if start.runtime == "docker":
        d = campaign.docker
        cport = config.container_port or adapter.default_container_port
        command = [expand(c, v) for c in _command(config, d.command)]
        own = adapter.log_args() + adapter.listen_args("0.0.0.0", cport)
        gpus = place.gpus if place and place.gpus is not None else d.gpus
        return LaunchPlan(name, command + args + own, env, secret_env, port, cport,
                          image=expand(_image(config, d.image), v), mounts=mounts,
                          labels=labels, gpus=gpus, shm_size=d.shm_size, ipc=d.ipc,
                          volumes=[expand(x, v) for x in d.volumes], keep=d.keep, cpus=cpus,
                          ruler_args=len(own))
    if start.runtime == "attach":
        return LaunchPlan(name, [], env, {}, 0, labels=labels)
    if start.runtime == "slurm":
        return _slurm_plan(campaign, adapter, start,
                           _Resolved(config, v, args, env, secret_env, name, labels, mounts))
    command = [expand(c, v) for c in _command(config, campaign.process.command)]
    own = adapter.log_args() + adapter.listen_args("127.0.0.1", port)
    return LaunchPlan(name, command + args + own, env | process_gpus(place), secret_env, port,
                      labels=labels, cpus=cpus, ruler_args=len(own))


def _command(config: ServerConfig, section: tuple[str, ...] | None) -> tuple[str, ...]:
    """A window's command: its own, else its runtime section's; a window on another stack never
    takes the section's, which starts the control's stack."""
    if config.own_stack:
        return config.command or ()
    return config.command or section or ()


def _image(config: ServerConfig, section: str | None) -> str:
    return (config.image or "") if config.own_stack else config.image or section or ""


def process_gpus(place: Place | None) -> dict[str, str]:
    """A process place's GPUs as the server sees them: CUDA_VISIBLE_DEVICES names its device ids,
    in the PCI bus order NVML numbers them (CUDA's default order can differ), so the telemetry
    samples the GPUs the server runs on and the other place's GPU stays untouched."""
    if place is None or not isinstance(place.gpus, tuple):
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, place.gpus)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _slurm_plan(campaign: Campaign, adapter: ServerAdapter, start: WindowStart,
                r: _Resolved) -> LaunchPlan:
    """A window as a Slurm batch job: the node picks the port (the argv names it by reference).
    A place with a GPU count is a session's share of a node (``--gres=gpu:N`` on its node)."""
    sl, place = campaign.slurm, start.place
    gres = f"gpu:{place.gpus}" if place is not None and isinstance(place.gpus, int) else sl.gres
    job = SlurmJob(start=sl.start, partition=sl.partition, account=sl.account, qos=sl.qos,
                   time=sl.time, gres=gres, exclusive=sl.exclusive, sbatch=sl.sbatch,
                   comment=stray_mark(start.run_id, start.run_dir_id))
    if sl.start == "process":
        command = [expand(c, r.v) for c in _command(r.config, campaign.process.command)]
        own = adapter.log_args() + adapter.listen_args("0.0.0.0", PORT_REF)
        return LaunchPlan(r.name, command + r.args + own, r.env, r.secret_env, 0, labels=r.labels,
                          mounts=r.mounts, slurm=job, workdir=start.workdir, tag=start.tag,
                          node=start.node, ruler_args=len(own))
    d = campaign.docker
    command = [expand(c, r.v) for c in _command(r.config, d.command)]
    # pyxis runs the container in the node's network: the server itself listens on the job's port.
    cport = 0 if sl.start == "pyxis" else r.config.container_port or adapter.default_container_port
    own = adapter.log_args() + adapter.listen_args("0.0.0.0", cport or PORT_REF)
    return LaunchPlan(r.name, command + r.args + own, r.env, r.secret_env, 0, cport, labels=r.labels,
                      mounts=r.mounts, ruler_args=len(own),
                      slurm=job, image=expand(_image(r.config, d.image), r.v),
                      shm_size=d.shm_size, ipc=d.ipc, volumes=[expand(x, r.v) for x in d.volumes],
                      keep=False, workdir=start.workdir, tag=start.tag, node=start.node)
