"""engine.campaign.sweep: a window entry with a list of values becomes a window per value, in the
sessions that name it (or one of its own), and every problem is reported where it was written."""

from pathlib import Path

import pytest
import yaml

from engine.campaign.dryrun import dry_run
from engine.campaign.load import SpecError, load_campaign
from engine.campaign.spec import Campaign
from engine.campaign.sweep import label
from engine.commands.validate import resolved_yaml

HEAD = """\
name: demo
server: llamacpp
runtime: process
process: {command: [llama-server]}
control:
  model: m.gguf
  args: {-m: "${model}", --spec-draft-n-max: 7}
workload:
  classes: {prose: {prompts: [hello]}}
  concurrency: [1]
  knobs: {reasoning_effort: high}
# the windows follow from line 12 on:
# (a sweep of block sizes, flags, env vars, models and knobs)
#
#
"""


def load(tmp_path: Path, text: str) -> Campaign:
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + text)
    return load_campaign(path)


def problems(tmp_path: Path, text: str) -> list[str]:
    """Each problem as ``line:col: message``, lines counted in HEAD + text."""
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + text)
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    return [f"{p.line}:{p.col}: {p.message}" for p in info.value.problems]


SWEEP = """\
windows:
  - name: block
    axis: draft block
    sweep:
      args: {--spec-draft-n-max: [5, 6, 8]}
  - name: noop
    change: {args: {--defrag-thold: 0.1}}
sessions:
  s1: [noop, block]
"""


def test_a_sweep_is_a_window_per_value_named_by_it_in_the_session_that_names_it(tmp_path: Path) -> None:
    c = load(tmp_path, SWEEP)
    assert [w.name for w in c.windows] == ["block-5", "block-6", "block-8", "noop"]
    assert c.windows_in("s1") == ["control", "noop", "block-5", "block-6", "block-8", "control-again"]
    w6 = c.window("block-6")
    assert (w6.sweep, w6.axis, w6.axes()) == ("block", "draft block: 6", ["args --spec-draft-n-max"])
    assert c.config_for("block-6").args["--spec-draft-n-max"] == 6
    assert [w.name for w in c.sweeps()["block"]] == ["block-5", "block-6", "block-8"]
    assert c.control_value("args --spec-draft-n-max") == 7


def test_a_sweep_no_session_names_gets_a_session_of_its_own(tmp_path: Path) -> None:
    c = load(tmp_path, """\
windows:
  - name: ub-size
    sweep: {args: {-ub: {small: 128, big: 512}}}
""")
    assert c.sessions == {"ub_size": ("ub-size-small", "ub-size-big")}
    assert c.window("ub-size-big").axis == "-ub 512"


def test_env_artifact_model_and_knob_sweeps(tmp_path: Path) -> None:
    c = load(tmp_path, """\
windows:
  - {name: threads, sweep: {env: {OMP_NUM_THREADS: [1, 2]}}}
  - {name: q, lossy: true, sweep: {model: [/m/SmolLM2.Q4_0.gguf, /m/SmolLM2.Q4_1.gguf]}}
  - {name: effort, sweep: {knobs: {reasoning_effort: [low, null]}}}
sessions:
  s1: [threads, q, effort]
""")
    names = [w.name for w in c.windows]
    assert names == ["threads-1", "threads-2", "q-smollm2-q4_0", "q-smollm2-q4_1", "effort-low",
                     "effort-none"]
    assert c.config_for("threads-2").env == {"OMP_NUM_THREADS": "2"}
    assert c.window("q-smollm2-q4_1").lossy
    assert c.knobs_for("effort-low") == {"reasoning_effort": "low"}
    assert c.knobs_for("effort-none") == {}  # null removes the workload's knob
    assert c.knobs_for("control") == {"reasoning_effort": "high"}


def test_labels() -> None:
    assert [label(v) for v in (5, 0.1, "q8_0", True, False, None, ["a", 2], "/x/Model.Q4_0.gguf")] == [
        "5", "0p1", "q8_0", "on", "off", "none", "a_2", "model-q4_0"]


def test_explain_shows_the_generated_windows_and_the_resolved_campaign_loads_the_same(tmp_path: Path) -> None:
    c = load(tmp_path, SWEEP)
    text = resolved_yaml(c)
    assert "name: block-8" in text and "sweep: block" in text
    again = tmp_path / "again.yaml"
    again.write_text(text)
    assert load_campaign(again).model_dump() == c.model_dump()


def test_dry_run_says_each_sweep_and_its_windows(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(HEAD + SWEEP)
    text = dry_run(str(tmp_path / "c.yaml"), "process", environ={}, testbed={})
    assert ("sweep block: args --spec-draft-n-max over 5, 6, 8 (the control's: 7): windows "
            "block-5, block-6, block-8") in text
    assert "[4] block-6: draft block: 6  (lossless: greedy + teacher-forced |dlogp|, sweep block)" in text
    assert "--spec-draft-n-max 6 " in text


def test_a_bad_value_is_reported_at_its_place_in_the_list(tmp_path: Path) -> None:
    # HEAD is 15 lines: `windows:` is line 16.
    assert problems(tmp_path, """\
windows:
  - name: block
    axis: 5
    sweep:
      args: {--spec-draft-n-max: [5, {a: 1}, 8]}
""") == ["18:11: windows[0].axis: expected a string, got 5",
         "20:38: windows[0].sweep.args.--spec-draft-n-max[1]: expected a string, number, "
         "true/false/null or a list of those, got a mapping"]


def test_sweep_entries_that_stand_for_no_window(tmp_path: Path) -> None:
    assert problems(tmp_path, """\
windows:
  - {name: two, sweep: {args: {-a: [1], -b: [2]}}}
  - {name: one, sweep: {env: {K: 3}}}
  - {name: both, sweep: {args: {-ub: [1]}, image: [a]}}
  - {name: what, sweep: {flags: {-x: [1]}}}
  - {name: same, sweep: {args: {-x: [a b, a-b]}}}
  - {name: chg, sweep: {args: {-x: [1, 2]}}, change: {args: {-y: 1}}}
sessions:
  s1: [two, one, both, what, same, chg]
""") == [
        "17:25: sweep 'two': sweep.args names exactly one key with its values, got 2",
        "18:34: sweep 'one': expected a list of values (or {label: value}), got 3",
        "19:18: sweep 'both' sweeps 2 keys; a sweep varies exactly one (a flag, an env var, an "
        "artifact, a knob, the image or the model)",
        "20:26: sweep 'what': 'flags' cannot be swept; a sweep varies one of args, env, "
        "artifacts, knobs, image, model",
        "21:43: sweep 'same': two values name the window 'same-a-b'; give {label: value} to name "
        "the windows yourself",
        "22:46: sweep 'chg': a sweep's windows change the swept key alone; give a change of its own "
        "window",
    ]


def test_windows_of_one_sweep_vary_one_axis_to_distinct_values(tmp_path: Path) -> None:
    assert problems(tmp_path, """\
windows:
  - {name: a, sweep: hand, change: {args: {-x: 1}}}
  - {name: b, sweep: hand, change: {args: {-y: 1}}}
  - {name: c, sweep: hand, change: {args: {-x: 1}}}
  - {name: d, sweep: a, change: {args: {-z: 1}}}
sessions:
  s1: [a, b, c, d, nothing]
""") == [
        "18:22: window 'b' changes args -y but window 'a' of the same sweep 'hand' changes args -x: "
        "a sweep varies one axis",
        "19:22: sweep 'hand': windows 'a' and 'c' set args -x to the same value",
        "20:22: sweep 'a' has the name of a window; a session listing it would mean either",
        "22:20: session 's1' names unknown window 'nothing'",
    ]


def test_a_default_session_that_is_taken_is_an_error_at_the_sweep(tmp_path: Path) -> None:
    assert problems(tmp_path, """\
windows:
  - {name: x, change: {args: {-x: 1}}}
  - {name: ub, sweep: {args: {-ub: [1, 2]}}}
sessions:
  ub: [x]
""") == ["18:12: sweep 'ub' is in no session, and the session it would get, 'ub', is taken: list "
         "it in a session"]


def test_a_generated_window_that_would_clash_is_a_duplicate_at_the_sweep(tmp_path: Path) -> None:
    found = problems(tmp_path, """\
windows:
  - {name: ub-1, change: {args: {-ub: 9}}}
  - {name: ub, sweep: {args: {-ub: [1, 2]}}}
sessions:
  s1: [ub-1, ub]
""")
    assert found[0].startswith("18:12: duplicate window name 'ub-1' (first at line 17)"), found


def test_schema_accepts_a_generator_as_written() -> None:
    from engine.campaign.spec import campaign_schema
    sweep = campaign_schema()["$defs"]["Window"]["properties"]["sweep"]
    assert {"type": "object"}.items() <= sweep["anyOf"][1].items()
    assert yaml.safe_load("{args: {-x: [1]}}")  # the shape the generator takes
