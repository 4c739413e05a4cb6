#!/usr/bin/env python3
"""Writes the small example datasets beside this script, from nothing but a seed (no network):

* ``chat-sharegpt.json``: ShareGPT format (``conversations`` of ``from``/``value`` turns), 24 records
  in three categories (prose, code, recipe), some opening with a system turn, each with a reply
  whose length varies, so the class's output lengths (estimated from the replies) vary too;
* ``requests.jsonl``: JSONL, 24 records, ``prompt`` or ``messages``, each with ``output_tokens``
  (8 to 48) and a ``category``.

Run it again and the files come out byte for byte the same: ``python3 campaigns/data/generate.py``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.campaign.sources.shared_prefix import WORDS

HERE = Path(__file__).resolve().parent
SEED = 28

TOPICS = ["a lighthouse at dawn", "the first snow of winter", "a market on a Sunday", "an old map",
          "a train crossing a bridge", "bees in a garden", "a storm over the harbour",
          "a library at night"]
CODE = ["reverses a linked list", "merges two sorted lists", "counts the words in a file",
        "checks whether a string is a palindrome", "parses a date in ISO format",
        "computes a moving average", "finds the shortest path in a grid", "flattens a nested list"]
DISHES = ["a lentil soup", "a tomato salad", "bread with olive oil", "a mushroom risotto",
          "pancakes for four", "a lemon cake", "roasted vegetables", "a bean chilli"]
ASKS = {
    "prose": ["Write a short paragraph about {x}.", "Describe {x} in three sentences.",
              "Write a haiku about {x}."],
    "code": ["Write a Python function that {x}.", "Explain, step by step, code that {x}.",
             "Write a unit test for a function that {x}."],
    "recipe": ["Give me a recipe for {x}.", "List the ingredients for {x}.",
               "How long does {x} take to make, and why?"],
}
SUBJECTS = {"prose": TOPICS, "code": CODE, "recipe": DISHES}
def reply(rng: random.Random, words: int) -> str:
    out = []
    while len(out) < words:
        n = rng.randint(6, 14)
        out += [rng.choice(WORDS) for _ in range(n - 1)] + [rng.choice(WORDS) + "."]
    return " ".join(out[:words]).capitalize()


def records(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """(category, prompt) pairs, the categories in turn."""
    out = []
    cats = list(ASKS)
    for i in range(n):
        cat = cats[i % len(cats)]
        out.append((cat, rng.choice(ASKS[cat]).format(x=rng.choice(SUBJECTS[cat]))))
    return out


def sharegpt(rng: random.Random) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i, (cat, prompt) in enumerate(records(rng, 24)):
        turns = [{"from": "system", "value": "You are a helpful assistant."}] if i % 4 == 0 else []
        turns += [{"from": "human", "value": prompt},
                  {"from": "gpt", "value": reply(rng, rng.randint(6, 36))}]
        if i % 3 == 0:  # a second exchange: a dataset class sends the first only
            turns += [{"from": "human", "value": "Make it shorter."},
                      {"from": "gpt", "value": reply(rng, rng.randint(4, 12))}]
        out.append({"id": f"ex-{i:03d}", "category": cat, "conversations": turns})
    return out


def jsonl(rng: random.Random) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i, (cat, prompt) in enumerate(records(rng, 24)):
        rec: dict[str, object] = {"id": f"rq-{i:03d}", "category": cat}
        if i % 2:
            rec["messages"] = [{"role": "system", "content": "Answer briefly."},
                               {"role": "user", "content": prompt}]
        else:
            rec["prompt"] = prompt
        rec["output_tokens"] = rng.choice([8, 16, 24, 32, 48])
        out.append(rec)
    return out


def main() -> None:
    rng = random.Random(SEED)
    (HERE / "chat-sharegpt.json").write_text(json.dumps(sharegpt(rng), indent=1) + "\n")
    (HERE / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jsonl(rng)))


if __name__ == "__main__":
    main()
