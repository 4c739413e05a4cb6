"""Writes the example files of the trace and multi-turn classes (campaigns/demo-traffic.yaml),
made here, seeded, without the network: ``python campaigns/data/make_replay.py`` rewrites them
byte for byte.

- trace-mooncake.jsonl: Mooncake's format, 32 requests over about 16 s (exponential gaps of mean
  0.5 s), ``timestamp`` in ms; each input opens with one of four 512-token blocks its group shares
  (a system prompt), then blocks of its own: ``hash_ids`` says which.
- trace-plain.csv: the plain format, ``time`` in s, 20 requests, no shared blocks.
- chats.jsonl: 8 conversations of 2 to 4 turns as ``messages`` (user and assistant in turn), the
  replies written out, so every turn's history is the data's.

Lengths stay small for SmolLM2 on CPU (-c 2048 over 2 slots: 1024 tokens a slot).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLOCK = 512

TOPICS = ["the harbour", "a mountain road", "the old library", "a winter market", "the river delta",
          "a night train", "the city park", "a small bakery"]
ASKS = ["Describe {t} in two sentences.", "What would you see first at {t}?",
        "Write a short note about {t} for a friend.", "Give three facts someone might notice at {t}."]
FOLLOW = ["Say more about the light there.", "Now make it shorter.", "What sound stands out?",
          "How does it change at night?", "Name one thing to avoid there."]
REPLY = ["At {t} the air is cool and the light falls low across the stones.",
         "People pass slowly at {t}, and the noise of the day comes and goes in waves.",
         "Near {t} the paths are narrow, the colours are muted, and every corner has a story.",
         "The first thing at {t} is the smell of rain on wood, then the quiet after it."]


def mooncake(rng: random.Random) -> list[dict[str, object]]:
    rows, t, next_id = [], 0.0, 4  # ids 0-3: the four groups' shared first blocks
    for _ in range(32):
        group = rng.randrange(4)
        length = rng.randint(300, 900)
        own = -(-length // BLOCK) - 1
        ids = [group] + list(range(next_id, next_id + own))
        next_id += own
        rows.append({"timestamp": round(t * 1000), "input_length": length,
                     "output_length": rng.randint(8, 24), "hash_ids": ids})
        t += rng.expovariate(2.0)
    return rows


def plain(rng: random.Random) -> list[tuple[float, int, int]]:
    out, t = [], 0.0
    for _ in range(20):
        out.append((round(t, 3), rng.randint(100, 600), rng.randint(8, 24)))
        t += rng.expovariate(1.5)
    return out


def chats(rng: random.Random) -> list[dict[str, object]]:
    out = []
    for c in range(8):
        topic = TOPICS[c]
        msgs = [{"role": "user", "content": rng.choice(ASKS).format(t=topic)}]
        turns = rng.randint(2, 4)
        for k in range(turns):
            reply = " ".join(rng.choice(REPLY).format(t=topic) for _ in range(rng.randint(2, 4)))
            msgs.append({"role": "assistant", "content": reply})
            if k < turns - 1:
                msgs.append({"role": "user", "content": FOLLOW[(c + k) % len(FOLLOW)]})
        out.append({"id": f"chat-{c}", "messages": msgs})
    return out


def main() -> None:
    rng = random.Random(20261201)
    with open(HERE / "trace-mooncake.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in mooncake(rng))
    with open(HERE / "trace-plain.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["time", "input_length", "output_length"])
        w.writerows(plain(rng))
    with open(HERE / "chats.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in chats(rng))


if __name__ == "__main__":
    main()
