"""llama-server's scoring request when the argmax is a byte token: an in-process fake server
(httpx.MockTransport) that answers as server-context.cpp does, no probabilities for a sampled
token that leaves the text an incomplete UTF-8 sequence. The real server is
tests/integration/test_quality.py (SmolLM2's emoji)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from engine.servers import get_adapter

LEAD, A = 10813, 81  # the lead bytes of an emoji, and "a"
TOP = [{"id": LEAD, "token": "\ufffd", "logprob": -0.1}, {"id": A, "token": "a", "logprob": -2.5}]


def _server(tokenized: list[int]) -> tuple[httpx.Client, list[tuple[str, dict[str, Any]]]]:
    """The argmax is a lead byte: sampled, the answer has no probabilities; a token the request
    forces is sampled instead, and the probabilities (before sampling) do not move with it."""
    asked: list[tuple[str, dict[str, Any]]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append((request.url.path, body))
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": tokenized})
        forced = [t for t, bias in body.get("logit_bias", []) if bias > 100]
        if not forced:
            return httpx.Response(200, json={"content": "", "stop_type": "limit"})
        return httpx.Response(200, json={"content": "a", "completion_probabilities": [
            {"id": forced[0], "top_logprobs": TOP}]})

    return httpx.Client(base_url="http://server", transport=httpx.MockTransport(answer)), asked


@pytest.mark.parametrize("fresh", [True, False])
def test_a_lead_byte_argmax_is_scored_with_a_whole_character_forced(fresh: bool) -> None:
    client, asked = _server([A])
    got = get_adapter("llamacpp").next_token(client, [1, 2, 3], 2, fresh)
    assert got.top == [(LEAD, -0.1), (A, -2.5)]  # the lead byte keeps its place at the top
    (p1, first), (p2, tok), (p3, again) = asked
    assert (p1, p2, p3) == ("/completion", "/tokenize", "/completion")
    assert tok == {"content": "a", "add_special": False}
    assert again == {**first, "logit_bias": [[A, 1e4]]}  # the same position asked the same way
    assert first["cache_prompt"] is (not fresh) and first["prompt"] == [1, 2, 3]


def test_a_vocabulary_without_the_forced_token_answers_with_what_the_server_gave() -> None:
    """No whole-character token to force: the position is kept with the server's own token and
    why it has no distribution (left out of the comparisons), not an error that fails the check."""
    client, asked = _server([])
    got = get_adapter("llamacpp").next_token(client, [1], 2, True)
    assert got.top == [] and "no probabilities at this position (no token" in got.unscored
    assert [p for p, _ in asked] == ["/completion", "/tokenize"]


def test_a_server_that_drops_the_probabilities_even_when_forced_is_answered_with_its_token() -> None:
    """FAKED: a build that sends no probabilities for the forced token either (seen on an H200
    with a random-weight model: "answered without top_logprobs" made greedy and teacher-forced
    read "no reference" for the whole campaign): the position carries the token it sampled."""
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [A]})
        return httpx.Response(200, json={"content": "", "tokens": [LEAD], "stop_type": "limit"})

    client = httpx.Client(base_url="http://server", transport=httpx.MockTransport(answer))
    got = get_adapter("llamacpp").next_token(client, [1, 2], 2, False)
    assert got.top == [] and got.unscored.startswith(
        f"llama-server gave no probabilities at this position (its token {LEAD}")


def _chat(answer: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
    bodies: list[dict[str, Any]] = []

    def reply(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=answer)

    client = httpx.Client(base_url="http://server", transport=httpx.MockTransport(reply))
    return get_adapter("llamacpp").chat_tokens(client, {"messages": [], "max_tokens": 3})[1], bodies[0]


def _chat_answer(logprob_ids: list[int], completion_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"message": {"content": "\U0001f331"}, "finish_reason": "length",
                         "logprobs": {"content": [{"id": t, "logprob": 0.0} for t in logprob_ids]}}],
            "usage": {"completion_tokens": completion_tokens, "prompt_tokens": 4}, **extra}


def test_greedy_ids_are_every_generated_token_the_lead_bytes_included() -> None:
    """llama-server's logprobs skip the tokens that left the text incomplete UTF-8 (an emoji's
    three tokens give one entry); __verbose.tokens has them all."""
    ids, body = _chat(_chat_answer([126], 3, __verbose={"tokens": [LEAD, 230, 126]}))
    assert ids == [LEAD, 230, 126]
    assert body["return_tokens"] is True and body["verbose"] is True and body["logprobs"] is True


def test_logprob_ids_are_taken_only_when_they_cover_every_token() -> None:
    ids, _ = _chat(_chat_answer([40, 41, 42], 3))
    assert ids == [40, 41, 42]
    with pytest.raises(ValueError, match="1 of the 3 tokens generated"):
        _chat(_chat_answer([126], 3))
