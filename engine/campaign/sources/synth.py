"""Synthetic text of a given length in tokens, seeded: what a trace's blocks and a generated
conversation's turns are made of.

Each word of the vocabulary below is one token, space included, in the BPE vocabularies served
models use (GPT-2's, Llama's, SmolLM2's): short, common, lower-case English words, so a text of
N words is a prompt of about N tokens (the chat template adds its own few). Words are drawn from
a generator seeded by a key, so the same key gives the same text in every process, rep and run,
and two prompts that share a block share its tokens exactly.
"""

from __future__ import annotations

import random

_VOCABULARY = """
the of and to in is was for on that with as by at from his her it an be this are were which
not or have had one all their but also has more its first new other after two who been when
time they into would she him over can only some up most than year most made used out then
may these such no him during under about later many city both so through where well school
part known three world while him state since may between long name any over each year same
both show game high her made life work back best family team well must way death house play
end water early said area four day well number much now even film song group end own part
group war book old far music road few five very set line held ten main king side place what
live just point top hand good power light down open form home west east north south road
field park land plan post role rest star wind fire gold iron deep wide blue red green cold
warm dark fast slow hard soft near past next last left right full half case fact hour week
month test term word page list code file data type rate cost risk size unit step base mark
"""
WORDS = tuple(dict.fromkeys(_VOCABULARY.split()))  # each word once, in order


def words(n: int, key: str) -> list[str]:
    """``n`` words drawn with a generator seeded by ``key`` (a str key hashes alike everywhere)."""
    rng = random.Random(key)
    return [rng.choice(WORDS) for _ in range(n)]


def text(n: int, key: str) -> str:
    """A text of about ``n`` tokens: ``n`` words, each one token with its leading space."""
    return " ".join(words(n, key))
