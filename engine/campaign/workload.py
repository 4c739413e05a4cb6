"""A campaign's workload: its classes (where each one's requests come from), the loads it measures
at, its reps, and what it asks of them (an SLO, a capacity search)."""

import math
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, Strict, model_validator
from pydantic_core import PydanticCustomError

from engine.campaign import defaults
from engine.campaign.sources.conversations import ConversationsSpec
from engine.campaign.sources.dataset import DatasetSpec
from engine.campaign.sources.shared_prefix import SharedPrefixSpec
from engine.campaign.sources.trace import TraceSpec
from engine.campaign.values import (
    MAX_CONCURRENCY,
    MAX_SECONDS,
    Bool,
    FrozenModel,
    Name,
    Seed,
    Str,
    Tokens,
)


class PromptClass(FrozenModel):
    """Where a class's requests come from: exactly one source (engine.campaign.sources)."""

    prompts: Annotated[tuple[Str, ...], Field(min_length=1)] | None = None
    file: Str | None = None
    dataset: DatasetSpec | None = None
    shared_prefix: SharedPrefixSpec | None = None
    trace: TraceSpec | None = None  # replayed at its own times (engine.campaign.sources.trace)
    conversations: ConversationsSpec | None = None  # multi-turn (engine.campaign.sources.conversations)


class Sampling(FrozenModel):
    temperature: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)] = 0.0
    seed: Seed | None = None


class Shard(FrozenModel):
    """Past these, per event loop, the load generator splits a pass over worker processes: one
    loop's lag (the error of every timestamp it takes) grows with the chunks it must read."""

    concurrency: Annotated[int, Strict(), Field(ge=1, le=MAX_CONCURRENCY)] = 256
    chunk_rate: Annotated[float, Strict(), Field(gt=0, le=1e9, allow_inf_nan=False)] = 20_000


MAX_RATE = 10_000.0  # requests per second: past it, a typo
MIN_RATE = 0.01  # requests per second: below it a rep's four arrivals outlast any timeout
MIN_REP_SECONDS = 0.001  # a shorter rep sends nothing and measures nothing
MAX_REP_REQUESTS = 100_000  # a rep's requests, as requests_per_rep's bound: each is held in memory


Millis = Annotated[float, Strict(), Field(gt=0, le=MAX_SECONDS * 1000, allow_inf_nan=False)]
OLD_TPOT_KEY = "itl_ms"  # tpot_ms's first name: still read, with a warning (engine.campaign.load)


class SloSpec(FrozenModel):
    """Per request, what counts toward goodput: its time to first token, and its TPOT (the mean gap
    between its tokens after the first, as vLLM's goodput counts it; not the itl_p* chunk gaps),
    both at most these."""

    ttft_ms: Millis | None = None
    # The old key reads as this one; an error it has is placed at the key the file wrote.
    tpot_ms: Millis | None = Field(default=None, validation_alias=AliasChoices("tpot_ms", OLD_TPOT_KEY))

    @model_validator(mode="before")
    @classmethod
    def _one_tpot_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tpot_ms" in data and OLD_TPOT_KEY in data:
            raise PydanticCustomError("slo_keys", f"give tpot_ms only: {OLD_TPOT_KEY} is its old name")
        return data

    def text(self) -> str:
        """``TTFT <= 500 ms, TPOT <= 40 ms``; "" when none is set (the dry run and the report)."""
        return ", ".join(([f"TTFT <= {self.ttft_ms:g} ms"] if self.ttft_ms is not None else [])
                         + ([f"TPOT <= {self.tpot_ms:g} ms"] if self.tpot_ms is not None else []))


LimitKey = Literal["ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms",
                   "tpot_p99_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms"]  # sla.LIMIT_KEYS
Positive = Annotated[float, Strict(), Field(gt=0, le=MAX_RATE, allow_inf_nan=False)]


class CapacitySpec(FrozenModel):
    """Capacity at an SLA (engine.method.capacity): per window and class, the highest load at which
    ``holds`` (and ``goodput``) hold, by a bracketing search from ``range``, each probe a row."""

    over: Literal["rate", "concurrency"] = "rate"
    range: tuple[Positive, Positive]  # the low and high end the search starts from
    holds: dict[LimitKey, Millis] = {}  # per rep: TTFT/TPOT/ITL at a percentile at most so many ms
    goodput: Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    resolution: Annotated[float, Strict(), Field(gt=0, le=10, allow_inf_nan=False)] = 0.1
    max_probes: Annotated[int, Strict(), Field(ge=2, le=100)] = 8
    classes: tuple[Name, ...] = ()  # none: every class measured at that kind of load


TIMED_REQUESTS = 100_000  # a rep sized by time: the requests it may send before its seconds end


class WorkloadSpec(FrozenModel):
    classes: Annotated[dict[Name, PromptClass], Field(min_length=1)]
    # Closed loop: C workers, each sending its next request when the last one ends.
    concurrency: tuple[Annotated[int, Strict(), Field(ge=1, le=MAX_CONCURRENCY)], ...] = ()
    # Open loop: requests arrive at this many a second (seeded), whatever is in flight.
    rate: tuple[Annotated[float, Strict(), Field(ge=MIN_RATE, le=MAX_RATE, allow_inf_nan=False)], ...] = ()
    # The rate's gaps: gamma of this shape (vLLM's name), 1 a Poisson process, below 1 burstier.
    # Below 0.01 nearly every gap is 0 in floating point: every arrival at once, no process at all.
    burstiness: Annotated[float, Strict(), Field(ge=0.01, le=100, allow_inf_nan=False)] = 1.0
    slo: SloSpec = SloSpec()
    reps: Annotated[int, Strict(), Field(ge=1, le=1000)] = defaults.REPS
    requests_per_rep: Annotated[int, Strict(), Field(ge=1, le=MAX_REP_REQUESTS)] | None = None
    # Reps sized by time: the workers keep sending until this many seconds, then the rep ends
    # with the requests in flight (at a rate: this many seconds of arrivals).
    rep_seconds: Annotated[float, Strict(), Field(ge=MIN_REP_SECONDS, le=MAX_SECONDS,
                                                  allow_inf_nan=False)] | None = None
    # Reps to a precision (engine.method.precision): reps are added to a row until the 95 %
    # interval on its delta against the control is at most this wide each side (a fraction).
    precision: Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)] | None = None
    max_reps: Annotated[int, Strict(), Field(ge=1, le=1000)] = defaults.MAX_REPS  # with precision
    max_tokens: Tokens = defaults.MAX_TOKENS
    # Every request without its own output length generates exactly max_tokens, past its end of
    # sequence, where the server has fields for that (engine.servers: ServerClient's
    # exact_length_fields): each rep then decodes the same tokens. Off by default: text past an
    # end of sequence is no reply a user reads (a draft model accepts it differently).
    exact_output: Bool = False
    sampling: Sampling = Sampling()
    knobs: dict[Str, Any] = {}
    shard: Shard = Shard()
    # The prefix cache before each warm pass and rep: keep (as the previous pass left it: reps
    # after the warm pass measure cache hits) or flush (empty, so every pass computes its prompts).
    cache: Literal["keep", "flush"] = defaults.CACHE
    capacity: CapacitySpec | None = None  # capacity at an SLA, per window and class

    def capacity_classes(self) -> list[str]:
        """The classes whose capacity is searched: those named, else every class measured at the
        search's kind of load (a trace has its own; a multi-turn class takes no rate)."""
        cap = self.capacity
        if cap is None:
            return []
        if cap.classes:
            return list(cap.classes)
        return [n for n, spec in self.classes.items() if spec.trace is None
                and not (spec.conversations is not None and cap.over == "rate")]

    def requests_for(self, concurrency: int) -> int:
        """Requests of a closed-loop pass (with rep_seconds: the most it may send)."""
        if self.rep_seconds and not self.requests_per_rep:
            return TIMED_REQUESTS
        return self.requests_per_rep or defaults.REQUESTS_PER_WORKER * max(concurrency, 1)

    def pass_size(self, concurrency: int) -> str:
        """A closed-loop pass's size as a reader plans by: its requests, or its seconds when it is
        sized by time (its request count is then only a cap)."""
        if self.rep_seconds and not self.requests_per_rep:
            return f"{self.rep_seconds:g} s"
        return str(self.requests_for(concurrency))

    def requests_at(self, rate: float) -> int:
        """Requests of an open-loop pass: ten seconds of arrivals (or rep_seconds), at least four."""
        return self.requests_per_rep or max(4, math.ceil((self.rep_seconds or 10) * rate))

    def arrivals(self) -> str:
        """How a rate row's requests arrive, in words (the dry run's and the report's)."""
        if self.burstiness == 1.0:
            return "Poisson arrivals"
        return f"gamma arrivals of shape {self.burstiness:g} (burstiness; 1 is Poisson)"

    def loads(self) -> list[tuple[int, float | None]]:
        """Every load a class is measured at, in order: (C, None) closed loop, then (0, rate)."""
        return [(c, None) for c in self.concurrency] + [(0, r) for r in self.rate]

    def loads_of(self, cls: str) -> list[tuple[int, float | None]]:
        """The loads class ``cls`` is measured at: a trace at its own times alone ((0, None), the
        row ``trace``), a multi-turn class at each concurrency (a worker owns a conversation),
        any other class at every load."""
        spec = self.classes[cls]
        if spec.trace is not None:
            return [(0, None)]
        if spec.conversations is not None:
            return [(c, None) for c in self.concurrency]
        return self.loads()

