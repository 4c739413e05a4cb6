"""What a server sends is data: every field is type-checked here before the engine believes it.

A field that is not what the server's API promises raises :class:`BadServerData` naming the field
and the value; the callers turn that into a request error, a discarded metrics delta or an "error"
verdict, never an engine error.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


class BadServerData(ValueError):
    """A server answered something its API does not promise; the message says what and where."""


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def count(value: Any, what: str) -> int:
    """A non-negative integer (a bool is not one)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise BadServerData(f"{what} is {show(value)}, not a count")


def optional_count(value: Any, what: str) -> int | None:
    """A count, or None where the server left the field out (null is left out, too)."""
    return None if value is None else count(value, what)


def number(value: Any, what: str) -> float:
    """A finite number (a bool is not one)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise BadServerData(f"{what} is {show(value)}, not a finite number")


def counter(value: Any, what: str) -> float:
    """A Prometheus counter's value: finite and non-negative."""
    if number(value, what) < 0:
        raise BadServerData(f"{what} is {show(value)}, a negative counter")
    return float(value)


def token_ids(values: Any, what: str) -> list[int]:
    if not isinstance(values, list):
        raise BadServerData(f"{what} is {show(values)}, not a list of token ids")
    return [count(v, f"{what}[{i}]") for i, v in enumerate(values)]


# The ids a tokenizer adds of its own beyond one per byte of text at most (a begin-of-text token,
# a template's specials are in the text itself).
SPECIAL_IDS = 16


def tokenized(ids: list[int], of: str, what: str) -> list[int]:
    """``ids`` as the tokenization of the text ``of``: a token covers at least one byte of its
    text, so more ids than bytes (and a few special ones) is no tokenization of it (a /tokenize
    that answered millions of ids for one prompt)."""
    bound = len(of.encode("utf-8", "surrogatepass")) + SPECIAL_IDS
    if len(ids) > bound:
        raise BadServerData(f"{what}: {len(ids):,} ids for a text of {bound - SPECIAL_IDS:,} bytes, "
                            "more than one a byte: no tokenization of it")
    return ids


def text(value: Any, what: str) -> str:
    """A string field; null reads as empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise BadServerData(f"{what} is {show(value)}, not a string")


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is no JSON number")


def strict_json(text: str, what: str) -> Any:
    """A server's JSON answer as JSON has it: Python's json reads NaN and Infinity, which no JSON
    file the engine writes may hold (its writers refuse them), so an answer with one is bad data."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise BadServerData(f"{what} answered {show(text[:60])}: not JSON ({e})") from e


def mapping(value: Any, what: str) -> dict[str, Any]:
    """A JSON object field; null reads as empty."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise BadServerData(f"{what} is {show(value)}, not an object")


# Speculative counts travel in one flat shape (engine.method.acceptance reads it): "drafts" (verify
# steps), "drafted", "accepted", and "pos.<i>", the verify steps whose draft token at position i
# was accepted.
POS = "pos."


def pos_key(i: int) -> str:
    return f"{POS}{i}"


# More draft positions than any drafter proposes at one step: a histogram or a set of per-position
# counters past this is not acceptance (a 60k-entry histogram was sent, to stall the reader).
MAX_POSITIONS = 1024


# How far a counter a server printed may be from its count, as a share of it: llama-server writes
# its counters as a C++ stream writes a double, to 6 significant digits (1,234,564 as
# "1.23456e+06"; server-task.cpp), and its per-position counts exactly. Every check below allows
# each side that much, so a long-running server's rounding is never read as bad data.
PRINTED = 5e-6


def consistent(counts: Mapping[str, float], where: str,
               printed_from: Mapping[str, float] | None = None) -> None:
    """Speculative counts as they can be, from whichever source (a /metrics scrape or its delta
    over a rep, a request's own), else BadServerData naming the counts and the rule broken.

    A verify step accepts a prefix of its draft: position i is accepted in a step only if every
    position before it is, so per position the steps never rise with i, no more than there were
    steps; their sum is the accepted tokens (llama-server counts no position past its drafter's
    maximum, so at most them); a step accepts no more tokens than there are positions; none
    accepts more than was drafted; no drafter proposes more than :data:`MAX_POSITIONS` a step.
    These hold for vLLM's, SGLang's and llama-server's counters alike (vLLM's SpecDecodingStats
    .observe_draft, llama-server's server-context.cpp, SGLang's acceptance histogram). Drafted
    tokens are bounded by :data:`MAX_POSITIONS` a step and not by the positions: a request's
    positions come from the longest prefix it had accepted, not from its drafter's length.

    ``printed_from``: the printed counters ``counts`` come from (a scrape's own, or the sum of
    the two a delta is taken between), each allowed :data:`PRINTED` of itself for its rounding.
    """
    def slack(*keys: str) -> float:
        return sum(PRINTED * abs(printed_from.get(k, 0.0)) for k in keys) if printed_from else 0.0

    drafted, accepted, steps = counts.get("drafted"), counts.get("accepted"), counts.get("drafts")
    if drafted is not None and accepted is not None and accepted > drafted + slack("drafted", "accepted"):
        raise BadServerData(f"{where}: {_n(accepted)} tokens accepted of {_n(drafted)} drafted")
    positions = {k: v for k, v in counts.items() if k.startswith(POS)}
    if len(positions) > MAX_POSITIONS:
        raise BadServerData(f"{where}: {len(positions)} draft positions, more than the "
                            f"{MAX_POSITIONS} any drafter proposes")
    curve = [positions.get(pos_key(i), 0.0) for i in range(_length(positions))]
    if steps:
        for i, n in enumerate(curve):
            if n > steps + slack(pos_key(i), "drafts"):
                raise BadServerData(f"{where}: position {i} accepted in {_n(n)} verify steps of {_n(steps)}")
    for i in range(1, len(curve)):
        if curve[i] > curve[i - 1] + slack(pos_key(i), pos_key(i - 1)):
            raise BadServerData(f"{where}: position {i} accepted in {_n(curve[i])} verify steps, more "
                                f"than position {i - 1} ({_n(curve[i - 1])}): a draft token is accepted "
                                "only after every one before it")
    if accepted is not None and curve and sum(curve) > accepted + slack("accepted", *positions):
        raise BadServerData(f"{where}: the per-position counts sum to {_n(sum(curve))} accepted tokens, "
                            f"more than the {_n(accepted)} accepted")
    if steps:
        _per_step(accepted, "accepted", steps, len(curve), where,
                  slack("accepted") + len(curve) * slack("drafts"))
        _per_step(drafted, "drafted", steps, 0, where, slack("drafted") + MAX_POSITIONS * slack("drafts"))


def _n(count: float) -> str:
    """A count as a count (1234564, not 1.23456e+06: a rounding is what the rules allow for)."""
    return f"{count:.0f}" if float(count).is_integer() and abs(count) < 1e15 else f"{count:g}"


def _length(positions: Mapping[str, float]) -> int:
    return 1 + max(int(k[len(POS):]) for k in positions) if positions else 0


def _per_step(tokens: float | None, what: str, steps: float, positions: int, where: str,
              slack: float) -> None:
    """``tokens`` at most ``positions`` a verify step (the curve's length; where there is none,
    the most any drafter has)."""
    most = positions or MAX_POSITIONS
    if tokens is None or tokens <= steps * most + slack:
        return
    if positions:
        raise BadServerData(f"{where}: {_n(tokens)} tokens {what} in {_n(steps)} verify steps, more than the "
                            f"{most} draft positions allow a step (a length of {1 + tokens / steps:.4g} "
                            f"where at most {most + 1} can be)")
    raise BadServerData(f"{where}: {_n(tokens)} tokens {what} in {_n(steps)} verify steps, more than "
                        f"{most} a step: no drafter has more draft positions")


def acceptance(drafted: Any, accepted: Any, drafts: Any, where: str,
               histogram: Any = None) -> dict[str, int] | None:
    """Per-request speculative counts: None when the server sent none, else checked counts.

    More tokens accepted than drafted cannot happen; such a reply is bad data, not a rate above 1.
    ``histogram``, where the server sends one, counts at entry n the verify steps that accepted
    exactly n drafts (SGLang's ``spec_accept_histogram``): position i was accepted in every step
    that accepted more than i, and the histogram must agree with the steps and accepted tokens.
    """
    if drafted is None and accepted is None:
        return None
    out = {"drafted": count(drafted, f"{where} drafted"), "accepted": count(accepted, f"{where} accepted")}
    if drafts is not None:
        out["drafts"] = count(drafts, f"{where} verify steps")
    if histogram is not None:
        if not isinstance(histogram, list):
            raise BadServerData(f"{where} histogram is {show(histogram)}, not a list of counts")
        if len(histogram) > MAX_POSITIONS + 1:  # said before a count of it is read
            raise BadServerData(f"{where} histogram of {len(histogram)} entries: more draft positions "
                                f"than the {MAX_POSITIONS} any drafter proposes")
        h = [count(n, f"{where} histogram[{i}]") for i, n in enumerate(histogram)]
        if sum(n * i for i, n in enumerate(h)) != out["accepted"]:
            raise BadServerData(f"{where} histogram {show(h)} accepts {sum(n * i for i, n in enumerate(h))} "
                                f"tokens, not the {out['accepted']} it says")
        # Position i was accepted in every step that accepted more than i: the suffix sums, in
        # one pass from the end (a sum per position over the rest was quadratic in the length).
        suffix = list(itertools.accumulate(reversed(h[1:])))[::-1]
        out.update({pos_key(i): n for i, n in enumerate(suffix)})
    consistent(out, where)
    return out


# What an adapter indexing an answer of a shape it did not expect raises.
PARSE_ERRORS = (BadServerData, TypeError, AttributeError, IndexError, KeyError, ValueError)


def bad_data(what: str, e: Exception) -> BadServerData:
    """One of :data:`PARSE_ERRORS` as bad data, with a reason naming the request."""
    if isinstance(e, BadServerData):
        return BadServerData(f"{what}: {e}")
    return BadServerData(f"{what}: the answer does not parse ({type(e).__name__}: {e})")


@contextmanager
def reading(what: str) -> Iterator[None]:
    """An adapter reading a server's JSON: an answer of a shape it did not expect is bad data.

    The adapters index answers as the API documents them; a server that answers otherwise makes
    them raise KeyError, TypeError and the like, which here become a reason naming the request.
    """
    try:
        yield
    except PARSE_ERRORS as e:
        raise bad_data(what, e) from e
