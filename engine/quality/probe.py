"""The live side of a window's quality checks: greedy replies and teacher-forced scores in token ids."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import httpx

from engine.quality.maths import spread_positions
from engine.quality.reference import Item, Scores
from engine.servers.client import ChatReply, ServerClient, Unsupported
from engine.servers.data import reading, tokenized


class Stopped(Exception):
    """The operator aborted or advanced: the phase stops between requests."""


def messages(prompt: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": prompt}]


def request(prompt: str, knobs: dict[str, Any], max_tokens: int, seed: int) -> dict[str, Any]:
    """A quality chat request: greedy and seeded, the campaign's knobs verbatim (as load.py)."""
    return {"messages": messages(prompt), "max_tokens": max_tokens, "temperature": 0, "seed": seed,
            **knobs}


def greedy_text(reply: ChatReply) -> str:
    """What greedy equivalence compares: the content, after any reasoning the server split off."""
    if reply.reasoning is None:
        return reply.content
    return f"<reasoning>{reply.reasoning}</reasoning>{reply.content}"


@dataclass
class Probe:
    """One window's server, through the adapter, and a request counter (the receipts' cost)."""

    adapter: ServerClient
    client: httpx.Client
    stopping: Callable[[], bool]
    requests: int = 0

    def check(self) -> None:
        if self.stopping():
            raise Stopped

    def reading(self, call: str) -> AbstractContextManager[None]:
        """Around every adapter request: an answer the adapter cannot read is BadServerData (the
        check's "error" verdict), whatever Python error the reading hit."""
        return reading(f"{self.adapter.name} {call}")

    def render(self, prompt: str, knobs: dict[str, Any]) -> str:
        with self.reading("render_chat"):
            return self.adapter.render_chat(self.client, messages(prompt), knobs)

    def tokenize(self, text: str) -> list[int]:
        with self.reading("tokenize"):
            return tokenized(self.adapter.tokenize(self.client, text), text, "its ids")

    def greedy(self, prompts: Sequence[str], knobs: dict[str, Any], max_tokens: int,
               seed: int) -> list[dict[str, Any]]:
        """Greedy replies with the prompt and the continuation in token ids.

        From the chat endpoint itself where the adapter can give its token ids; else the rendered
        prompt's ids through the adapter's generate (then there is no chat reply to reuse).
        """
        out = []
        for prompt in prompts:
            self.check()
            ids = self.tokenize(self.render(prompt, knobs))
            self.requests += 3
            try:
                with self.reading("chat_tokens"):
                    reply, cont = self.adapter.chat_tokens(self.client,
                                                           request(prompt, knobs, max_tokens, seed))
            except Unsupported:
                with self.reading("generate"):
                    gen = self.adapter.generate(self.client, ids, max_tokens, seed)
                out.append({"prompt": prompt, "prompt_ids": ids, "text": gen.text,
                            "token_ids": gen.token_ids, "finish_reason": gen.stop,
                            "completion_tokens": len(gen.token_ids), "reply": None})
                continue
            out.append({"prompt": prompt, "prompt_ids": ids, "text": greedy_text(reply),
                        "token_ids": cont, "finish_reason": reply.finish_reason,
                        "completion_tokens": reply.completion_tokens, "reply": reply})
        return out

    def score(self, items: Sequence[Item], top_k: int) -> Scores:
        """Each item's positions: in one request where the server has prompt logprobs, else one
        request per position (the first fresh, the next ones extending the cached prefix)."""
        out: Scores = []
        for item in items:
            self.check()
            try:
                with self.reading("score_sequence"):
                    seq = self.adapter.score_sequence(self.client, item.prompt_ids + item.cont_ids,
                                                      len(item.prompt_ids), top_k)
                self.requests += 1
            except Unsupported:
                seq = None
            rows = []
            for j, t in enumerate(item.positions):
                nt = seq[t] if seq is not None and t < len(seq) else None
                if nt is None:
                    self.check()
                    with self.reading("next_token"):
                        nt = self.adapter.next_token(self.client, item.prompt_ids + item.cont_ids[:t],
                                                     top_k, fresh=j == 0)
                    self.requests += 1
                forced = item.cont_ids[t]
                rows.append({"t": t, "top": [[tid, lp] for tid, lp in nt.top[:top_k]],
                             "pieces": {str(forced): nt.pieces.get(forced, "")},
                             **({"unscored": nt.unscored} if nt.unscored else {})})
            out.append(rows)
        return out

    def chat(self, prompt: str, knobs: dict[str, Any], max_tokens: int, seed: int,
             extra: dict[str, Any] | None = None) -> ChatReply:
        self.check()
        self.requests += 1
        with self.reading("chat"):
            return self.adapter.chat(self.client, {**request(prompt, knobs, max_tokens, seed),
                                                   **(extra or {})})

    def reply(self, prompt: str, knobs: dict[str, Any], max_tokens: int, seed: int) -> ChatReply:
        """A chat reply shaped exactly as the greedy ones (so the two can be compared)."""
        self.check()
        self.requests += 1
        try:
            with self.reading("chat_tokens"):
                return self.adapter.chat_tokens(self.client, request(prompt, knobs, max_tokens, seed))[0]
        except Unsupported:
            with self.reading("chat"):
                return self.adapter.chat(self.client, request(prompt, knobs, max_tokens, seed))

    def text_items(self, texts: Sequence[str], positions: int) -> list[Item]:
        """Fixed texts as items: the first token is the prompt, every later one can be scored."""
        items = []
        for i, text in enumerate(texts):
            ids = self.tokenize(text)
            self.requests += 1
            if len(ids) >= 2:
                items.append(Item(f"text-{i}", ids[:1], ids[1:],
                                  spread_positions(len(ids) - 1, positions), text))
        return items


def greedy_items(greedy: Sequence[dict[str, Any]], positions: int) -> list[Item]:
    """The greedy continuations as items to score, at ``positions`` spread over each."""
    return [Item(f"greedy-{i}", g["prompt_ids"], g["token_ids"],
                 spread_positions(len(g["token_ids"]), positions), g["text"])
            for i, g in enumerate(greedy) if g["token_ids"]]
