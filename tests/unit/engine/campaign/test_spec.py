"""engine.campaign (spec, load, prompts, variables): loading, line:col diagnostics, semantic checks,
config_for and render_args."""

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from engine.campaign import defaults
from engine.campaign.dryrun import dry_run
from engine.campaign.launch import WindowStart, plan_launch
from engine.campaign.load import SpecError, load_campaign
from engine.campaign.prompts import RECEIPT_KEYS, read_prompts
from engine.campaign.sources import SOURCES, class_items
from engine.campaign.spec import Campaign, percent
from engine.campaign.variables import UnresolvedVariable, expand, render_args
from engine.campaign.yamlmarks import Problem
from engine.commands.cli import main
from engine.commands.validate import cmd_validate
from engine.record import results
from engine.run.passes import shape_files
from engine.servers import get_adapter
from engine.words import row_key
from tests.paths import FIXTURES

SPEC = FIXTURES / "spec"
VALID = SPEC / "valid.yaml"

# The smallest valid campaign; each malformed case edits it. Line numbers in the expected
# messages refer to this text (line 1 is `name: demo`).
BASE = """\
name: demo
server: llamacpp
runtime: process
process:
  command: [llama-server]
control:
  model: m.gguf
  args:
    -m: ${model}
    --spec-draft-n-max: 7
windows:
  - name: block5
    change:
      args: {--spec-draft-n-max: 5}
sessions:
  s1: [block5]
workload:
  classes:
    prose: {prompts: [hello]}
  concurrency: [1, 4]
  reps: 3
"""


def edit(*pairs: tuple[str, str]) -> str:
    text = BASE
    for old, new in pairs:
        assert text.count(old) == 1, old  # an edit must hit exactly one place
        text = text.replace(old, new)
    return text


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    """Every reported problem as `line:col: message` (the file prefix is checked once below)."""
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    assert all(p.file == str(path) for p in info.value.problems)
    return [str(p).removeprefix(f"{path}:") for p in info.value.problems]


# --- the valid campaign ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def campaign() -> Campaign:
    return load_campaign(VALID)


def test_base_is_valid(tmp_path: Path) -> None:
    # control_position both by default: the control again at the session's end
    assert load_campaign(write(tmp_path, BASE)).windows_in("s1") == ["control", "block5", "control-again"]


@pytest.mark.parametrize(("position", "order"), [("first", ["control", "block5"]),
                                                  ("last", ["block5", "control"]),
                                                  ("both", ["control", "block5", "control-again"])])
def test_control_position_orders_the_session(tmp_path: Path, position: str, order: list[str]) -> None:
    c = load_campaign(write(tmp_path, BASE + f"control_position: {position}\n"))
    assert c.windows_in("s1") == order
    again = c.config_for("control-again")
    assert again == c.config_for("control") and c.knobs_for("control-again") == c.knobs_for("control")


def test_the_verdict_section(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, BASE + "verdict: {error_rate: 0.01, correction: bh, margin: 0.02}\n"))
    rule = c.verdict.rule()
    assert (rule.error_rate, rule.correction, rule.margin, rule.boot_noise) == (0.01, "bh", 0.02, None)
    said = load_campaign(write(tmp_path, BASE + "verdict: {boot_noise: 0.03}\n")).verdict.rule()
    assert said.boot_noise == 0.03
    with pytest.raises(SpecError, match="correction"):
        load_campaign(write(tmp_path, BASE + "verdict: {correction: bonferroni}\n"))


def test_valid_campaign_loads(campaign: Campaign) -> None:
    assert campaign.name == "fixture-demo"
    assert campaign.source_path == VALID.resolve()
    assert campaign.source_text == VALID.read_text()
    assert campaign.windows_in("s1") == ["block5", "nodraft", "loglevel", "control"]
    assert campaign.window("q2").lossy is True
    assert campaign.docker.gpus == (0, 1)
    assert isinstance(campaign.windows, tuple)
    # Four requests a worker: two request cycles in the steady window (engine.method.steady).
    assert campaign.workload.requests_for(1) == 4 and campaign.workload.requests_for(8) == 32


def test_campaign_is_immutable(campaign: Campaign) -> None:
    with pytest.raises(ValidationError):
        campaign.name = "other"  # type: ignore[misc]  # frozen: the point of the test
    with pytest.raises(KeyError):
        campaign.window("nope")


def test_control_config(campaign: Campaign) -> None:
    control = campaign.config_for("control")
    assert control.model == "${testbed.models}/target.gguf"
    assert control.args == {"-m": "${model}", "-md": "${artifacts.drafter}",
                            "--spec-draft-n-max": 7, "--metrics": True,
                            "--override-kv": ("a=1", "b=2")}  # false flags dropped
    assert control.env == {"LLAMA_LOG": "info", "THREADS": "8"}  # numbers become strings
    assert control.image == "ruler-testbed/llama-server:0.3.36"
    assert control.command is None
    assert campaign.config_for("control", "process").command == ("${testbed.llama_server}",)


def test_config_for_applies_changes(campaign: Campaign) -> None:
    control = campaign.config_for("control")
    assert campaign.config_for("block5").args == {**control.args, "--spec-draft-n-max": 5}
    nodraft = campaign.config_for("nodraft").args  # null removes the flag
    assert "-md" not in nodraft and nodraft["-m"] == "${model}"
    assert campaign.config_for("loglevel").env == {"LLAMA_LOG": "debug", "THREADS": "8"}
    assert campaign.config_for("nothreads").env == {"LLAMA_LOG": "info"}
    assert campaign.config_for("q2").artifacts == {"drafter": "${testbed.models}/drafter-q2.gguf"}
    newbuild = campaign.config_for("newbuild", "docker")
    assert newbuild.image == "ruler-testbed/llama-server:0.4.0"
    assert newbuild.command == ("/usr/bin/llama-server",)
    assert campaign.config_for("block5").image == control.image  # untouched axes stay


def test_axes(campaign: Campaign) -> None:
    assert campaign.window("block5").axes() == ["args --spec-draft-n-max"]
    assert campaign.window("loglevel").axes() == ["env LLAMA_LOG"]
    assert campaign.window("q2").axes() == ["artifacts drafter"]
    assert campaign.window("newbuild").axes() == ["image", "command"]


def test_prompts(campaign: Campaign) -> None:
    def prompts(cls: str, variables: dict[str, str] | None = None) -> list[str]:
        items = class_items(campaign, cls, variables)
        assert all(i["max_tokens"] is None and len(i["messages"]) == 1 for i in items)
        return [i["messages"][0]["content"] for i in items]

    assert prompts("inline") == ["Write a haiku.", "Name three rivers."]
    assert prompts("text") == ["First prompt.", "Second prompt."]
    assert prompts("jsonl") == ["A bare JSON string.", "An object prompt."]
    assert prompts("yaml") == ["One from YAML.", "Two from YAML."]
    assert prompts("json") == ["One from JSON."]
    later = prompts("later", {"PROMPTS_DIR": str(SPEC / "prompts")})
    assert later == ["First prompt.", "Second prompt."]


def test_cmd_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_validate(str(VALID)) == 0
    out = capsys.readouterr().out
    assert out == "OK: fixture-demo: 6 windows in 2 sessions, 6 classes x concurrency [1, 4], 2 reps\n"


def test_cmd_validate_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, edit(("reps: 3", "reps: 0"), ("name: demo", "name: Demo")))
    assert cmd_validate(str(path)) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:1:7: name: must match [a-z0-9][a-z0-9_-]* (at most 64 characters; it names "
        "directories, files and containers), got 'Demo'",
        f"{path}:21:9: workload.reps: must be at least 1, got 0",
    ]


def test_cmd_validate_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "absent.yaml"
    assert cmd_validate(str(path)) == 2
    assert capsys.readouterr().err == (
        f"{path}:1:1: cannot read campaign file (No such file or directory)\n")


# --- slo.tpot_ms, and itl_ms: its old name, still read ----------------------------------------


OLD_SLO = BASE + "  slo: {ttft_ms: 500, itl_ms: 40}\n"  # line 22; itl_ms at column 23


def test_old_slo_key_reads_as_tpot_ms(tmp_path: Path) -> None:
    old = load_campaign(write(tmp_path, OLD_SLO)).workload.slo
    new = load_campaign(write(tmp_path, OLD_SLO.replace("itl_ms", "tpot_ms"))).workload.slo
    assert old == new
    assert (old.ttft_ms, old.tpot_ms) == (500, 40)


def test_the_slo_is_said_as_what_it_is_judged_against(tmp_path: Path) -> None:
    """slo.tpot_ms is judged against each request's TPOT: the dry run and the report say TPOT."""
    path = write(tmp_path, BASE + "  rate: [2]\n  slo: {ttft_ms: 500, tpot_ms: 40}\n")
    assert load_campaign(path).workload.slo.text() == "TTFT <= 500 ms, TPOT <= 40 ms"
    text = dry_run(str(path), "process", environ={}, testbed={})
    assert "goodput: requests a second within TTFT <= 500 ms, TPOT <= 40 ms" in text
    assert load_campaign(write(tmp_path, BASE)).workload.slo.text() == ""


def test_old_slo_key_warns_at_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, OLD_SLO)
    warning = (f"{path}:22:23: warning: slo.itl_ms is judged against each request's TPOT (the mean gap "
               "between its tokens after the first), not the itl_p* chunk gaps: write tpot_ms")
    assert cmd_validate(str(path)) == 0
    assert capsys.readouterr().err.splitlines() == [warning]
    assert warning in dry_run(str(path), "process", environ={}, testbed={}).splitlines()
    assert cmd_validate(str(write(tmp_path, OLD_SLO.replace("itl_ms", "tpot_ms")))) == 0
    assert capsys.readouterr().err == ""


def test_old_and_new_slo_key_together_is_refused(tmp_path: Path) -> None:
    text = OLD_SLO.replace("itl_ms: 40", "itl_ms: 40, tpot_ms: 40")
    assert problems(tmp_path, text) == ["22:8: workload.slo: give tpot_ms only: itl_ms is its old name"]


def test_a_bad_old_slo_key_is_shown_where_it_is_written(tmp_path: Path) -> None:
    assert problems(tmp_path, OLD_SLO.replace("40", "-1")) == [
        "22:31: workload.slo.itl_ms: must be greater than 0.0, got -1"]


def test_problem_str() -> None:
    assert str(Problem("c.yaml", 3, 5, "boom")) == "c.yaml:3:5: boom"


# --- malformed files: one problem each, exact position ------------------------------------


def test_unknown_top_level_key_suggests(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("runtime: process", "runtme: process"))) == [
        "3:1: unknown key 'runtme' at top level; did you mean 'runtime'?"]


def test_unknown_nested_key_suggests(tmp_path: Path) -> None:
    assert problems(tmp_path, BASE + "  max_tokns: 64\n") == [
        "22:3: unknown key 'max_tokns' in workload; did you mean 'max_tokens'?"]


def test_unknown_key_without_close_match(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("  model: m.gguf", "  model: m.gguf\n  zzz: 1"))) == [
        "8:3: unknown key 'zzz' in control"]


def test_unknown_key_in_list_item(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("    change:", "    lossy: false\n    lossey: true\n    change:"))) == [
        "14:5: unknown key 'lossey' in windows[0]; did you mean 'lossy'?"]


def test_misspelt_key_is_reported_with_a_suggestion(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("  reps: 3", "  reps_: 3"))) == [
        "21:3: unknown key 'reps_' in workload; did you mean 'reps'?",
    ]


def test_wrong_type_string_for_int(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("reps: 3", "reps: three"))) == [
        "21:9: workload.reps: expected an integer, got 'three'"]


def test_wrong_type_inside_list(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("[1, 4]", "[1, four]"))) == [
        "20:20: workload.concurrency[1]: expected an integer, got 'four'"]


def test_wrong_type_arg_value(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("--spec-draft-n-max: 7", "--spec-draft-n-max: {a: 1}"))) == [
        "10:25: control.args.--spec-draft-n-max: expected a string, number, true/false/null "
        "or a list of those, got a mapping"]


def test_bad_literal_suggests(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("server: llamacpp", "server: llamacp"))) == [
        "2:9: server: expected one of 'sglang', 'vllm' or 'llamacpp', got 'llamacp'; "
        "did you mean 'llamacpp'?"]


def test_zero_axis_window(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("{--spec-draft-n-max: 5}", "{}"))) == [
        "13:5: window 'block5' changes nothing; a window changes exactly one axis"]


TWO_AXES = ("      args: {--spec-draft-n-max: 5}",
            "      args: {--spec-draft-n-max: 5}\n      env: {B: x}")


def test_two_axis_window(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(TWO_AXES)) == [
        "13:5: window 'block5' changes 2 axes (args --spec-draft-n-max, env B); "
        "set multi_axis: true to allow it"]


def test_two_axis_window_allowed_by_multi_axis(tmp_path: Path) -> None:
    text = edit(TWO_AXES, ("    change:", "    multi_axis: true\n    change:"))
    window = load_campaign(write(tmp_path, text)).window("block5")
    assert window.axes() == ["args --spec-draft-n-max", "env B"]


def test_unknown_session_window(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("[block5]", "[block5, blok5]"))) == [
        "16:16: session 's1' names unknown window 'blok5'; did you mean 'block5'?"]


def test_window_named_control(tmp_path: Path) -> None:
    text = edit(("name: block5", "name: control"), ("[block5]", "[]"))
    assert problems(tmp_path, text) == [
        "12:11: 'control' is reserved and cannot name a window"]


def test_duplicate_window_names(tmp_path: Path) -> None:
    text = edit(("sessions:", "  - name: block5\n    change: {model: other.gguf}\nsessions:"))
    assert problems(tmp_path, text) == [
        "15:11: duplicate window name 'block5' (first at line 12)"]


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    assert problems(tmp_path, BASE + "  reps: 4\n") == [
        "22:3: duplicate key 'reps' (first at line 21)"]


def test_missing_prompt_file(tmp_path: Path) -> None:
    text = edit(("{prompts: [hello]}", "{file: prompts/none.txt}"))
    resolved = (tmp_path / "prompts" / "none.txt").resolve()
    assert problems(tmp_path, text) == [f"19:19: prompt file not found: {resolved}"]


def test_prompt_file_with_variable_is_not_checked(tmp_path: Path) -> None:
    text = edit(("{prompts: [hello]}", '{file: "${DATA}/none.txt"}'))
    assert load_campaign(write(tmp_path, text)).workload.classes["prose"].file == "${DATA}/none.txt"


@pytest.mark.parametrize(("value", "state"), [
    ("{}", f"has none of {', '.join(repr(k) for k in SOURCES)}"),
    ("{prompts: [a], file: b.txt}", "has both 'prompts' and 'file'"),
])
def test_class_needs_exactly_one_source(tmp_path: Path, value: str, state: str) -> None:
    assert problems(tmp_path, edit(("{prompts: [hello]}", value))) == [
        f"19:5: class 'prose' {state}; give exactly one"]


def test_yaml_syntax_error(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("server: llamacpp", "server llamacpp"))) == [
        "2:1: YAML syntax error: could not find expected ':'"]


def test_yaml_unclosed_flow(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("[1, 4]", "[1, 4"))) == [
        "21:7: YAML syntax error: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 20, column 16)"]


def test_missing_required_key(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("name: demo\n", ""))) == ["1:1: missing required key 'name'"]


def test_runtime_docker_without_image(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("runtime: process", "runtime: docker"))) == [
        "3:10: runtime 'docker' needs docker.image"]


@pytest.mark.parametrize(("runtime", "needs"), [
    ("attach", "attach.url"),
    ("auto", "docker.image or process.command"),
])
def test_runtime_needs_its_section(tmp_path: Path, runtime: str, needs: str) -> None:
    text = edit(("runtime: process\nprocess:\n  command: [llama-server]", f"runtime: {runtime}"))
    assert problems(tmp_path, text) == [f"3:10: runtime '{runtime}' needs {needs}"]


def test_window_in_no_session_and_twice_in_one(tmp_path: Path) -> None:
    text = edit(("[block5]", "[block5, block5]"),
                ("sessions:", "  - name: lonely\n    change: {model: x.gguf}\nsessions:"))
    assert problems(tmp_path, text) == [
        "15:11: window 'lonely' is in no session",
        "18:16: window 'block5' is listed twice in session 's1'",
    ]


def test_session_lists_control(tmp_path: Path) -> None:
    assert problems(tmp_path, edit(("[block5]", "[control, block5]"))) == [
        "16:8: session 's1' lists 'control'; every session boots the control already "
        "(control_position says where)"]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("[1, 4]", "[0, 4]", "20:17: workload.concurrency[0]: must be at least 1, got 0"),
    ("reps: 3", "reps: 0", "21:9: workload.reps: must be at least 1, got 0"),
    ("reps: 3", "reps: 3\nleak: {spread: 1.5}", "22:16: leak.spread: must be less than 1.0, got 1.5"),
    ("reps: 3", "reps: 3\nleak: {spread: 0}", "22:16: leak.spread: must be greater than 0.0, got 0"),
    ("reps: 3", "reps: 3\n  shard: {concurrency: 0}",
     "22:24: workload.shard.concurrency: must be at least 1, got 0"),
    ("reps: 3", "reps: 3\n  shard: {chunk_rate: -5}",
     "22:23: workload.shard.chunk_rate: must be greater than 0.0, got -5"),
    ("name: demo", "name: -demo", "1:7: name: must match [a-z0-9][a-z0-9_-]* (at most 64 "
     "characters; it names directories, files and containers), got '-demo'"),
])
def test_range_and_pattern_checks(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert problems(tmp_path, edit((old, new))) == [expected]


def test_empty_file(tmp_path: Path) -> None:
    assert problems(tmp_path, "") == ["1:1: campaign file is empty"]


def test_several_problems_all_reported(tmp_path: Path) -> None:
    text = edit(
        ("runtime: process", "runtime: docker"),
        ("  model: m.gguf", "  modle: m.gguf"),
        ("{--spec-draft-n-max: 5}", "{}"),
        ("[block5]", "[block5, nope]"),
        ("{prompts: [hello]}", "{file: gone.txt}"),
        ("[1, 4]", "[1, four]"),
        ("reps: 3", "reps: 3\n  reps: 4"),
    )
    assert problems(tmp_path, text) == [
        "3:10: runtime 'docker' needs docker.image",
        "7:3: unknown key 'modle' in control; did you mean 'model'?",
        "13:5: window 'block5' changes nothing; a window changes exactly one axis",
        "16:16: session 's1' names unknown window 'nope'",
        f"19:19: prompt file not found: {(tmp_path / 'gone.txt').resolve()}",
        "20:20: workload.concurrency[1]: expected an integer, got 'four'",
        "22:3: duplicate key 'reps' (first at line 21)",
    ]


@pytest.mark.parametrize(("fraction", "printed"), [
    (0.10, "10%"), (0.005, "0.5%"), (0.07, "7%"), (0.125, "12.5%"), (0.0001, "0.01%"), (0.3, "30%"),
])
def test_thresholds_print_with_the_digits_they_have(fraction: float, printed: str) -> None:
    """A 0.005 leak spread printed as "0%" by `:.0%`."""
    assert percent(fraction) == printed


# --- argv rendering and variables -------------------------------------------------------------


def test_render_args() -> None:
    args: dict[str, Any] = {"-m": "${model}", "--n": 5, "--p": 0.5, "--metrics": True, "--off": False,
            "--gone": None, "--kv": ("a=${x}", 2)}
    assert render_args(args, {"model": "/m.gguf", "x": "1"}) == [
        "-m", "/m.gguf", "--n", "5", "--p", "0.5", "--metrics", "--kv", "a=1", "--kv", "2"]


def test_render_args_empty_list_and_order() -> None:
    empty: dict[str, Any] = {"--b": [], "--a": "x"}
    assert render_args(empty, {}) == ["--a", "x"]


def test_render_args_unresolved_variable() -> None:
    with pytest.raises(UnresolvedVariable) as info:
        render_args({"-md": "${artifacts.drafter}"}, {"model": "m"})
    assert info.value.name == "artifacts.drafter"
    assert isinstance(info.value, KeyError)
    assert str(info.value) == "${artifacts.drafter}"


def test_expand() -> None:
    assert expand("${a}/${b.c}-${a}", {"a": "1", "b.c": "2"}) == "1/2-1"
    assert expand("no refs, $HOME and ${ left alone", {}) == "no refs, $HOME and ${ left alone"
    with pytest.raises(UnresolvedVariable):
        expand("${missing}", {})


# --- the quality section ----------------------------------------------------------------------


def test_quality_defaults_without_a_section(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, BASE))
    q = c.quality
    assert q.enabled and q.knobs_check and q.tool_probe is None
    assert (q.greedy.n, q.greedy.max_tokens, q.teacher_forced.top_k, q.kl.oracle) == (
        20, 48, 10, "control")
    assert len(c.greedy_prompts()) == 20  # ruler's own campaigns/prompts/greedy.txt
    assert c.greedy_prompts() == read_prompts(defaults.GREEDY_FILE)
    assert c.kl_texts() is None and c.oracle_receipt() is None
    assert c.quality_seed() == 1234


QUALITY = """\
quality:
  greedy: {prompts: [a, b, c], n: 2, max_tokens: 16, seed: 7}
  teacher_forced: {top_k: 5, positions: 3}
  kl: {file: texts.txt, top_k: 8, oracle: {receipt: oracle.json}}
  knobs_check: false
  tool_probe: {n: 4, tool_choice: required}
"""


def test_quality_section_loads(tmp_path: Path) -> None:
    (tmp_path / "texts.txt").write_text("one text\nanother text\n")
    (tmp_path / "oracle.json").write_text(json.dumps(dict.fromkeys(RECEIPT_KEYS, [])))  # read at validate
    c = load_campaign(write(tmp_path, BASE + QUALITY))
    assert c.greedy_prompts() == ["a", "b"] and c.quality_seed() == 7
    assert c.kl_texts() == ["one text", "another text"]
    assert c.oracle_receipt() == tmp_path.resolve() / "oracle.json"
    assert c.quality.tool_probe is not None and c.quality.tool_probe.tool_choice == "required"
    assert not c.quality.knobs_check


def test_quality_problems_are_all_reported(tmp_path: Path) -> None:
    text = BASE + QUALITY.replace("{receipt: oracle.json}", "oracel").replace(
        "{prompts: [a, b, c],", "{prompts: [a], file: none.txt,").replace("top_k: 5", "top_k: 0")
    missing = (tmp_path / "none.txt").resolve()
    texts = (tmp_path / "texts.txt").resolve()
    assert problems(tmp_path, text) == [
        "23:3: quality.greedy has both 'prompts' and 'file'; give one",
        f"23:32: prompt file not found: {missing}",
        "24:27: quality.teacher_forced.top_k: must be at least 1, got 0",
        f"25:14: prompt file not found: {texts}",
        "25:43: quality.kl.oracle: expected 'control' or {receipt: path}, got 'oracel'",
    ]


def test_quality_missing_receipt_and_misspelt_key(tmp_path: Path) -> None:
    (tmp_path / "texts.txt").write_text("x y\n")
    text = BASE + QUALITY.replace("knobs_check", "knob_check")
    assert problems(tmp_path, text) == [
        f"25:53: oracle receipt not found: {(tmp_path / 'oracle.json').resolve()}",
        "26:3: unknown key 'knob_check' in quality; did you mean 'knobs_check'?",
    ]


# --- names that become paths, container names and row keys -------------------------------------

SESSION_RULE = ("must match [a-z0-9][a-z0-9_]* (at most 64 characters; no '-', which joins "
                "session and window in directory and container names)")
NAME_RULE = ("must match [a-z0-9][a-z0-9_-]* (at most 64 characters; it names directories, files "
             "and containers)")


def test_session_name_with_a_space_is_refused(tmp_path: Path) -> None:
    """"Session 1" validated, then Docker rejected every window's container name."""
    assert problems(tmp_path, edit(("s1: [block5]", "Session 1: [block5]"))) == [
        f"16:3: sessions: key 'Session 1' {SESSION_RULE}"]


def test_session_and_window_that_join_to_one_directory_are_refused(tmp_path: Path) -> None:
    """`s1` + `x-y` and `s1-x` + `y` both made windows/s1-x-y: one window never ran."""
    text = edit(("  - name: block5\n", "  - name: x-y\n    change: {model: a.gguf}\n"
                                       "  - name: y\n    change: {model: b.gguf}\n  - name: block5\n"),
                ("s1: [block5]", "s1: [block5, x-y]\n  s1-x: [y]"))
    assert problems(tmp_path, text) == [f"21:3: sessions: key 's1-x' {SESSION_RULE}"]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("prose: {prompts", "../x: {prompts", f"19:5: workload.classes: key '../x' {NAME_RULE}"),
    ("prose: {prompts", "Prose: {prompts", f"19:5: workload.classes: key 'Prose' {NAME_RULE}"),
    ("s1: [block5]", "../s: [block5]", f"16:3: sessions: key '../s' {SESSION_RULE}"),
    ("s1: [block5]", ".hidden: [block5]", f"16:3: sessions: key '.hidden' {SESSION_RULE}"),
    ("name: demo", "name: a/b", f"1:7: name: {NAME_RULE}, got 'a/b'"),
    ("name: demo", "name: " + "d" * 65, f"1:7: name: {NAME_RULE}, got '{'d' * 65}'"),
    ("s1: [block5]", "s" * 65 + ": [block5]", f"16:3: sessions: key '{'s' * 65}' {SESSION_RULE}"),
    ("  model: m.gguf", "  model: m.gguf\n  artifacts: {'a}b': x.gguf}",
     "8:15: control.artifacts: key 'a}b' must match [A-Za-z0-9_][A-Za-z0-9_.-]* (at most 64 "
     "characters; ${artifacts.NAME} must be able to spell it)"),
    ("  model: m.gguf", "  model: m.gguf\n  env: {'A=B': x}",
     "8:9: control.env: key 'A=B' must match [A-Za-z_][A-Za-z0-9_]* (at most 64 characters; "
     "an environment variable name)"),
    ("reps: 3", "reps: 3\npass_env: [HF TOKEN]",
     "22:12: pass_env[0]: must match [A-Za-z_][A-Za-z0-9_]* (at most 64 characters; an environment "
     "variable name), got 'HF TOKEN'"),
])
def test_names_that_are_not_safe_in_paths_are_refused(tmp_path: Path, old: str, new: str,
                                                      expected: str) -> None:
    assert problems(tmp_path, edit((old, new))) == [expected]


def test_window_name_like_a_rerun_container_is_reserved(tmp_path: Path) -> None:
    """Window `block5` rebooted for a rerun runs as container ...-block5-rerun1."""
    text = edit(("name: block5", "name: block5-rerun1"), ("[block5]", "[block5-rerun1]"))
    assert problems(tmp_path, text) == [
        "12:11: window 'block5-rerun1': a name ending in -rerun<N> is reserved (a window booted "
        "again for a rerun gets that suffix on its container's name)"]


def test_names_with_underscores_and_dashes_load(tmp_path: Path) -> None:
    text = edit(("name: demo", "name: demo_2"), ("name: block5", "name: block-5_b"),
                ("[block5]", "[block-5_b]"), ("s1:", "day_1:"), ("prose:", "long-prose_2:"))
    c = load_campaign(write(tmp_path, text))
    assert (c.name, list(c.sessions), list(c.workload.classes)) == (
        "demo_2", ["day_1"], ["long-prose_2"])


# --- size, depth and aliases ---------------------------------------------------------------------


def test_billion_laughs_is_refused_at_once(tmp_path: Path) -> None:
    """Nine levels of nine aliases: PyYAML would build 9**9 values (2 GB in 30 s before)."""
    bomb = "  knobs:\n    l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
    assert problems(tmp_path, BASE + bomb) == [
        "23:35: aliases repeat more than 10000 values; a campaign needs a few (write the values out)"]


def test_too_many_aliases_are_refused(tmp_path: Path) -> None:
    text = BASE + "  knobs:\n    a: &a 1\n" + "".join(f"    k{i}: *a\n" for i in range(101))
    assert problems(tmp_path, text) == [
        "124:11: more than 100 aliases; a campaign needs a few at most (write the values out)"]


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    text = BASE + "  knobs: {x: " + "[" * 5000 + "]" * 5000 + "}\n"
    assert problems(tmp_path, text) == ["22:43: nested more than 32 levels deep"]


def test_nesting_through_aliases_is_refused(tmp_path: Path) -> None:
    deep = "[" * 20 + "1" + "]" * 20
    text = BASE + f"  knobs:\n    a: &a {deep}\n    b: &b [{'[' * 19}*a{']' * 19}]\n"
    assert problems(tmp_path, text) == ["23:21: nested more than 32 levels deep (through aliases)"]


def test_anchors_and_merges_for_a_shared_block_load(tmp_path: Path) -> None:
    text = edit(("    change:\n      args: {--spec-draft-n-max: 5}",
                 "    change: &five\n      args: {--spec-draft-n-max: 5}\n"
                 "  - name: six\n    change:\n      <<: *five\n      model: six.gguf\n"
                 "      args: {--spec-draft-n-max: 6}\n    multi_axis: true"),
                ("[block5]", "[block5, six]"))
    c = load_campaign(write(tmp_path, text))
    assert c.window("six").axes() == ["args --spec-draft-n-max", "model"]
    assert c.config_for("six").args["--spec-draft-n-max"] == 6


def test_a_campaign_over_1_mib_is_refused(tmp_path: Path) -> None:
    text = BASE + "# " + "x" * (1 << 20) + "\n"
    assert problems(tmp_path, text) == [
        "1:1: campaign file is larger than 1024 KiB; a campaign is a few (prompts belong in prompt files)"]


def test_a_campaign_that_is_not_utf8_names_the_place(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(edit(("s1: [block5]", "s1: [block5]  # caf\xe9")).encode("latin-1"))
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    assert [str(p) for p in info.value.problems] == [
        f"{path}:16:22: not UTF-8 text (byte 0xe9); save the file as UTF-8"]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("reps: 3", "reps: 3\n  knobs: {a: \"\x07\"}",
     "22:15: character #x0007 is not allowed in YAML (special characters are not allowed)"),
    ("reps: 3", "reps: " + "9" * 5000,
     "21:9: cannot read value '9999999999999999999999999999999999999999' (Exceeds the limit "
     "(4300 digits) for integer string conversion: value has 5000 digits)"),
    ("reps: 3", "reps: 0x" + "f" * 5000,
     "21:9: workload.reps: must be at most 1000, got an integer of 20000 bits"),
    ("reps: 3", "reps: 3\n  knobs: {day: 2024-02-30}",
     "22:16: cannot read value '2024-02-30' (day is out of range for month)"),
])
def test_values_python_cannot_hold_are_problems_not_tracebacks(tmp_path: Path, old: str, new: str,
                                                              expected: str) -> None:
    assert problems(tmp_path, edit((old, new))) == [expected]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("reps: 3", "reps: 3\n  knobs: {a: !!int }", "22:14: cannot read value '' as !!int"),
    ("reps: 3", "reps: 3\n  knobs: {a: !!bool maybe}", "22:14: cannot read value 'maybe' as !!bool"),
    ("reps: 3", "reps: 3\n  knobs: {a: !!timestamp soon}", "22:14: cannot read value 'soon' as !!timestamp"),
])
def test_tagged_values_pyyaml_cannot_build_are_problems(tmp_path: Path, old: str, new: str,
                                                        expected: str) -> None:
    assert problems(tmp_path, edit((old, new))) == [expected]


def test_lines_are_counted_as_an_editor_counts_them(tmp_path: Path) -> None:
    """YAML also breaks lines at U+0085 and U+2028; an editor does not, nor does `grep -n`."""
    text = edit(("name: demo", "name: demo  # caf\x85 \u2028"), ("reps: 3", "reps: 0"))
    assert problems(tmp_path, text) == ["21:9: workload.reps: must be at least 1, got 0"]


# --- numeric bounds ------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("reps: 3", "reps: 3\ntimeouts: {request: .inf}",
     "22:21: timeouts.request: must be a finite number, got .inf"),
    ("reps: 3", "reps: 3\ntimeouts: {boot: .nan}", "22:18: timeouts.boot: must be a finite number, got .nan"),
    ("reps: 3", "reps: 3\ntimeouts: {window: 1.0e+9}",
     "22:20: timeouts.window: must be at most 604800.0, got 1000000000.0"),
    ("reps: 3", "reps: 3\ntimeouts: {window: -1}",
     "22:20: timeouts.window: must be greater than 0.0, got -1"),
    ("reps: 3", "reps: 3\nleak: {spread: .nan}", "22:16: leak.spread: must be a finite number, got .nan"),
    ("reps: 3", "reps: 3\nleak: {max_reruns: 1000}", "22:20: leak.max_reruns: must be at most 100, got 1000"),
    ("reps: 3", "reps: 1000000", "21:9: workload.reps: must be at most 1000, got 1000000"),
    ("[1, 4]", "[1, 100000]", "20:20: workload.concurrency[1]: must be at most 4096, got 100000"),
    ("reps: 3", "reps: 3\n  max_tokens: 0", "22:15: workload.max_tokens: must be at least 1, got 0"),
    ("reps: 3", "reps: 3\n  requests_per_rep: 1000000",
     "22:21: workload.requests_per_rep: must be at most 100000, got 1000000"),
    ("reps: 3", "reps: 3\n  sampling: {temperature: .inf}",
     "22:27: workload.sampling.temperature: must be a finite number, got .inf"),
    ("reps: 3", "reps: 3\n  sampling: {seed: 18446744073709551616}",
     "22:20: workload.sampling.seed: must be less than 9223372036854775808, got 18446744073709551616"),
])
def test_bounds_are_finite_and_positive(tmp_path: Path, old: str, new: str, expected: str) -> None:
    """`request: .inf` validated, then every request failed with "no usage in the stream"."""
    assert problems(tmp_path, edit((old, new))) == [expected]


def test_every_non_finite_knob_is_reported(tmp_path: Path) -> None:
    text = edit(("reps: 3", "reps: 3\n  knobs: {min_p: .inf, nested: [1, -.inf]}"))
    assert problems(tmp_path, text) == [
        "22:18: workload.knobs.min_p: must be a finite number, got .inf (requests are JSON)",
        "22:36: workload.knobs.nested[1]: must be a finite number, got -.inf (requests are JSON)"]



@pytest.mark.parametrize(("old", "new", "expected"), [
    ("concurrency: [1, 4]", "rate: [4, 4.0000001]",
     "20:13: workload.rate[1]: 4.0000001 and workload.rate[0] (4) are one row, r4 (a row names its "
     "rate to six significant digits): give rates that differ in them"),
    ("concurrency: [1, 4]", "rate: [2.5, 1, 2.5]", "20:18: workload.rate[2]: 2.5 and workload.rate[0] "
     "(2.5) are one row, r2.5: give each load once"),
    ("concurrency: [1, 4]", "rate:\n    - 3\n    - 3.0", "22:7: workload.rate[1]: 3.0 and "
     "workload.rate[0] (3) are one row, r3: give each load once"),
    ("[1, 4]", "[4, 1, 4]", "20:23: workload.concurrency[2]: 4 and workload.concurrency[0] (4) are "
     "one row, c4: give each load once"),
])
def test_loads_that_share_a_row_label_are_refused(tmp_path: Path, old: str, new: str,
                                                  expected: str) -> None:
    """`rate: [4, 4.0000001]` validated, then measured one row: both passes wrote r4's receipts."""
    assert problems(tmp_path, edit((old, new))) == [expected]



@pytest.mark.parametrize(("old", "new", "expected"), [
    ("runtime: process", "runtime: process\nplaces: [{name: a, cpus: '\u0663'}]",
     "4:26: places[0].cpus: must be a CPU list like 0-3 or 0,2, got '\u0663'"),
    ("runtime: process", "runtime: process\nplaces: [{name: a, cpus: '0-\uff13'}]",
     "4:26: places[0].cpus: must be a CPU list like 0-3 or 0,2, got '0-\uff13'"),
    ("runtime: process", "runtime: process\nslurm: {time: '\u0661\u0660'}",
     "4:15: slurm.time: must be a Slurm time limit (minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED), "
     "got '\u0661\u0660'"),
    ("runtime: process", "runtime: process\nslurm: {time: '1-\u0661:00'}",
     "4:15: slurm.time: must be a Slurm time limit (minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED), "
     "got '1-\u0661:00'"),
], ids=["cpus-arabic-indic", "cpus-fullwidth", "time-arabic-indic", "time-days"])
def test_digits_are_ascii_digits(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
                                 expected: str) -> None:
    """Python's \\d and int() take any script's digits; taskset and sbatch take 0-9 only."""
    path = write(tmp_path, edit((old, new)))
    assert ruler(capsys, "validate", str(path)) == (2, "", f"{path}:{expected}\n")



@pytest.mark.parametrize(("old", "new", "expected"), [
    ("concurrency: [1, 4]", "rate: [1e9]", "20:10: workload.rate[0]: expected a number, got '1e9' "
     "(YAML reads 1e9 as a string: write 1.0e+9, a dot in the number and a sign in the exponent)"),
    ("concurrency: [1, 4]", "rate: [2.5E1]", "20:10: workload.rate[0]: expected a number, got "
     "'2.5E1' (YAML reads 2.5E1 as a string: write 2.5E+1, a dot in the number and a sign in the exponent)"),
    ("reps: 3", "reps: 3\ntimeouts: {window: 3.6e3}", "22:20: timeouts.window: expected a number, got "
     "'3.6e3' (YAML reads 3.6e3 as a string: write 3.6e+3, a dot in the number and a sign in the exponent)"),
    ("[1, 4]", "[1, 1e2]", "20:20: workload.concurrency[1]: expected an integer, got '1e2' (YAML reads "
     "1e2 as a string: write 100)"),
])
def test_a_number_yaml_reads_as_a_string_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                old: str, new: str, expected: str) -> None:
    """PyYAML reads a number in exponent form only with a dot and a signed exponent (1.0e+9):
    `1e9` and `1.0e9` are strings, and "expected a number, got '1e9'" left the user guessing."""
    path = write(tmp_path, edit((old, new)))
    assert ruler(capsys, "validate", str(path)) == (2, "", f"{path}:{expected}\n")



def test_a_knob_yaml_reads_as_a_string_is_warned_of(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A knob takes any JSON value, so `min_p: 1e-3` validated and every request sent "1e-3"."""
    path = write(tmp_path, edit(("reps: 3", "reps: 3\n  knobs: {min_p: 1e-3, stop: [x, 2e1], tag: '1e9'}")))
    assert ruler(capsys, "validate", str(path)) == (0, "OK: demo: 1 window in 1 session, 1 class x "
                                                       "concurrency [1, 4], 3 reps\n", (
        f"{path}:22:18: warning: workload.knobs.min_p is the string '1e-3' (YAML reads 1e-3 as a "
        "string: write 1.0e-3, a dot in the number and a sign in the exponent)\n"
        f"{path}:22:34: warning: workload.knobs.stop[1] is the string '2e1' (YAML reads 2e1 as a "
        "string: write 2.0e+1, a dot in the number and a sign in the exponent)\n"))



PLACES_ON_ONE_BOX = """\
places:
  - {name: a, cpus: "0-3"}
  - {name: b, cpus: "4,5"}
  - {name: c, cpus: "3,5-7"}
  - {name: d, cpus: "0", docker_host: "ssh://ruler@box2"}
  - {name: e, cpus: "0-1", docker_host: "ssh://ruler@box3"}
"""


def test_places_on_the_same_cpus_are_warned_of(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two places on one CPU set validated without a word: their sessions, run at once, load each
    other. Places on another machine (docker_host) share no CPU, nor do places used one at a time."""
    text = edit(("runtime: process", "runtime: docker\ndocker: {image: x}"),
                ("sessions:", PLACES_ON_ONE_BOX + "sessions:"))
    path = write(tmp_path, text)
    shared = ": sessions on both run at once, each on the other's CPUs (set parallel: 1 to run one at a time)"
    assert ruler(capsys, "validate", str(path))[::2] == (0, (
        f"{path}:19:21: warning: places a and c share CPU 3{shared}\n"
        f"{path}:19:21: warning: places b and c share CPU 5{shared}\n"))
    path = write(tmp_path, text.replace("box3", "box2").replace('"0-3"', '"0-2"').replace('"4,5"', '"4"'))
    assert ruler(capsys, "validate", str(path))[::2] == (
        0, f"{path}:21:21: warning: places d and e share CPU 0{shared}\n")
    assert ruler(capsys, "validate", str(write(tmp_path, text + "parallel: 1\n")))[::2] == (0, "")


# --- prompt files are read at validate ------------------------------------------------------------


def class_file(tmp_path: Path, name: str, data: bytes) -> list[str]:
    """The problems of BASE with the class's prompts in `name`, holding `data`."""
    (tmp_path / name).write_bytes(data)
    return problems(tmp_path, edit(("{prompts: [hello]}", f"{{file: {name}}}")))


@pytest.mark.parametrize(("name", "data", "problem"), [
    ("p.txt", b"", "no prompts: the file is empty"),
    ("p.txt", b"\n  \n\t\n", "no prompts: the file is empty"),
    ("p.txt", b"first prompt\ncaf\xe9 au lait\n", "2: not UTF-8 text (byte 0xe9 at column 4)"),
    ("p.jsonl", b'"one"\n{"prompt": "two"}\n{"prompt": \n', "3: not JSON (Expecting value, column 12)"),
    ("p.jsonl", b'"one"\n{"text": "two"}\n', "2: expected a JSON string or {\"prompt\": ...}"),
    ("p.jsonl", b'"one"\n"  "\n', "2: an empty prompt"),
    ("p.yaml", b"- one\n- two\n- {three: 3}\n", "3: item 3 is a mapping, not a string"),
    ("p.yaml", b"prompts: [one]\n", "expected a list of strings, got a mapping"),
    ("p.yaml", b"- one\n- [unclosed\n", "3: YAML syntax error: expected ',' or ']', but got '<stream end>' "
                                          "(while parsing a flow sequence at line 2, column 3)"),
    ("p.json", b'["one",\n 2]', "item 2 is 2, not a string"),
    ("p.json", b'["one",\n ', "2: not JSON (Expecting value, column 2)"),
    ("p.json", b"[]", "no prompts"),
])
def test_prompt_files_are_read_at_validate(tmp_path: Path, name: str, data: bytes, problem: str) -> None:
    """An empty file ran to rows of 0.0 tok/s; a non-UTF-8 one died mid-run with a traceback."""
    path = (tmp_path / name).resolve()
    sep = ":" if problem[0].isdigit() else ": "  # `path:line: problem` where a line is known
    assert class_file(tmp_path, name, data) == [f"19:19: prompt file {path}{sep}{problem}"]


def test_quality_prompt_files_are_read_at_validate(tmp_path: Path) -> None:
    (tmp_path / "greedy.txt").write_text("")
    (tmp_path / "texts.txt").write_bytes(b"ok\n\xff\n")
    text = BASE + "quality:\n  greedy: {file: greedy.txt}\n  kl: {file: texts.txt}\n"
    assert problems(tmp_path, text) == [
        f"23:18: prompt file {(tmp_path / 'greedy.txt').resolve()}: no prompts: the file is empty",
        f"24:14: prompt file {(tmp_path / 'texts.txt').resolve()}:2: not UTF-8 text (byte 0xff at column 1)",
    ]


# --- properties: whatever the input, a Campaign or located problems ------------------------------

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
YAMLISH = st.lists(st.sampled_from(
    ["\n", " ", "  ", "- ", ": ", ":", "[", "]", "{", "}", ", ", "&a ", "*a", "<<: ", "!!int ",
     "!!str ", "!!binary ", "'", '"', "#", "? ", "|", ">", "---", "...", "%YAML 1.1", "\\", "\t",
     ".inf", ".nan", "-1", "0x1f", "1e9", "2024-02-30", "yes", "null", "~", "name", "sessions",
     "windows", "workload", "s1", "block5", "\x00", "\x85", "\ufeff", "é"]), max_size=60).map("".join)
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
           | st.integers(min_value=2**63 - 2, max_value=2**70))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8) | st.sampled_from(["args", "file", "n"]),
                                        inner, max_size=4), max_leaves=12)


def base_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(BASE)
    return data


def paths_of(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths_of(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths_of(item, (*path, i))
    return out


def load_or_problems(path: Path) -> Campaign | None:
    """The loader's whole contract: a Campaign, or a SpecError whose problems lie in the file."""
    lines = path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n") + 1
    try:
        return load_campaign(path)
    except SpecError as exc:
        assert exc.problems
        for p in exc.problems:
            assert p.file == str(path) and p.message
            assert 1 <= p.line <= lines and p.col >= 1, p
        return None


@SETTINGS
@given(text=st.text() | YAMLISH | st.binary().map(lambda b: b.decode("latin-1")))
def test_any_text_gives_a_campaign_or_located_problems(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
        load_or_problems(path)


@SETTINGS
@given(data=st.data(), insert=YAMLISH | st.text(max_size=10))
def test_any_edit_of_a_campaign_gives_a_campaign_or_located_problems(data: st.DataObject,
                                                                     insert: str) -> None:
    at = data.draw(st.integers(0, len(BASE)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_text(BASE[:at] + insert + BASE[at:])
        load_or_problems(path)


@SETTINGS
@given(data=st.data(), value=VALUES)
def test_any_value_anywhere_gives_a_campaign_or_located_problems(data: st.DataObject,
                                                                 value: Any) -> None:
    raw = base_data()
    path = data.draw(st.sampled_from(paths_of(raw)[1:]))
    extra = data.draw(st.sampled_from(["", "knobs", "leak", "timeouts", "quality", "docker"]))
    parent = raw
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    if extra == "knobs" and isinstance(raw["workload"], dict):
        raw["workload"]["knobs"] = value
    elif extra:  # also a value in a section BASE leaves out
        raw[extra] = value
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "c.yaml"
        file.write_text(yaml.safe_dump(raw, allow_unicode=True))
        load_or_problems(file)


PATHS = st.text(max_size=12) | st.sampled_from(["\x00", "x" * 5000, "/", ".", "..", "/dev/null", "/proc"])


@pytest.mark.slow
@SETTINGS
@given(cls=PATHS, greedy=PATHS, kl=PATHS, receipt=PATHS)
def test_any_file_path_gives_a_campaign_or_located_problems(cls: str, greedy: str, kl: str,
                                                            receipt: str) -> None:
    raw = base_data()
    raw["workload"]["classes"]["prose"] = {"file": cls}
    raw["quality"] = {"greedy": {"file": greedy}, "kl": {"file": kl, "oracle": {"receipt": receipt}}}
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "c.yaml"
        file.write_text(yaml.safe_dump(raw, allow_unicode=True))
        load_or_problems(file)


NAMES = (st.text(max_size=70) | st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,8}", fullmatch=True)
         | st.sampled_from(["", ".", "..", "../x", "a/b", "a b", "A", "s1", "s1-x", "x-y", "y",
                            "control", "x-rerun1", "x-rerun", "x.y", "-x", "_x", "x_y", "é"]))


@SETTINGS
@given(sessions=st.lists(NAMES, min_size=1, max_size=3), windows=st.lists(NAMES, min_size=1, max_size=3),
       classes=st.lists(NAMES, min_size=1, max_size=3), name=NAMES)
def test_names_that_validate_are_safe_to_join(sessions: list[str], windows: list[str],
                                              classes: list[str], name: str) -> None:
    """Every directory, receipt, row key and container a valid campaign names is its own."""
    raw = base_data()
    raw["name"] = name
    raw["windows"] = [{"name": w, "change": {"model": f"{i}.gguf"}} for i, w in enumerate(windows)]
    raw["sessions"] = {s: list(windows) for s in sessions}
    raw["workload"]["classes"] = {c: {"prompts": ["hello"]} for c in classes}
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "c.yaml"
        file.write_text(yaml.safe_dump(raw, allow_unicode=True))
        campaign = load_or_problems(file)
        if campaign is None:
            return
        run = Path(tmp) / "run"
        (run / "windows").mkdir(parents=True)
        adapter = get_adapter(campaign.server)
        dirs, keys, files, containers = set(), set(), set(), set()
        for session in campaign.sessions:
            for window in campaign.windows_in(session):
                wdir = results.window_dir(run, session, window)
                assert wdir.resolve().parent == (run / "windows").resolve()
                dirs.add(wdir.name)
                for tag in ("", "-rerun1", "-rerun12"):
                    start = WindowStart("process", "r", session, window, tag=tag)
                    plan = plan_launch(campaign, adapter, start)
                    assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+", plan.name), plan.name
                    containers.add(plan.name)
                for cls in campaign.workload.classes:
                    for c in (1, 12):
                        keys.add(row_key(session, window, cls, c))
                        for attempt, rep in ((1, 1), (1, "warm"), (2, "warm2"), (12, 3)):
                            rep_file = shape_files(wdir, cls, c, attempt, rep)
                            assert rep_file.resolve().parent == (wdir / "reps").resolve()
                            files.add(rep_file.relative_to(run))
        n_windows = sum(len(campaign.windows_in(s)) for s in campaign.sessions)
        n_classes = len(campaign.workload.classes)
        assert len(dirs) == n_windows
        assert len(containers) == 3 * n_windows
        assert len(keys) == n_windows * n_classes * 2
        assert len(files) == n_windows * n_classes * 2 * 4


# --- the command line: exit 2 and file:line:col, and `ruler run` claims no directory ---------------


def ruler(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`ruler ARGS` in-process, as `python -m engine` runs it: (exit code, stdout, stderr)."""
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


LAUGHS = "  knobs:\n    l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))


@pytest.mark.parametrize(("text", "files", "expected"), [
    (edit(("s1: [block5]", "Session 1: [block5]")), {}, f"16:3: sessions: key 'Session 1' {SESSION_RULE}"),
    (edit(("prose: {prompts", "../x: {prompts")), {}, f"19:5: workload.classes: key '../x' {NAME_RULE}"),
    (edit(("s1: [block5]", "s1-x: [block5]")), {}, f"16:3: sessions: key 's1-x' {SESSION_RULE}"),
    (BASE + LAUGHS, {}, "23:35: aliases repeat more than 10000 values; a campaign needs a few "
                        "(write the values out)"),
    (BASE + "  knobs: " + "[" * 3000 + "]" * 3000 + "\n", {}, "22:40: nested more than 32 levels deep"),
    (BASE + "#" * (1 << 20), {}, "1:1: campaign file is larger than 1024 KiB; a campaign is a few "
                                 "(prompts belong in prompt files)"),
    (BASE + "timeouts: {request: .inf}\n", {}, "22:21: timeouts.request: must be a finite number, got .inf"),
    (edit(("{prompts: [hello]}", "{file: p.txt}")), {"p.txt": b""},
     "19:19: prompt file {dir}/p.txt: no prompts: the file is empty"),
    (edit(("{prompts: [hello]}", "{file: p.txt}")), {"p.txt": b"one\ntwo \xff\n"},
     "19:19: prompt file {dir}/p.txt:2: not UTF-8 text (byte 0xff at column 5)"),
], ids=["session-space", "class-traversal", "session-dash", "billion-laughs", "deep", "over-1-mib",
        "inf-timeout", "empty-prompts", "non-utf8-prompts"])  # short ids: pytest puts them in the env
def test_cli_validate_exits_2_with_file_line_col(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 text: str, files: dict[str, bytes], expected: str) -> None:
    path = write(tmp_path, text)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert ruler(capsys, "validate", str(path)) == (
        2, "", f"{path}:{expected.format(dir=tmp_path.resolve())}\n")


def test_cli_run_refuses_a_session_docker_would_reject_and_claims_no_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, "Session 1" validated, every window was rejected by Docker and the run exited 0."""
    path = write(tmp_path, edit(("s1: [block5]", "Session 1: [block5]")))
    assert ruler(capsys, "run", str(path), "--headless", "--results-dir", str(tmp_path / "results")) == (
        2, "", f"{path}:16:3: sessions: key 'Session 1' {SESSION_RULE}\n")
    assert not (tmp_path / "results").exists()


def test_cli_run_reads_a_variable_prompt_file_before_claiming_a_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A ${...} prompt file can only be read by the run: an empty one is bad input, no stub run."""
    (tmp_path / "data").mkdir()
    prompts = tmp_path / "data" / "p.txt"
    prompts.write_bytes(b"")
    path = write(tmp_path, edit(("{prompts: [hello]}", '{file: "${PROMPTS}/p.txt"}')))
    monkeypatch.setenv("PROMPTS", str(tmp_path / "data"))
    assert ruler(capsys, "run", str(path), "--headless", "--results-dir", str(tmp_path / "results")) == (
        2, "", f"{path}: prompt file {prompts}: no prompts: the file is empty\n")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("keys", "expected"), [
    # 6e9 arrival times would be drawn before the rep starts.
    ("  rate: [10000]\n  rep_seconds: 604800\n",
     "22:10: rate 10000 req/s for rep_seconds 604800 is 6048000000 arrivals a rep; at most 100000 "
     "(shorten rep_seconds or lower the rate)"),
    ("  rate: [5, 20000.0]\n  rep_seconds: 10\n",
     "22:13: workload.rate[1]: must be at most 10000.0, got 20000.0"),
    # Every rep would send nothing, and print rows of 0 tok/s.
    ("  rep_seconds: 1.0e-300\n", "22:16: workload.rep_seconds: must be at least 0.001, got 1e-300"),
    # Every window would wait out its timeout for four arrivals.
    ("  rate: [1.0e-300]\n", "22:10: workload.rate[0]: must be at least 0.01, got 1e-300"),
    ("  rate: [0.01]\n  requests_per_rep: 100000\n",
     "22:10: rate 0.01 req/s sends its 100000 requests a rep over 1e+07 s; at most 604800 (a week): "
     "raise the rate or send fewer requests"),
    # Every arrival at t=0: gaps of gamma shape 1e-5 are 0 in floating point.
    ("  rate: [5]\n  burstiness: 1.0e-5\n", "23:15: workload.burstiness: must be at least 0.01, got 1e-05"),
    # A capacity search over rates probes rates between its range's ends: each end is a rate the
    # search may send at, bound as a rate is.
    ("  rep_seconds: 3600\n  capacity: {range: [1, 5000], holds: {ttft_p99_ms: 500}}\n",
     "23:25: workload.capacity.range[1]: rate 5000 req/s for rep_seconds 3600 is 18000000 arrivals "
     "a rep; at most 100000 (shorten rep_seconds or lower the rate)"),
    ("  capacity: {range: [1.0e-300, 10], holds: {ttft_p99_ms: 500}}\n",
     "22:22: workload.capacity.range[0]: a rate of at least 0.01 req/s, got 1e-300"),
])
def test_a_rate_or_rep_length_that_measures_nothing_or_fills_memory_is_refused(
        tmp_path: Path, keys: str, expected: str) -> None:
    assert problems(tmp_path, BASE + keys) == [expected]


def test_the_smallest_sane_rates_and_reps_validate(tmp_path: Path) -> None:
    keys = "  rate: [0.01, 10000]\n  rep_seconds: 10\n  burstiness: 0.01\n"
    c = load_campaign(write(tmp_path, BASE + keys))
    assert c.workload.requests_at(10000) == 100_000


def test_a_fixed_list_with_every_item_refused_is_said_once_not_a_traceback(tmp_path: Path) -> None:
    # The checks read the model of what the schema accepted: both ends refused leave the range
    # with no item, which the schema then says is missing (engine.campaign.checks.draft).
    keys = "  capacity: {range: [w1, w1], holds: {ttft_p99_ms: 500}}\n"
    assert problems(tmp_path, BASE + keys) == [
        "22:22: workload.capacity.range[0]: expected a number, got 'w1'",
        "22:26: workload.capacity.range[1]: expected a number, got 'w1'",
    ]


@pytest.mark.parametrize(("pair", "expected"), [
    (("  command: [llama-server]", "  command: 0"), "5:12: process.command: expected a list, got 0"),
    (("  s1: [block5]", "  s1: 0"), "16:7: sessions.s1: expected a list, got 0"),
    (("  - name: block5", "  - name: [block5]"), "12:11: windows[0].name: expected a string, got a list"),
])
def test_a_value_the_schema_refused_is_said_once_not_again_by_a_check(
        tmp_path: Path, pair: tuple[str, str], expected: str) -> None:
    # The checks read what the schema accepted: a refused process.command is not also a runtime
    # without one, a refused session list leaves no window "in no session", a refused window
    # name no session naming an unknown window.
    assert problems(tmp_path, edit(pair)) == [expected]
