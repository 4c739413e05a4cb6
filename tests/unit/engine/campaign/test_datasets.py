"""Dataset and generated classes (engine.campaign.sources): ShareGPT and JSONL records read, a
category picked, a seeded sample drawn the same every time, output lengths from the data, every
bad record an error at its file:line (and `ruler validate` exit 2), the shared-prefix generator,
and what `--explain` says a class becomes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.campaign.load import SpecError, load_campaign
from engine.campaign.prompts import DataFileError
from engine.campaign.sources import SOURCES, class_items
from engine.campaign.sources.dataset import DatasetSpec
from engine.campaign.sources.explain import class_lines, shared_prefix_fraction
from engine.campaign.sources.shared_prefix import WORDS, SharedPrefixSpec
from engine.campaign.spec import Campaign
from engine.commands.validate import cmd_validate
from engine.record import results
from engine.run.runner import frozen_items
from tests.campaigns import campaign

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "campaigns" / "data"


def sharegpt_record(human: str, reply: str = "", system: str | None = None, **extra: Any) -> dict[str, Any]:
    turns = ([{"from": "system", "value": system}] if system else []) + [{"from": "human", "value": human}]
    if reply:
        turns.append({"from": "gpt", "value": reply})
    return {"conversations": turns, **extra}


def load(tmp_path: Path, classes: dict[str, Any], **workload: Any) -> Campaign:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes=classes, **workload),
                                   sort_keys=False))
    return load_campaign(path)


def items(tmp_path: Path, **spec: Any) -> list[Any]:
    return SOURCES["dataset"].items(DatasetSpec(**spec), tmp_path / spec["file"])


def test_sharegpt_records_become_their_system_and_first_human_turn(tmp_path: Path) -> None:
    data = [sharegpt_record("Name a sea.", "The Baltic Sea, to the north.", system="Be brief."),
            sharegpt_record("Say hi.", "Hi!", output_tokens=5),
            sharegpt_record("No reply yet."),
            {"conversations": [{"from": "human", "value": "Two turns."}, {"from": "gpt", "value": "a"},
                               {"from": "human", "value": "Later turn."}, {"from": "gpt", "value": "b"}]}]
    (tmp_path / "d.json").write_text(json.dumps(data, indent=1))
    got = items(tmp_path, file="d.json")
    assert got[0] == {"messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "Name a sea."}],
                      "max_tokens": 8}  # 29 characters of reply, 4 a token, rounded up
    assert got[1]["max_tokens"] == 5  # the record's own count wins over the estimate
    assert got[2]["max_tokens"] is None  # nothing to go by: the workload's max_tokens
    assert got[3]["messages"] == [{"role": "user", "content": "Two turns."}]  # the first exchange only
    assert [i["max_tokens"] for i in items(tmp_path, file="d.json", output="workload")] == [None] * 4


def test_jsonl_records_take_a_prompt_or_messages_and_their_output_length(tmp_path: Path) -> None:
    lines: list[dict[str, Any]] = [{"prompt": "One.", "output_tokens": 3, "kind": "a"},
             {"messages": [{"role": "system", "content": "S."}, {"role": "user", "content": "Two."}],
              "len": 9, "kind": "b"},
             {"prompt": "Three.", "kind": "a"}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    got = items(tmp_path, file="d.jsonl", output_field="len", category_field="kind", category="b")
    assert got == [{"messages": lines[1]["messages"], "max_tokens": 9}]
    assert [i["max_tokens"] for i in items(tmp_path, file="d.jsonl")] == [3, None, None]


def test_a_sample_is_seeded_the_same_every_time_and_another_seed_draws_another(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"prompt": f"P{i}."}) + "\n" for i in range(40)))
    one = items(tmp_path, file="d.jsonl", sample=10, seed=3)
    assert one == items(tmp_path, file="d.jsonl", sample=10, seed=3)
    assert len({i["messages"][0]["content"] for i in one}) == 10
    assert one != items(tmp_path, file="d.jsonl", sample=10, seed=4)
    everything = items(tmp_path, file="d.jsonl")
    assert [i["messages"][0]["content"] for i in everything] == [f"P{i}." for i in range(40)]


def test_the_example_datasets_read_and_the_generator_writes_them_as_shipped(tmp_path: Path) -> None:
    assert len(items(DATA, file="chat-sharegpt.json")) == 24
    code = items(DATA, file="requests.jsonl", category="code")
    assert len(code) == 8 and all(i["max_tokens"] for i in code)
    import runpy

    shipped = {p.name: p.read_bytes() for p in DATA.glob("*.json*")}
    runpy.run_path(str(DATA / "generate.py"), run_name="__main__")
    assert {p.name: p.read_bytes() for p in DATA.glob("*.json*")} == shipped


BAD_JSONL = [
    ('{"prompt": "ok"}\n{"prompt": \n', 2, "not JSON"),
    ('{"prompt": "ok"}\n[1, 2]\n', 2, "a record is a list, not an object"),
    ('{"prompt": "ok"}\n{"text": "x"}\n', 2, 'has neither "prompt" and "messages"'),
    ('{"prompt": "a", "messages": []}\n', 1, 'has both "prompt" and "messages"'),
    ('{"prompt": "  "}\n', 1, "prompt must be a non-empty string"),
    ('\n\n{"messages": [{"role": "robot", "content": "x"}]}\n', 3, "messages[0] must be"),
    ('{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}\n', 1,
     "must end with a user message"),
    ('{"prompt": "a", "output_tokens": 0}\n', 1, "output_tokens must be a whole number of tokens"),
    ('{"prompt": "a", "output_tokens": true}\n', 1, "output_tokens must be a whole number"),
    ('{"prompt": "a", "output_tokens": 2.5}\n', 1, "output_tokens must be a whole number"),
    ('{"prompt": "a", "category": [1]}\n', 1, "category must be a string"),
]


@pytest.mark.parametrize(("text", "line", "problem"), BAD_JSONL)
def test_a_bad_jsonl_record_is_an_error_at_its_line(tmp_path: Path, text: str, line: int,
                                                     problem: str) -> None:
    (tmp_path / "d.jsonl").write_text(text)
    with pytest.raises(DataFileError) as err:
        items(tmp_path, file="d.jsonl")
    assert str(err.value).startswith(f"{tmp_path / 'd.jsonl'}:{line}: "), err.value
    assert problem in str(err.value)


BAD_SHAREGPT = [
    ('{"conversations": []}', 1, "expected a JSON list"),
    ("[]", 1, "no records"),
    ('[\n {"conversations": [{"from": "human", "value": "a"}]},\n 7\n]', 3, "a record is 7, not an object"),
    ('[\n {"conversations": [{"from": "human", "value": "a"}]},\n\n {"turns": []}\n]', 4,
     'needs "conversations"'),
    ('[\n {"conversations": [{"from": "gpt", "value": "a"}]}\n]', 2, "no human turn"),
    ('[\n {"conversations": [{"from": "alien", "value": "a"}]}\n]', 2, "is from 'alien'"),
    ('[\n {"conversations": [{"from": "human", "value": 3}]}\n]', 2, "conversations[0] must be"),
    ('[\n {"conversations": [{"from": "human", "value": "a"}]},\n {"conversations": [}\n]', 3, "not JSON"),
    ('[\n {"conversations": [{"from": "human", "value": "a"}]}\n] x', 3, "text after the list"),
    ('[\n {"conversations": [{"from": "human", "value": "a"}], "output_tokens": -1}\n]', 2,
     "output_tokens must be"),
]


@pytest.mark.parametrize(("text", "line", "problem"), BAD_SHAREGPT)
def test_a_bad_sharegpt_record_is_an_error_at_its_line(tmp_path: Path, text: str, line: int,
                                                        problem: str) -> None:
    (tmp_path / "d.json").write_text(text)
    with pytest.raises(DataFileError) as err:
        items(tmp_path, file="d.json")
    assert str(err.value).startswith(f"{tmp_path / 'd.json'}:{line}: "), err.value
    assert problem in str(err.value)


def test_a_category_or_sample_the_file_cannot_give_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "category": "x"}\n{"prompt": "b", "category": "y"}\n')
    with pytest.raises(DataFileError, match=r"no record has category 'z' \(the file has 'x', 'y'\)"):
        items(tmp_path, file="d.jsonl", category="z")
    with pytest.raises(DataFileError, match=r"sample 2 is more than the 1 records of category 'x'"):
        items(tmp_path, file="d.jsonl", category="x", sample=2)


def test_validate_names_the_damaged_record_and_exits_2(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b", "output_tokens": "many"}\n')
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={
        "data": {"dataset": {"file": "d.jsonl"}}}), sort_keys=False))
    with pytest.raises(SpecError) as err:
        load_campaign(path)
    (problem,) = err.value.problems
    assert f"dataset file {tmp_path / 'd.jsonl'}:2: output_tokens must be" in str(problem)
    assert cmd_validate(str(path)) == 2
    assert f"{tmp_path / 'd.jsonl'}:2: output_tokens" in capsys.readouterr().err


def test_a_class_takes_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="has both 'prompts' and 'dataset'; give exactly one"):
        load(tmp_path, {"x": {"prompts": ["a"], "dataset": {"file": "d.jsonl"}}})
    with pytest.raises(SpecError, match="dataset.*sample"):
        load(tmp_path, {"x": {"dataset": {"file": "d.jsonl", "sample": 0}}})


def test_a_dataset_class_freezes_into_items_json_and_the_plain_ones_stay_in_prompts_json(
        tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "output_tokens": 4}\n')
    c = load(tmp_path, {"plain": {"prompts": ["p"]}, "data": {"dataset": {"file": "d.jsonl"}}})
    run = tmp_path / "run"
    run.mkdir()
    frozen = frozen_items(c, run, {})
    assert json.loads((run / results.PROMPTS).read_text()) == {"plain": ["p"]}
    assert json.loads((run / results.ITEMS).read_text()) == {"data": frozen["data"]}
    assert frozen["data"] == [{"messages": [{"role": "user", "content": "a"}], "max_tokens": 4}]
    (tmp_path / "d.jsonl").write_text('{"prompt": "changed"}\n')
    assert frozen_items(c, run, {}) == frozen  # a resume sends what the run started with


def test_shared_prefix_groups_share_their_system_prompt_and_lengths_are_words() -> None:
    spec = SharedPrefixSpec(groups=3, prompts_per_group=4, system_tokens=50, question_tokens=10,
                            output_tokens=6, seed=5)
    got = SOURCES["shared_prefix"].items(spec, None)
    assert got == SOURCES["shared_prefix"].items(spec, None)  # seeded
    assert len(got) == 12 and {i["max_tokens"] for i in got} == {6}
    systems = [i["messages"][0]["content"] for i in got]
    assert len(set(systems)) == 3 and all(systems.count(s) == 4 for s in systems)
    assert {len(s.split()) for s in systems} == {50}
    assert {len(i["messages"][1]["content"].split()) for i in got} == {10}
    assert all(w in WORDS for i in got for m in i["messages"] for w in m["content"].split())
    assert [systems[k] for k in range(4)] != [systems[0]] * 4  # shuffled: a group's not in a row
    unshared = SOURCES["shared_prefix"].items(
        SharedPrefixSpec(groups=12, prompts_per_group=1, system_tokens=50, question_tokens=10), None)
    assert shared_prefix_fraction(got) > 0.7 > 0.1 > shared_prefix_fraction(unshared)


def test_too_many_generated_prompts_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="groups x prompts_per_group is 1000000 prompts"):
        load(tmp_path, {"x": {"shared_prefix": {"groups": 1000, "prompts_per_group": 1000,
                                                 "system_tokens": 1, "question_tokens": 1}}})


def test_explain_says_what_a_class_becomes(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text("".join(
        json.dumps({"prompt": " ".join(["w"] * n), **({"output_tokens": n} if n > 2 else {})}) + "\n"
        for n in (1, 2, 3, 4, 10)))
    c = load(tmp_path, {"data": {"dataset": {"file": "d.jsonl"}}}, max_tokens=16)
    lines = class_lines("data", "dataset", class_items(c, "data"), 16)
    assert lines == ["data: dataset, 5 requests of 1 message",
                     "  prompt words: p50 3, p90 10, max 10",
                     "  answers: exactly their own lengths, tokens p50 4, p90 10, max 10; "
                     "2 without one, up to max_tokens 16",
                     f"  shared prefix: {shared_prefix_fraction(class_items(c, 'data')):.0%} of the "
                     "prompt text begins another request too"]


def test_the_dry_run_shows_the_exact_length_fields_and_the_arrivals_shape(tmp_path: Path) -> None:
    from engine.campaign.dryrun import plan_text

    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "output_tokens": 4}\n')
    c = load(tmp_path, {"plain": {"prompts": ["p"]}, "data": {"dataset": {"file": "d.jsonl"}}},
             rate=[2.0], burstiness=0.25)
    text = plan_text(c, "process", environ={}, testbed={})
    assert ('  a request with its own output length N (data): max_tokens N and {"ignore_eos": true}, '
            "so the server generates exactly N tokens") in text
    assert "open loop: gamma arrivals of shape 0.25 (burstiness; 1 is Poisson) seeded by 1234" in text


def test_the_dry_run_says_which_requests_exact_output_sizes(tmp_path: Path) -> None:
    """Beside a dataset's own lengths, exact_output sizes the requests without one; alone, every
    request."""
    from engine.campaign.dryrun import plan_text

    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "output_tokens": 4}\n')
    both = load(tmp_path, {"plain": {"prompts": ["p"]}, "data": {"dataset": {"file": "d.jsonl"}}},
                exact_output=True)
    assert ("  exact_output: every request without its own output length generates exactly "
            in plan_text(both, "process", environ={}, testbed={}))
    alone = load(tmp_path, {"plain": {"prompts": ["p"]}}, exact_output=True)
    assert "  exact_output: every request generates exactly " in plan_text(alone, "process", environ={},
                                                                          testbed={})
