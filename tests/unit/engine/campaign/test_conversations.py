"""Multi-turn conversations as items (engine.campaign.sources.conversations): from a dataset's
records (ShareGPT and messages), generated to lengths, each turn with its history."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from engine.campaign.prompts import DataFileError
from engine.campaign.sources import conversations as cv

SHAREGPT: list[dict[str, Any]] = [{"id": "a", "conversations": [
    {"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi there"},
    {"from": "gpt", "value": "Hello."}, {"from": "human", "value": "Name a colour."},
    {"from": "gpt", "value": "Blue."}]},
    {"id": "b", "conversations": [{"from": "human", "value": "One question"}]}]


def test_sharegpt_json_turns_carry_their_history(tmp_path: Path) -> None:
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(SHAREGPT, indent=1))
    convs = cv.read_conversations(path)
    lines = path.read_text().splitlines()
    starts = [n for n, line in enumerate(lines, 1) if line == " {"]  # where each record opens
    assert [c.line for c in convs] == starts and len(starts) == 2
    items = cv.items(convs, think=(0.5, 1.5), seed=3)
    assert [(i["conversation"], i["turn"]) for i in items] == [(0, 0), (0, 1), (1, 0)]
    assert [m["content"] for m in items[1]["messages"]] == ["Be brief.", "Hi there", "Hello.",
                                                            "Name a colour."]
    assert items[0]["think_s"] == 0.0 and 0.5 <= items[1]["think_s"] <= 1.5
    assert items == cv.items(convs, think=(0.5, 1.5), seed=3)
    assert all(i["max_tokens"] is None and "at" not in i for i in items)


def test_messages_jsonl_reads_as_sharegpt_does(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps({"messages": [
        {"role": {"human": "user", "gpt": "assistant"}.get(m["from"], m["from"]), "content": m["value"]}
        for m in c["conversations"]]}) + "\n" for c in SHAREGPT))
    other = tmp_path / "chats.json"
    other.write_text(json.dumps(SHAREGPT))
    assert [c.messages for c in cv.read_conversations(path)] == [
        c.messages for c in cv.read_conversations(other)]


@pytest.mark.parametrize(("record", "problem"), [
    ({"conversations": [{"from": "gpt", "value": "x"}]},
     "message 1 is from the assistant: a conversation starts"),
    ({"conversations": [{"from": "human", "value": "x"}, {"from": "human", "value": "y"}]},
     "message 2 is from the user after the user"),
    ({"conversations": [{"from": "robot", "value": "x"}]}, "from 'robot' is not one of"),
    ({"messages": [{"role": "user", "content": ""}]}, "content must be non-empty text"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]},
     "a system message comes first only"),
    ({"prompt": "x"}, "expected 'conversations'"),
    ([1], "expected a conversation object"),
])
def test_a_bad_record_is_named_by_its_line(tmp_path: Path, record: object, problem: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "fine"}]}) + "\n"
                    + json.dumps(record) + "\n")
    with pytest.raises(DataFileError) as err:
        cv.read_conversations(path)
    assert str(err.value).startswith(f"{path}:2: ") and problem in str(err.value)


def test_a_damaged_json_list_says_its_line(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('[\n {"messages": [{"role": "user", "content": "x"}]},\n {"messages": [}\n]\n')
    with pytest.raises(DataFileError, match=r"c\.json:3: not JSON"):
        cv.read_conversations(path)
    path.write_text('{"messages": []}')
    with pytest.raises(DataFileError, match=r"c\.json:1: expected a JSON list"):
        cv.read_conversations(path)


def test_generated_conversations_have_their_lengths_every_time() -> None:
    spec = cv.Generated(conversations=3, turns=(2, 4), user_tokens=20, reply_tokens=(5, 9),
                        system_tokens=30)
    convs = cv.generate(spec, seed=11)
    assert convs == cv.generate(spec, seed=11) and convs != cv.generate(spec, seed=12)
    for c in convs:
        users = [m for m in c.messages if m["role"] == "user"]
        replies = [m for m in c.messages if m["role"] == "assistant"]
        assert c.messages[0]["role"] == "system" and len(c.messages[0]["content"].split()) == 30
        assert 2 <= len(users) <= 4 and all(len(m["content"].split()) == 20 for m in users)
        assert [len(m["content"].split()) for m in replies] == list(c.reply_tokens)
        assert all(n is not None and 5 <= n <= 9 for n in c.reply_tokens)
    items = cv.items(convs, think=0.25, seed=11, max_turns=2)
    assert {i["turn"] for i in items} == {0, 1}
    assert [i["max_tokens"] for i in items if i["conversation"] == 0] == list(convs[0].reply_tokens[:2])
    later = next(i for i in items if i["turn"] == 1)
    first = next(i for i in items if i["turn"] == 0 and i["conversation"] == later["conversation"])
    assert later["messages"][:len(first["messages"])] == first["messages"]  # history is a prefix
    assert later["think_s"] == 0.25


def test_sample_is_seeded_and_keeps_the_file_order() -> None:
    convs = cv.generate(cv.Generated(10, 1, 3, 3), seed=1)
    picked = cv.sample(convs, 4, seed=5)
    assert picked == cv.sample(convs, 4, seed=5) and len(picked) == 4
    assert [convs.index(c) for c in picked] == sorted(convs.index(c) for c in picked)
    assert cv.sample(convs, None, 5) == convs


def test_history_shared_counts_the_previous_turn() -> None:
    items = [{"conversation": 0, "messages": [{"content": "aaaa"}]},
             {"conversation": 0, "messages": [{"content": "aaaa"}, {"content": "bb"}, {"content": "cc"}]}]
    assert cv.history_shared(items) == 4 / 12


def test_order_groups_turns_by_conversation() -> None:
    items = cv.items(cv.generate(cv.Generated(3, (1, 3), 2, 2), seed=4), think=0, seed=4)
    groups = cv.order(items)
    assert sorted(i for g in groups for i in g) == list(range(len(items)))
    for g in groups:
        assert len({items[i]["conversation"] for i in g}) == 1
        assert [items[i]["turn"] for i in g] == list(range(len(g)))


def test_a_conversation_of_more_turns_than_ruler_sends_is_refused_at_its_line(tmp_path: Path) -> None:
    turns = [{"role": r, "content": "x"} for _ in range(5000) for r in ("user", "assistant")]
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"messages": turns[:2]}) + "\n" + json.dumps({"messages": turns}) + "\n")
    with pytest.raises(DataFileError, match=rf"c\.jsonl:2: a conversation of 5000 user turns; ruler "
                                            rf"sends at most {cv.MAX_TURNS} \(max_turns sends"):
        cv.read_conversations(path)
    convs = cv.read_conversations(path, max_turns=3)  # its first three turns, as it asks
    assert [len(c.messages) for c in convs] == [2, 6]


def test_generated_turns_past_the_bound_are_a_spec_error() -> None:
    with pytest.raises(ValueError, match=f"less than or equal to {cv.MAX_TURNS}"):
        cv.ConversationsSpec(generate={"conversations": 1, "turns": 10000, "user_tokens": 1,
                                       "reply_tokens": 1})


def test_a_long_conversation_s_turns_share_its_history_not_copy_it() -> None:
    """Each turn copied the history before it: turns^2 / 2 message objects."""
    convs = cv.generate(cv.Generated(1, cv.MAX_TURNS, 1, 1), seed=1)
    tracemalloc.start()
    try:
        its = cv.items(convs, 0.0, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(its) == cv.MAX_TURNS and len(its[-1]["messages"]) == 2 * cv.MAX_TURNS - 1
    assert peak < 2 << 20, f"{peak / (1 << 20):.1f} MiB"  # a copy a turn: over 6 MiB
