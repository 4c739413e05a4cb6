"""Class sources (engine.campaign.sources): the registry, a class's items, and the run freezing
them; a plain class's prompts.json is what it always was, and no items.json beside it."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from engine.campaign.load import load_campaign
from engine.campaign.sources import SOURCES, class_items
from engine.campaign.sources.item import plain_item
from engine.record import results
from engine.run.runner import frozen_items
from tests.campaigns import campaign


def _load(tmp_path: Path, **workload: object) -> tuple[Path, object]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, **workload), sort_keys=False))
    return path, load_campaign(path)


def test_the_registry_has_the_plain_sources_under_their_keys() -> None:
    assert SOURCES["prompts"].plain and SOURCES["file"].plain
    assert all(key == source.key for key, source in SOURCES.items())


def test_a_plain_class_is_one_user_message_each_at_the_workload_s_length(tmp_path: Path) -> None:
    (tmp_path / "p.txt").write_text("First.\nSecond.\n")
    path, _ = _load(tmp_path, classes={"inline": {"prompts": ["a", "b"]}, "text": {"file": "p.txt"}})
    c = load_campaign(path)
    assert class_items(c, "inline") == [plain_item("a"), plain_item("b")]
    assert class_items(c, "text") == [{"messages": [{"role": "user", "content": "First."}],
                                       "max_tokens": None}, plain_item("Second.")]


def test_a_plain_campaign_freezes_its_prompts_as_it_always_has(tmp_path: Path) -> None:
    (tmp_path / "p.txt").write_text("First.\nSecond.\n")
    path, _ = _load(tmp_path, classes={"inline": {"prompts": ["a", "b"]}, "text": {"file": "p.txt"}})
    run = tmp_path / "run"
    run.mkdir()
    frozen = frozen_items(load_campaign(path), run, {})
    # The bytes an older ruler wrote: the prompts as strings per class, through write_json.
    want = tmp_path / "want.json"
    results.write_json(want, {"inline": ["a", "b"], "text": ["First.", "Second."]})
    assert (run / results.PROMPTS).read_bytes() == want.read_bytes()
    assert not (run / results.ITEMS).exists()
    # A resume reads them back, whatever the file says now.
    (tmp_path / "p.txt").write_text("Changed.\n")
    assert frozen_items(load_campaign(path), run, {}) == frozen
    assert json.loads((run / results.PROMPTS).read_text())["text"] == ["First.", "Second."]
