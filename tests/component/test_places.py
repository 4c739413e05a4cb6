"""Sessions in parallel on places (engine.run.runner's lanes) against a FAKE server.

The real Runner, phases, journal, fold, receipts, operator and ``ruler status`` run here; only the
servers are fakes (tests/component/fakes.py: an in-process stand-in for llama-server, and its runtime).
Where a test needs two windows up at once it holds each control's start (``FakeRuntime.start``,
called on the place's own thread, outside the journal's lock) until both places have started one:
the overlap is then certain, not a matter of timing. The same paths on real servers, Docker over
SSH are in tests/integration/test_places_live.py, Slurm in test_slurm_cluster.py.
"""

from __future__ import annotations

import copy
import csv
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.campaign.load import SpecError, load_campaign
from engine.campaign.spec import VerdictSpec
from engine.commands.progress import format_event
from engine.commands.status import format_summary, summary
from engine.context import RunContext, WindowContext
from engine.control import CommandRefused
from engine.quality import Quality
from engine.quality.drift import control_drift
from engine.record.events import EventKind
from engine.record.fold import fold
from engine.record.journal import Event, read_events
from engine.report import load_run, render
from engine.run.measure import Measurement
from engine.runtime.base import Host, LaunchError, LaunchPlan
from tests.campaigns import CTX, LEAKY, campaign
from tests.component.fakes import Behaviour, FakeRuntime, Hooks
from tests.component.helpers import WHO, events, runner

pytestmark = pytest.mark.timeout(60)
PLACES = [{"name": "a", "cpus": "0"}, {"name": "b", "cpus": "1"}]
TWO = {"s1": ["ctx"], "s2": ["ctx"]}


def two_places(name: str, places: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    spec = campaign(name, copy.deepcopy(CTX), dict(TWO), **kw)  # campaign() pops the axis
    spec["places"] = PLACES if places is None else places
    return spec


class Meet:
    """``FakeRuntime`` behaviour that holds each control's start until ``n`` have started: both
    places' first windows are then up together."""

    def __init__(self, n: int = 2, slow: dict[str, float] | None = None) -> None:
        self.barrier = threading.Barrier(n, timeout=20)
        self.slow = slow or {}

    def __call__(self, plan: LaunchPlan) -> Behaviour:
        session, _, window = plan.labels["ruler.window"].partition("-")
        if window == "control":
            self.barrier.wait()
        return Behaviour(tok_s=self.slow.get(session, Behaviour().tok_s))


@pytest.fixture
def meet_fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(Meet())
    yield runtime
    runtime.close()


def journal(run_dir: Path) -> list[Event]:
    return list(read_events(run_dir / "journal.jsonl"))


def up_at_once(run_dir: Path) -> int:
    """The most windows up at the same time, walking the journal in order."""
    up, most = set(), 0
    for e in journal(run_dir):
        key = f"{e.get('session')}-{e.get('window')}"
        if e["kind"] == EventKind.WINDOW_STARTED:
            up.add(key)
            most = max(most, len(up))
        elif e["kind"] in (EventKind.WINDOW_FINISHED, EventKind.WINDOW_REJECTED):
            up.discard(key)
    return most


def places_of(run_dir: Path) -> dict[str, str]:
    return {e["session"]: e["place"] for e in events(run_dir, "session_started")}


def csv_rows(run_dir: Path) -> dict[str, dict[str, str]]:
    """throughput.csv, by row key, without the measured figures (two runs never measure the same)."""
    figures = {"agg_tok_s", "per_user_tok_s", "ttft_ms", "decode_tok_s", "spread", "accept_len",
               "accept_rate", "status",  # ok or noisy: a spread, measured
               "delta", "delta_lo", "delta_hi", "achieved_rps", "goodput_rps", "whole_tok_s",
               "ramp_s", "steady_s", "tail_s", "spread_shape", "spread_why",
               *(f"{m}_{q}" for m in ("ttft", "itl", "tpot", "e2el") for q in ("p50", "p90", "p99", "mean"))}
    return {f"{r['session']}-{r['window']}/{r['class']}/c{r['concurrency']}":
            {k: v for k, v in r.items() if k not in figures}
            for r in csv.DictReader((run_dir / "throughput.csv").open())}


def test_sessions_interleave_on_two_places_and_record_as_a_sequential_run(
        tmp: Path, meet_fake: FakeRuntime) -> None:
    par = runner(tmp, two_places("par"), meet_fake, run_dir=tmp / "par")
    assert par.run() == "finished"
    seq_fake = FakeRuntime()
    try:
        seq = runner(tmp, campaign("par", copy.deepcopy(CTX), dict(TWO)), seq_fake, run_dir=tmp / "seq")
        assert seq.run() == "finished"
    finally:
        seq_fake.close()

    # Both controls were up at once, each session on its own place with that place's CPU set.
    assert up_at_once(par.run_dir) == 2 and up_at_once(seq.run_dir) == 1
    where = places_of(par.run_dir)
    assert sorted(where.values()) == ["a", "b"]
    cpus = {"a": "0", "b": "1"}
    for e in events(par.run_dir, "window_started"):
        assert e["plan"]["cpus"] == cpus[where[e["session"]]], e
    started = events(par.run_dir, "session_started")
    assert all(e["where"]["cpus"] == cpus[e["place"]] and e["host"]["cpus"] == 1 for e in started)
    # env.json says what each place is and which session it ran.
    env = json.loads((par.run_dir / "env.json").read_text())
    assert {p: v["sessions"] for p, v in env["places"].items()} == {
        p: [s for s, q in where.items() if q == p] for p in ("a", "b")}

    # The fold, throughput.csv and `ruler status` are the sequential run's, but for order.
    a, b = fold(journal(par.run_dir)), fold(journal(seq.run_dir))
    # A row's status is ok or noisy by its measured spread (two fake servers in one process
    # share its threads): the same kind of row, not the same word.
    assert {r.status for r in [*a.rows.values(), *b.rows.values()]} <= {"ok", "noisy"}
    assert {k: (r.attempt, sorted(r.reps[r.attempt]), r.files) for k, r in a.rows.items()} \
        == {k: (r.attempt, sorted(r.reps[r.attempt]), r.files) for k, r in b.rows.items()}
    assert {k: w.status for k, w in a.windows.items()} == {k: w.status for k, w in b.windows.items()}
    assert a.session_places == where and b.session_places == {}
    # And the noise between boots: each session is a block (a place's level is its sessions'), so
    # both runs measure it the same way, from the window booted in both sessions.
    judged = {"delta", "delta_lo", "delta_hi", "boot_noise", "boot_noise_how", "p_value",
              "p_adjusted", "verdict", "verdict_why"}
    pr, sr = csv_rows(par.run_dir), csv_rows(seq.run_dir)
    assert {k: {c: v for c, v in r.items() if c not in judged} for k, r in pr.items()} == \
        {k: {c: v for c, v in r.items() if c not in judged} for k, r in sr.items()}
    assert {r["boot_noise_how"].split(":")[0] for r in [*pr.values(), *sr.values()]} == {"measured"}
    keep = ("campaign", "status", "paused", "windows", "sessions", "ruler_suspect", "journal_damage")
    sa, sb = summary(par.run_dir), summary(seq.run_dir)
    assert {k: sa[k] for k in keep} == {k: sb[k] for k in keep}
    measured = [sum(s["rows"][k] for k in ("ok", "noisy")) for s in (sa, sb)]
    assert measured == [4, 4] and sa["rows"]["total"] == sb["rows"]["total"] == 4
    assert sa["sessions"] == []  # nothing is up once the run has finished


def test_parallel_one_runs_two_places_one_session_at_a_time(tmp: Path, fake: FakeRuntime) -> None:
    spec = two_places("one")
    spec["parallel"] = 1
    r = runner(tmp, spec, fake)
    assert r.run() == "finished"
    assert up_at_once(r.run_dir) == 1
    assert set(places_of(r.run_dir)) == {"s1", "s2"}
    assert set(places_of(r.run_dir).values()) <= {"a", "b"}
    assert {w.status for w in fold(journal(r.run_dir)).windows.values()} == {"done"}


def test_a_resumed_session_goes_on_on_the_place_it_began_on(tmp: Path, fake: FakeRuntime) -> None:
    """s1 begins on place b (the only place of the first engine) and is stopped in its control;
    resumed with places a and b, it goes on on b, and s2 takes a."""
    hooks = Hooks()
    first = runner(tmp, two_places("pin", places=[PLACES[1]]), fake, hooks)
    hooks.on(lambda e: first.controls.abort.set(), kind="rep_done", session="s1", window="control",
             rep=1)
    assert first.run() == "aborted"
    hooks.check()
    assert places_of(first.run_dir) == {"s1": "b"}

    second = runner(tmp, two_places("pin"), fake, run_dir=first.run_dir)
    assert second.run() == "finished"
    resumed = [e for e in journal(first.run_dir) if e["kind"] == "session_started"][1:]
    assert {e["session"]: e["place"] for e in resumed} == {"s1": "b", "s2": "a"}
    after = journal(first.run_dir)
    after = after[next(i for i, e in enumerate(after) if e["kind"] == "run_resumed"):]
    s1_windows = [e for e in after if e["kind"] == "window_started" and e["session"] == "s1"]
    assert [e["window"] for e in s1_windows] == ["control", "ctx"]
    assert all(e["plan"]["cpus"] == "1" for e in s1_windows)
    assert fold(after_all := journal(first.run_dir)).session_places == {"s1": "b", "s2": "a"}
    assert after_all[-1]["status"] == "finished"


def test_operator_commands_name_the_session_they_act_on(tmp: Path) -> None:
    """Both controls are held paused; `advance` alone is refused naming both sessions, `advance s2`
    ends s2's control only."""
    fake = FakeRuntime(Meet())
    hooks = Hooks()
    r = runner(tmp, two_places("ops"), fake, hooks)
    said: dict[str, Any] = {}

    def both_held(_: Event) -> None:
        if len([e for e in hooks.events if e["kind"] == "paused"]) < 2:
            return
        with pytest.raises(CommandRefused) as refused:
            r.command("advance", [], WHO)
        said["refused"] = str(refused.value)
        with pytest.raises(CommandRefused) as unknown:
            r.command("advance", ["s9"], WHO)
        said["unknown"] = str(unknown.value)
        said["advance"] = r.command("advance", ["s2"], WHO)
        said["status"] = format_summary(summary(r.run_dir))
        r.command("resume", ["s2"], WHO)
        r.command("resume", ["s1"], WHO)

    for s in ("s1", "s2"):
        hooks.on(lambda e: r.command("pause", [e["session"]], WHO), kind="window_ready", session=s,
                 window="control")
        hooks.on(both_held, kind="paused", session=s)
    try:
        assert r.run() == "finished"
    finally:
        fake.close()
    hooks.check()
    assert said["refused"] == "sessions s1, s2 run in parallel: say which (advance s1)"
    assert said["unknown"] == "session 's9' is not running; running: s1, s2"
    assert said["advance"].startswith("ending window s2/control;")
    st = fold(journal(r.run_dir))
    assert st.windows["s2-control"].status == "advanced"
    assert st.windows["s1-control"].status == "done"
    assert st.windows["s1-ctx"].status == st.windows["s2-ctx"].status == "done"
    # The journal says which session each command named.
    said_cmds = [(c["cmd"], c["args"]) for c in st.commands]
    assert sorted(said_cmds[:2]) == [("pause", ["s1"]), ("pause", ["s2"])]
    assert said_cmds[2:] == [("advance", ["s2"]), ("resume", ["s2"]), ("resume", ["s1"])]
    # `ruler status` while both were held listed each session on its place with its window.
    places = places_of(r.run_dir)
    for s in ("s1", "s2"):
        assert f"  session {s} on {places[s]}: window {s}-control measuring  shape {s}-control/prose/c2" \
            in said["status"], said["status"]


def test_an_error_on_one_place_aborts_the_other_and_is_raised(tmp: Path) -> None:
    s1_measuring = threading.Event()
    fake = FakeRuntime(Meet(slow={"s1": 40.0}))
    hooks = Hooks()
    hooks.on(lambda e: s1_measuring.set(), kind="rep_done", session="s1", window="control", rep=1)

    def boom(run: RunContext, ctx: WindowContext) -> None:
        if ctx.session == "s2":
            assert s1_measuring.wait(20)
            raise RuntimeError("boom on s2")

    r = runner(tmp, two_places("boom"), fake, hooks, phases=[boom, Measurement()])
    try:
        with pytest.raises(RuntimeError, match="boom on s2"):
            r.run()
    finally:
        fake.close()
    st = fold(journal(r.run_dir))
    assert st.status == "error" and st.error == "RuntimeError: boom on s2"
    assert st.windows["s1-control"].status == "aborted"
    assert not events(r.run_dir, "window_started", window="ctx")


def test_a_place_that_does_not_answer_fails_its_session_and_takes_no_more(
        tmp: Path, fake: FakeRuntime) -> None:
    spec = two_places("down", places=[*PLACES, {"name": "c", "cpus": "0"}])
    spec["sessions"] = {"s1": ["ctx"], "s2": ["ctx"], "s3": ["ctx"]}
    r = runner(tmp, spec, fake)
    down = FakeRuntime()
    down.unreachable = "docker host tcp://127.0.0.1:1 does not answer: connection refused"
    r.lanes[2].rt = down
    assert r.run() == "finished"
    st = fold(journal(r.run_dir))
    on_c = [s for s, p in st.session_places.items() if p == "c"]
    assert len(on_c) == 1, st.session_places  # the others went to the places that answer
    (lost,) = on_c
    for w in ("control", "ctx"):  # rejected with the place's answer, no start tried on a dead host
        ws = st.windows[f"{lost}-{w}"]
        assert (ws.status, ws.reason) == (
            "rejected", f"place c did not answer as its session began: {down.unreachable}")
    assert not events(r.run_dir, "window_started", session=lost)
    assert all(w.status == "done" for w in st.windows.values() if w.session != lost)
    (started,) = events(r.run_dir, "session_started", place="c")
    assert started["host"] == {"error": down.unreachable}
    env = json.loads((r.run_dir / "env.json").read_text())
    assert env["places"]["c"]["host"] == {"error": down.unreachable}


class SlowHost(FakeRuntime):
    """A FAKE place whose host takes its time to answer (a probe over ssh in flight): ``host()``
    holds until ``release`` is set, then says it did not answer."""

    def __init__(self) -> None:
        super().__init__()
        self.asked, self.release = threading.Event(), threading.Event()

    def host(self, node: str | None = None) -> Host:
        self.asked.set()
        assert self.release.wait(30)
        raise LaunchError("docker host ssh://ruler@10.0.0.7 does not answer: banner exchange timed out")


def test_status_never_names_a_finished_window_as_current_while_a_place_waits_on_its_host(
        tmp: Path, fake: FakeRuntime) -> None:
    """Place b's host does not answer while place a runs its session to the end: `ruler status`
    then has no current window (the window started last, a's, is over), and b's session is
    rejected with the place and its host's answer once that comes."""
    r = runner(tmp, two_places("slowhost"), fake)
    slow = SlowHost()
    r.lanes[1].rt = slow
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(r.run()), daemon=True)
    worker.start()
    try:
        assert slow.asked.wait(20)
        deadline = time.monotonic() + 30
        while True:
            st = fold(journal(r.run_dir))
            on_a = [s for s, p in st.session_places.items() if p == "a"]
            if on_a and all(st.windows[f"{on_a[0]}-{w}"].status == "done" for w in ("control", "ctx")):
                break
            assert time.monotonic() < deadline, st.windows
            time.sleep(0.05)
        now = summary(r.run_dir)
        assert now["current"]["window"] is None and now["sessions"] == [], now
        # Nothing in flight: no "now" (or "at") line naming a window.
        assert not [x for x in format_summary(now).splitlines() if x.split()[0] in ("now", "at")]
    finally:
        slow.release.set()
        worker.join(30)
    assert done == ["finished"]
    st = fold(journal(r.run_dir))
    (lost,) = [s for s, p in st.session_places.items() if p == "b"]
    assert {st.windows[f"{lost}-{w}"].reason for w in ("control", "ctx")} == {
        "place b did not answer as its session began: docker host ssh://ruler@10.0.0.7 does not "
        "answer: banner exchange timed out"}


def test_an_abort_during_a_start_ends_the_window_aborted_not_rejected(tmp: Path) -> None:
    """A start cut short by an abort (the place's host over ssh, its ssh killed) raises
    LaunchError: the window ends aborted, saying so, and no other window is started."""
    class CutStart(FakeRuntime):  # a FAKE whose start is cut short by the run's abort
        aborting: threading.Event

        def start(self, plan: LaunchPlan) -> Any:
            self.aborting.set()
            raise LaunchError("starting it on docker host ssh://h: cut short, the run is aborted")

    cut = CutStart()
    r = runner(tmp, two_places("cutstart", places=[PLACES[0]]), cut)
    cut.aborting = r.controls.abort
    assert r.run() == "aborted"
    st = fold(journal(r.run_dir))
    started = [k for k, w in st.windows.items() if w.status != "pending"]
    assert len(started) == 1, st.windows
    ws = st.windows[started[0]]
    assert (ws.status, ws.reason) == ("aborted", "operator abort during its start: starting it on "
                                                 "docker host ssh://h: cut short, the run is aborted")


def test_a_resume_goes_on_when_a_place_cannot_be_searched_for_strays(tmp: Path, fake: FakeRuntime) -> None:
    """A resume asks each place's runtime for the dead engine's servers: a place whose host does not
    answer is skipped (its session says why as it begins there), not the end of the run."""
    hooks = Hooks()
    first = runner(tmp, two_places("strays", places=[PLACES[1]]), fake, hooks)
    hooks.on(lambda e: first.controls.abort.set(), kind="rep_done", session="s1", window="control",
             rep=1)
    assert first.run() == "aborted"

    class NoStrays(FakeRuntime):  # a FAKE place whose host does not answer the stray search
        def stop_strays(self, run_id: str, dir_id: str, servers: Any) -> list[dict[str, object]]:
            raise LaunchError("docker host ssh://h does not answer (stopping the run's strays): refused")

    second = runner(tmp, two_places("strays"), fake, run_dir=first.run_dir)
    second.lanes[0].rt = NoStrays()
    assert second.run() == "finished"
    assert fold(journal(first.run_dir)).status == "finished"


def test_a_lone_place_that_does_not_answer_still_ends_every_session(tmp: Path) -> None:
    """With no other place to take them, the sessions are not left pending: each is rejected."""
    down = FakeRuntime()
    down.unreachable = "does not answer"
    r = runner(tmp, two_places("alone", places=[PLACES[0]]), down)
    assert r.run() == "finished"
    st = fold(journal(r.run_dir))
    assert {w.status for w in st.windows.values()} == {"rejected"}


def test_drift_compares_a_control_with_the_session_before_it_on_its_place(tmp: Path) -> None:
    """s3 ran on place a after s1, s2 on place b: s3's control is compared with s1's (ended on its
    place), never with s2's, which was still running elsewhere; s2 has no earlier one on b."""
    run = tmp / "drift"
    run.mkdir()
    with (run / "throughput.csv").open("w") as f:
        w = csv.writer(f)
        w.writerow(["session", "window", "class", "concurrency", "agg_tok_s", "spread", "status"])
        # The order rows landed in: s2's control ended first, on the other place.
        for session, tok in (("s2", 80.0), ("s1", 100.0), ("s3", 101.0)):
            w.writerow([session, "control", "prose", 1, tok, 0.01, "ok"])
    places = {"s1": "a", "s2": "b", "s3": "a"}
    rule = VerdictSpec().rule()
    drift = control_drift(run, ["s1", "s2", "s3"], places, rule, {})
    assert [(d["session"], d["against"], d["delta_pct"]) for d in drift] == [
        ("s3", "s1-control (place a)", 1.0)]
    # Without places, every session is compared with the one before it in the campaign.
    assert [(d["session"], d["against"]) for d in control_drift(run, ["s1", "s2", "s3"], {}, rule, {})] == [
        ("s2", "s1-control"), ("s3", "s2-control")]


BAD = """\
name: bad
server: llamacpp
runtime: process
process:
  command: [llama-server]
control:
  args: {-c: 2048}
windows:
  - name: ctx
    change:
      args: {-c: 4096}
sessions:
  s1: [ctx]
places:
  - name: a
    cpus: "0"
  - name: a
    cpus: "1"
  - name: remote
    docker_host: ssh://root@gpu-box
  - name: node1
    node: gpu-node-1
  - name: d
    cpus: "0-"
  - name: g
    gpus: 2
workload:
  classes:
    prose: {prompts: [hello]}
  concurrency: [1]
"""


def test_place_mistakes_are_named_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    assert [str(p).removeprefix(f"{path}:") for p in info.value.problems] == [
        "17:11: place 'a' is listed twice",
        "20:18: docker_host needs runtime docker (the campaign's is 'process')",
        "22:11: node needs runtime slurm (the campaign's is 'process')",
        "24:11: places[4].cpus: must be a CPU list like 0-3 or 0,2, got '0-'",
        "26:11: on runtime process a place's gpus is all or a list of device ids (they become the server's "
        "CUDA_VISIBLE_DEVICES)",
    ]


GPU_PLACES = """\
name: gpus
server: llamacpp
runtime: process
process:
  command: [llama-server]
control:
  args: {-c: 2048}
  env: {CUDA_VISIBLE_DEVICES: "0,1"}
windows:
  - name: ctx
    change:
      args: {-c: 4096}
sessions:
  s1: [ctx]
  s2: [ctx]
places:
  - {name: gpu0, gpus: [0]}
  - {name: gpu1, gpus: [1]}
workload:
  classes:
    prose: {prompts: [hello]}
  concurrency: [1]
"""


def test_a_process_place_runs_its_server_on_its_own_gpus_only(tmp_path: Path) -> None:
    from engine.campaign.launch import WindowStart, plan_launch
    from engine.run.gpuwatch import window_gpus
    from engine.servers import get_adapter

    path = tmp_path / "gpus.yaml"
    path.write_text(GPU_PLACES)
    campaign = load_campaign(path)
    for place in campaign.places:
        plan = plan_launch(campaign, get_adapter("llamacpp"),
                           WindowStart("process", "r.abcd", "s1", "ctx", place=place))
        # The place's ids win over the campaign's env: a session never reaches the other place's GPU.
        assert isinstance(place.gpus, tuple)
        assert plan.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, place.gpus))
        assert plan.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        sampled = window_gpus("process", plan, place)
        assert sampled.indices or sampled.none  # no NVML here: absent with its reason, never all GPUs
    from engine.campaign.dryrun import plan_text

    assert ("places: gpu0 (gpus 0), gpu1 (gpus 1); 2 sessions at once, each (its control, then its "
            "windows) on the first place free, in the order listed; the server's GPUs: gpu0 "
            "CUDA_VISIBLE_DEVICES=0, gpu1 CUDA_VISIBLE_DEVICES=1") in plan_text(campaign, None, {}, {})


def test_the_report_names_each_place_and_compares_controls_within_and_across_them(
        tmp: Path, fake: FakeRuntime) -> None:
    spec = two_places("report", concurrency=[1],
                      quality={"greedy": {"n": 2, "max_tokens": 8}, "teacher_forced": {"positions": 2}})
    spec["sessions"] = {"s1": ["ctx"], "s2": ["ctx"], "s3": ["ctx"]}
    r = runner(tmp, spec, fake, phases=[Measurement(), Quality()])
    assert r.run() == "finished"
    (r.run_dir / "campaign.yaml").write_text((tmp / "report.yaml").read_text())
    where = places_of(r.run_dir)
    (third,) = [s for s in ("s1", "s2") if where[s] == where["s3"]]  # s3 ran after it there

    # Each control was compared with the one before it on its own place, or with none.
    greedy = {s: json.loads((r.run_dir / "windows" / f"{s}-control" / "greedy.json").read_text())
              for s in ("s1", "s2", "s3")}
    assert (greedy["s1"]["reference"], greedy["s2"]["reference"]) == ("self", "self")
    assert greedy["s3"]["reference"] == f"{third}-control"
    drift = json.loads((r.run_dir / "drift.json").read_text())["rows"]
    assert [(d["session"], d["against"]) for d in drift] == [("s3", f"{third}-control (place {where['s3']})")]

    text = render(load_run(r.run_dir), [], "")
    for place in ("a", "b"):
        ran = ", ".join(s for s in ("s1", "s2", "s3") if where[s] == place)
        host = f"fake-{id(fake):x}, 1 CPUs, no GPU recorded"
        assert f"  - `{place}` (CPUs {dict(a='0', b='1')[place]}): {host}; ran {ran}." in text, text
    assert "### Control drift per place" in text
    assert f"| {where['s3']} | s3 | prose C1 |" in text and f"| {third}-control | " in text
    first = "s1"
    across = [s for s in ("s2", "s3") if where[s] != where[first]]
    assert "### Control drift across places" in text
    assert f"Δ vs {first}-control |" in text
    for s in across:
        assert f"| {where[s]} | {s} | prose C1 |" in text.split("### Control drift across places")[1]


def test_the_headless_line_of_a_session_names_its_place_and_machine() -> None:
    base = {"seq": 1, "ts": 0.0, "kind": "session_started", "session": "s2"}
    assert format_event(base) == "session s2"
    assert format_event({**base, "place": "b", "where": {"name": "b", "cpus": "1"},
                         "host": {"name": "vm", "cpus": 2}}) == "session s2 on b (cpus 1): vm, 2 CPUs"
    assert format_event({**base, "place": "down", "where": {"name": "down",
                                                            "docker_host": "tcp://127.0.0.1:1"},
                         "host": {"error": "docker host tcp://127.0.0.1:1 does not answer"}}) == (
        "session s2 on down (tcp://127.0.0.1:1): did not answer: docker host tcp://127.0.0.1:1 does "
        "not answer")


def test_a_pause_is_per_session_in_the_fold() -> None:
    """`resume s1` while s2 is still paused leaves the run paused (one flag for the run did not)."""
    from engine.record.fold import apply
    from engine.record.state import RunState

    st = RunState()
    seq = 0

    def command(cmd: str, *args: str) -> None:
        nonlocal seq
        seq += 1
        apply(st, {"seq": seq, "ts": float(seq), "kind": "command", "cmd": cmd, "args": list(args),
                   "who": {}, "reply": ""})

    command("pause", "s1")
    command("pause", "s2")
    command("resume", "s1")
    assert st.paused and st.paused_sessions == {"s2"}
    command("resume", "s2")
    assert not st.paused
    command("pause")  # naming none: one session at a time, or every one
    assert st.paused and st.paused_sessions == {""}
    command("resume")
    assert not st.paused and not st.paused_sessions


def test_a_rerun_for_a_place_done_with_its_sessions_boots_there_while_another_place_runs(
        tmp: Path) -> None:
    """Place a has run s1 (whose control row went void) and has no session left; place b still
    runs s2. The operator's rerun of s1's row boots s1's control again on a, its session's box
    (it does not wait for a place that has stopped taking work).

    In order, each step waiting on the one before: place a finds no session left; the rerun is
    queued; only then does s2's last window boot, so place b runs until the rerun is done or
    under way."""

    a_done, go = threading.Event(), threading.Event()
    hooks = Hooks()

    def behave(plan: LaunchPlan) -> Behaviour:
        if plan.labels["ruler.window"] == "s2-ctx":
            go.wait()  # place b holds here until the rerun is queued
        return Behaviour()

    fake = FakeRuntime(behave)
    replies: list[str] = []

    def server(window: str) -> Any:
        return next(s for s in fake.servers if s.plan.labels["ruler.window"] == window)

    # Rep 2 of s1's control fails (FAULT INJECTED: the fake answers its requests HTTP 500), so the
    # row is void whatever a busy host does to the reps' pace (a slowed rep read "noisy" there).
    def failing(_: Event) -> None:
        server("s1-control").behaviour.stream_status = 500

    def healthy(_: Event) -> None:
        server("s1-control").behaviour.stream_status = 200

    def rerun_once_a_is_done() -> None:
        a_done.wait()
        try:
            replies.append(r.command("rerun", ["s1-control/prose/c2"], WHO))
        except CommandRefused as e:  # said below, not a hang of place b
            replies.append(f"refused: {e}")
        finally:
            go.set()

    hooks.on(failing, kind="rep_done", session="s1", window="control", attempt=1, rep=1)
    hooks.on(healthy, kind="rep_done", session="s1", window="control", attempt=1, rep=2)
    # The leak rule off at this load: the row is void by its failed rep alone, and the rerun's
    # short reps (two requests at C2, on a fake sharing the host with place b) are never voided
    # by a hiccup of the host.
    spec = two_places("late", leak={**LEAKY, "min_concurrency": 64, "max_reruns": 0}, max_tokens=16)
    spec["sessions"] = {"s1": ["ctx"], "s2": ["ctx"]}
    operator = threading.Thread(target=rerun_once_a_is_done, daemon=True)
    try:
        r = runner(tmp, spec, fake, hooks)
        r._next_session = _pinned(  # type: ignore[method-assign]  # pinned places
            r, {"s1": "a", "s2": "b"}, none_left={"a": a_done})
        operator.start()
        assert r.run() == "finished"
    finally:
        go.set()
        fake.close()
    hooks.check()
    first = [(e["kind"], e.get("rep"), e.get("agg_tok_s"), e.get("steady_tok_s"), e.get("spread_why"))
             for kind in ("rep_done", "row_done")
             for e in events(r.run_dir, kind, session="s1", window="control")]
    assert replies and replies[0].startswith("queued s1-control/prose/c2"), (replies, first)
    reboot = events(r.run_dir, "window_reboot")
    assert [(e["session"], e["window"]) for e in reboot] == [("s1", "control")]
    # The rerun booted on place a (CPU set 0), s1's box, as the original did.
    plans = [s.plan for s in fake.servers if s.plan.labels["ruler.window"] == "s1-control"]
    assert len(plans) == 2 and plans[1].name.endswith("-rerun1"), plans
    assert [p.cpus for p in plans] == ["0", "0"]
    row = next(e for e in reversed(events(r.run_dir, "row_done")) if e["session"] == "s1"
               and e["window"] == "control")
    assert row["status"] in ("ok", "noisy") and row["attempts"] == 2, row["reason"]


def _pinned(r: Any, where: dict[str, str],
            none_left: dict[str, threading.Event] | None = None) -> Any:
    """Each session on the place named for it (the run's own choice is whichever place is free);
    ``none_left``: the event set when that place finds no session left for it."""
    def pick(lane: Any, pending: list[str]) -> str | None:
        with r._pick:
            mine = next((s for s in pending if where[s] == lane.name), None)
            if mine is not None:
                pending.remove(mine)
            elif done := (none_left or {}).get(lane.name):
                done.set()
            return mine
    return pick


def test_a_pause_takes_effect_per_session_in_the_fold() -> None:
    """`paused` (the engine waits between reps) held for the run: s1's pause in effect made the
    console say PAUSED for s2 too, and `resume s1` ended it for s2, still waiting."""
    from engine.record.fold import apply
    from engine.record.state import RunState

    st = RunState()
    seq = 0

    def event(kind: str, **fields: object) -> None:
        nonlocal seq
        seq += 1
        apply(st, {"seq": seq, "ts": float(seq), "kind": kind, **fields})

    def command(cmd: str, *args: str) -> None:
        event("command", cmd=cmd, args=list(args), who={}, reply="")

    def held(session: str) -> None:
        event("paused", session=session, window="control", **{"class": "prose"}, concurrency=1,
              attempt=1, rep=2)

    command("pause", "s1")
    command("pause", "s2")
    held("s1")
    assert st.held_sessions == {"s1"} and st.pause_held
    held("s2")
    command("resume", "s1")
    assert st.held_sessions == {"s2"} and st.pause_held and st.paused_sessions == {"s2"}
    command("resume", "s2")
    assert not st.pause_held and not st.paused
    command("pause")  # naming none: the session whose pause takes effect is the one
    held("s3")
    assert st.paused_sessions == st.held_sessions == {"s3"}
