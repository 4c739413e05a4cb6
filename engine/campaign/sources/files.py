"""The plain classes: prompts written in the campaign (``prompts:``) or read from a prompt file
(``file:``, engine.campaign.prompts), each the one user message of its request, answered up to
the workload's max_tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.campaign.prompts import read_prompts
from engine.campaign.sources.base import Source
from engine.campaign.sources.item import Item, plain_item


class Inline(Source):
    key, what, plain = "prompts", "prompts", True
    file_at = ()

    def items(self, spec: Any, path: Path | None) -> list[Item]:
        return [plain_item(p) for p in spec]


class PromptFile(Source):
    key, what, plain = "file", "prompt file", True
    file_at = ()

    def file(self, spec: Any) -> str | None:
        return str(spec)

    def items(self, spec: Any, path: Path | None) -> list[Item]:
        assert path is not None  # file() always names one
        return [plain_item(p) for p in read_prompts(path)]
