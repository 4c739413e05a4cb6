"""engine.campaign.spec: loading, line:col diagnostics, semantic checks, config_for and render_args."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from engine.campaign.spec import (
    DEFAULT_GREEDY_FILE,
    Campaign,
    Problem,
    SpecError,
    UnresolvedVariable,
    cmd_validate,
    expand,
    load_campaign,
    read_prompts,
    render_args,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "spec"
VALID = FIXTURES / "valid.yaml"

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
    assert load_campaign(write(tmp_path, BASE)).windows_in("s1") == ["control", "block5"]


def test_valid_campaign_loads(campaign: Campaign) -> None:
    assert campaign.name == "fixture-demo"
    assert campaign.source_path == VALID.resolve()
    assert campaign.source_text == VALID.read_text()
    assert campaign.windows_in("s1") == ["block5", "nodraft", "loglevel", "control"]
    assert campaign.window("q2").lossy is True
    assert campaign.docker.gpus == (0, 1)
    assert isinstance(campaign.windows, tuple)
    assert campaign.workload.requests_for(1) == 4 and campaign.workload.requests_for(8) == 16


def test_campaign_is_immutable(campaign: Campaign) -> None:
    with pytest.raises(ValidationError):
        campaign.name = "other"  # type: ignore[misc]
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
    assert campaign.prompts("inline") == ["Write a haiku.", "Name three rivers."]
    assert campaign.prompts("text") == ["First prompt.", "Second prompt."]
    assert campaign.prompts("jsonl") == ["A bare JSON string.", "An object prompt."]
    assert campaign.prompts("yaml") == ["One from YAML.", "Two from YAML."]
    assert campaign.prompts("json") == ["One from JSON."]
    later = campaign.prompts("later", {"PROMPTS_DIR": str(FIXTURES / "prompts")})
    assert later == ["First prompt.", "Second prompt."]


def test_cmd_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_validate(str(VALID)) == 0
    out = capsys.readouterr().out
    assert out == "OK: fixture-demo: 6 windows in 2 sessions, 6 classes x concurrency [1, 4], 2 reps\n"


def test_cmd_validate_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, edit(("reps: 3", "reps: 0"), ("name: demo", "name: Demo")))
    assert cmd_validate(str(path)) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:1:7: name: must match [a-z0-9][a-z0-9-]*, got 'Demo'",
        f"{path}:21:9: workload.reps: must be at least 1, got 0",
    ]


def test_cmd_validate_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "absent.yaml"
    assert cmd_validate(str(path)) == 2
    assert capsys.readouterr().err == (
        f"{path}:1:1: cannot read campaign file (No such file or directory)\n")


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
    ("{}", "has no 'prompts' or 'file'"),
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
        "16:8: session 's1' lists 'control'; every session boots it already"]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("[1, 4]", "[0, 4]", "20:17: workload.concurrency[0]: must be at least 1, got 0"),
    ("reps: 3", "reps: 0", "21:9: workload.reps: must be at least 1, got 0"),
    ("reps: 3", "reps: 3\nleak: {spread: 1.5}", "22:16: leak.spread: must be less than 1.0, got 1.5"),
    ("reps: 3", "reps: 3\nleak: {spread: 0}", "22:16: leak.spread: must be greater than 0.0, got 0"),
    ("name: demo", "name: -demo", "1:7: name: must match [a-z0-9][a-z0-9-]*, got '-demo'"),
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


# --- argv rendering and variables -------------------------------------------------------------


def test_render_args() -> None:
    args = {"-m": "${model}", "--n": 5, "--p": 0.5, "--metrics": True, "--off": False,
            "--gone": None, "--kv": ("a=${x}", 2)}
    assert render_args(args, {"model": "/m.gguf", "x": "1"}) == [
        "-m", "/m.gguf", "--n", "5", "--p", "0.5", "--metrics", "--kv", "a=1", "--kv", "2"]


def test_render_args_empty_list_and_order() -> None:
    assert render_args({"--b": [], "--a": "x"}, {}) == ["--a", "x"]


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
    assert c.greedy_prompts() == read_prompts(DEFAULT_GREEDY_FILE)
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
    (tmp_path / "oracle.json").write_text("{}")
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
