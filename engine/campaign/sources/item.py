"""One request a class sends: an :class:`Item`, what every class source gives and the load
generator sends. The campaign layer, so the run, the quality phase, the report and the console
may all read it.
"""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] only from evaluated
# annotations.
from typing import NotRequired, TypedDict


class Message(TypedDict):
    role: str  # system | user | assistant
    content: str


class Item(TypedDict):
    """A request's chat, history included, and how long its answer is to be.

    A key left out means "none": a plain prompt has only ``messages`` and ``max_tokens``.
    """

    messages: list[Message]
    # The answer's length from the data, sent with the adapter's fields that ignore the end of
    # sequence so the server generates exactly that many; None: the workload's max_tokens.
    max_tokens: int | None
    at: NotRequired[float]  # trace: seconds from the pass's start (before the time scale)
    conversation: NotRequired[int]  # multi-turn: which conversation; its turns go in order
    turn: NotRequired[int]  # multi-turn: the turn's 0-based index
    think_s: NotRequired[float]  # multi-turn: the pause before this turn, after the previous ends


def plain_item(prompt: str) -> Item:
    """A prompt string as the one user message of its request, at the workload's max_tokens."""
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": None}


def prompt_text(item: Item) -> str:
    """The item's messages as one text (for lengths and shared prefixes, never for sending)."""
    return "\n".join(m["content"] for m in item["messages"])
