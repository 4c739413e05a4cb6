"""The runner's queue path on FAKE batch jobs (tests/component/fakes.py FakeBatchServer): a queued
job is journaled and its boot clock starts when it runs, one that never leaves the queue is
rejected at the queue timeout, and a window whose log gave no boot fact is not called equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.campaign.load import load_campaign
from engine.commands.progress import format_event
from engine.record.events import EventKind
from engine.record.fold import fold
from engine.record.journal import read_events
from engine.report import load_run, render
from engine.run import boot
from engine.run.measure import Measurement
from engine.run.runner import Runner
from engine.runtime.base import LaunchPlan
from tests.component.fakes import LOGS, Behaviour, FakeBatchRuntime, FakeBatchServer, Queue, by_window


def queue_campaign(tmp_path: Path, name: str, **timeouts: float) -> Path:
    spec = {
        "name": name, "server": "llamacpp", "runtime": "process",
        "process": {"command": ["llama-server"]},  # never run: the fake runtime starts the servers
        "control": {"args": {"-c": 2048, "-np": 2, "--metrics": True}},
        "windows": [{"name": "ctx", "axis": "context 4096", "change": {"args": {"-c": 4096}}}],
        "sessions": {"s1": ["ctx"]},
        "control_position": "first",
        "workload": {"classes": {"prose": {"prompts": ["Write one sentence about the sea."]}},
                     "concurrency": [1], "reps": 2, "requests_per_rep": 1, "max_tokens": 4},
        "leak": {"min_concurrency": 8, "spread": 0.9, "max_reruns": 1},
        "quality": {"enabled": False},
        "timeouts": {"request": 10.0, **timeouts},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def window_of(plan: LaunchPlan) -> str:
    return plan.labels["ruler.window"].split("-", 1)[1]


@pytest.mark.timeout(60)
def test_a_queued_job_is_journaled_and_its_boot_clock_starts_when_it_runs(tmp_path: Path) -> None:
    """FAKE batch jobs (tests/component/fakes.py FakeBatchServer): the control waits 2.5 s in the queue,
    first for Priority then for Resources, against a boot timeout of 1.5 s. It boots all the same:
    the boot clock starts when the job runs. The window after it is pinned to its node."""
    waits = {"control": Queue([("PENDING", "Priority", 0.8), ("PENDING", "Resources", 1.7)], "gpu-07"),
             "ctx": Queue([("PENDING", "", 0.1)], "gpu-07")}
    rt = FakeBatchRuntime(lambda plan: waits[window_of(plan)])
    run = tmp_path / "run"
    run.mkdir()
    try:
        r = Runner(load_campaign(queue_campaign(tmp_path, "queued", boot=1.5)), run, rt, {}, None,
                   [Measurement()])
        assert r.run() == "finished"
    finally:
        rt.close()
    journal = read_events(run / "journal.jsonl")
    control = rt.servers[0]
    assert isinstance(control, FakeBatchServer)
    control_job = control.job
    assert [(e["job"], e["state"], e["reason"]) for e in journal
            if e["kind"] == EventKind.WINDOW_QUEUED and e["window"] == "control"] == [
        (control_job, "PENDING", "Priority"), (control_job, "PENDING", "Resources")]
    placed = next(e for e in journal if e["kind"] == EventKind.WINDOW_PLACED and e["window"] == "control")
    assert (placed["node"], placed["url"]) == ("gpu-07", rt.servers[0].base_url)
    assert placed["queued_s"] >= 2.5
    ready = next(e for e in journal if e["kind"] == EventKind.WINDOW_READY and e["window"] == "control")
    assert ready["boot_s"] < 1.5 < placed["queued_s"]
    kinds = [e["kind"] for e in journal if e.get("window") == "control"]
    assert kinds.index(EventKind.WINDOW_PLACED) < kinds.index(EventKind.BOOT_FACT)
    # Every window of the session runs where its control ran: its job asks Slurm for that node.
    assert [(window_of(p), p.node) for p in rt.plans] == [("control", None), ("ctx", "gpu-07")]
    st = fold(journal)
    assert {k: (w.status, w.placed, w.facts["node"]) for k, w in st.windows.items()} == {
        "s1-control": ("done", "gpu-07", "gpu-07"), "s1-ctx": ("done", "gpu-07", "gpu-07")}
    assert (run / "windows" / "s1-control" / "boot.log").read_text().startswith(
        (LOGS / "llamacpp_c2048_np2.log").read_text().splitlines()[0])


@pytest.mark.timeout(60)
def test_a_job_that_never_leaves_the_queue_is_rejected_at_the_queue_timeout(tmp_path: Path) -> None:
    """A FAKE job held PENDING (Resources) for good: the window is rejected when the queue timeout
    passes, its job cancelled, and the campaign goes on without it."""
    waits = {"control": Queue(), "ctx": Queue([("PENDING", "Resources", 0.0)], forever=True)}
    rt = FakeBatchRuntime(lambda plan: waits[window_of(plan)])
    run = tmp_path / "run"
    run.mkdir()
    try:
        r = Runner(load_campaign(queue_campaign(tmp_path, "stuck", boot=10.0, queue=1.0)), run, rt, {},
                   None, [Measurement()])
        assert r.run() == "finished"
    finally:
        rt.close()
    journal = read_events(run / "journal.jsonl")
    ctx = [e for e in journal if e.get("window") == "ctx"]
    ctx_server = rt.servers[1]
    assert isinstance(ctx_server, FakeBatchServer)
    job = ctx_server.job
    assert [e["kind"] for e in ctx] == [
        EventKind.WINDOW_STARTED, EventKind.SERVER_STARTED, EventKind.WINDOW_QUEUED,
        EventKind.WINDOW_REJECTED, EventKind.SERVER_STOPPING, EventKind.SERVER_STOPPED]
    assert ctx[3]["reason"] == f"Fake job {job} still PENDING after 1 s (queue timeout)"
    assert ctx[5]["record"] == {"JobId": job, "JobState": "CANCELLED", "NodeList": ""}
    assert (run / "windows" / "s1-ctx" / "rejection.txt").read_text().startswith(
        f"reason: Fake job {job} still PENDING after 1 s (queue timeout)")
    st = fold(journal)
    assert (st.windows["s1-ctx"].status, st.windows["s1-control"].status) == ("rejected", "done")
    assert not rt.servers[1].alive()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("silent", "whose"), [("ctx", "its log"), ("control", "its control's log")])
def test_a_window_whose_log_gave_no_boot_fact_is_not_called_equal_to_its_control(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent: str, whose: str) -> None:
    """Issue 26, item 1: a window whose boot.log stayed empty (the log went elsewhere) reported
    "boot facts equal to the control" on the strength of its job's node, CPUs and GPUs, which its
    runtime adds to every boot. FAKE batch jobs: the window's server, or its control's, prints
    nothing."""
    # No ready line will come: the boot waits for the log to catch up for a second, not ten.
    monkeypatch.setattr(boot, "LOG_CATCH_UP_S", 1.0)
    empty = tmp_path / "empty.log"
    empty.write_text("")
    rt = FakeBatchRuntime(lambda plan: Queue(node="gpu-07"),
                          by_window({silent: Behaviour(boot_log=empty)}))
    run = tmp_path / "run"
    run.mkdir()
    try:
        r = Runner(load_campaign(queue_campaign(tmp_path, "unseen", boot=5.0)), run, rt, {}, None,
                   [Measurement()])
        assert r.run() == "finished"
    finally:
        rt.close()
    quiet = json.loads((run / "windows" / f"s1-{silent}" / "boot-facts.json").read_text())
    assert set(quiet["facts"]) == {"node", "slurm_job", "slurm_cpus", "slurm_gpus"}  # the runtime's
    facts = json.loads((run / "windows" / "s1-ctx" / "boot-facts.json").read_text())
    assert facts["note"] == f"no boot fact in {whose}: not compared with the control"
    assert facts["diff_vs_control"]["equal"] == [] and facts["diff_vs_control"]["changed"] == {}
    journal = read_events(run / "journal.jsonl")
    ready = {e["window"]: str(format_event(e)) for e in journal if e["kind"] == EventKind.WINDOW_READY}
    assert ready["ctx"].endswith(" | no boot facts to compare with the control"), ready["ctx"]
    assert "equal" not in ready["ctx"]
    text = render(load_run(run), [], "no charts")
    assert "Boot facts: none in this window's log, so none compared with the control's." in text
    assert "none differs from the control's" not in text
