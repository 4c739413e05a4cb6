"""A generated class whose prompts share system prompts, in the manner of SGLang's
generated-shared-prefix benchmark: ``groups`` system prompts of ``system_tokens`` tokens, each
followed by ``prompts_per_group`` questions of ``question_tokens`` tokens; the requests shuffled
(seeded), so a group's prompts do not all arrive one after another.

The text is words drawn (seeded) from :data:`WORDS`, common English words each of which is one
token, with its leading space, in the BPE vocabularies of the usual models (all of them in
SmolLM2's: the integration test counts them through llama-server's /tokenize): a length of N
tokens is N words. Another tokenizer may split a few words in two; the chat template adds its own
few tokens around each message. Every group's system prompt starts differently, so groups share
nothing but the template's head.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, Strict, model_validator
from pydantic_core import PydanticCustomError

from engine.campaign.sources.base import Count, Frozen, Seed, Source
from engine.campaign.sources.item import Item

_WORDS = (
    "the of and to in is it that for on with as was at by this from be are an or have not but one "
    "all they we had can there more out so up use time what about which when make like each other "
    "into some then two see way could people first water been long find day did get come made may "
    "part over new sound take only little work know place year live back give most very after "
    "thing our just name good sentence man think say great where help through much before line "
    "right too mean old any same tell boy follow came want show also around form three small set "
    "put end does another well large must big even such because turn here why ask went men read "
    "need land different home us move try kind hand picture again change off play spell air away "
    "animal house point page")
WORDS = tuple(_WORDS.split())
DEFAULT_SEED = 1234
MAX_PROMPTS = 100_000  # groups x prompts per group: past it, a typo

Many = Annotated[int, Strict(), Field(ge=1, le=MAX_PROMPTS)]


class SharedPrefixSpec(Frozen):
    groups: Many
    prompts_per_group: Many
    system_tokens: Count  # SGLang's --gsp-system-prompt-len
    question_tokens: Count  # SGLang's --gsp-question-len
    output_tokens: Count | None = None  # each answer exactly this long; None: the workload's max_tokens
    seed: Seed = DEFAULT_SEED

    @model_validator(mode="after")
    def _not_too_many(self) -> SharedPrefixSpec:
        if self.groups * self.prompts_per_group > MAX_PROMPTS:
            raise PydanticCustomError("shared_prefix", f"groups x prompts_per_group is "
                                      f"{self.groups * self.prompts_per_group} prompts, more than "
                                      f"{MAX_PROMPTS}")
        return self


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


class SharedPrefix(Source):
    key, what = "shared_prefix", "shared prefix"
    file_at = ()

    def items(self, spec: Any, path: Path | None) -> list[Item]:
        assert isinstance(spec, SharedPrefixSpec)
        out: list[Item] = []
        for g in range(spec.groups):
            # Group g's system prompt opens with its own word, so no two groups share more than
            # the template's head however the draw falls.
            rng = random.Random(f"shared_prefix:{spec.seed}:system:{g}")
            system = " ".join([WORDS[g % len(WORDS)], words(rng, spec.system_tokens - 1)]).strip()
            for q in range(spec.prompts_per_group):
                question = words(random.Random(f"shared_prefix:{spec.seed}:question:{g}:{q}"),
                                 spec.question_tokens)
                out.append({"messages": [{"role": "system", "content": system},
                                         {"role": "user", "content": question}],
                            "max_tokens": spec.output_tokens})
        random.Random(f"shared_prefix:{spec.seed}:order").shuffle(out)
        return out
