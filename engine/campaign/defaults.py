"""What a key left out of a campaign file means. The schema (engine.campaign.spec) declares its
fields with these; a reader of a frozen campaign.yaml that must start fast (the console imports no
pydantic) reads the same values from here instead of restating them."""

from pathlib import Path
from typing import Final

# workload
REPS = 3  # reps per shape after the warm pass (the notes: three)
MAX_REPS = 20  # with workload.precision: the most reps a row takes
MAX_TOKENS = 128  # per request
# A closed-loop rep sized by requests: this many per worker (at least this many in all). Four
# give its steady window two request cycles per worker, which keep the window's figure within 2 %
# of the long run's in bench/steady_sim.py (engine.method.steady.MIN_CYCLES).
REQUESTS_PER_WORKER = 4
CACHE: Final = "keep"  # the prefix cache between passes: kept as the previous pass left it

# leak: a row at C >= MIN_CONCURRENCY that is leak-shaped (one rep alone below the others past a bar
# scaled to the run's noise and never under SPREAD, the declared noise: engine.method.leak) is
# void, rerun up to MAX_RERUNS
LEAK_MIN_CONCURRENCY = 8
LEAK_SPREAD = 0.10
LEAK_MAX_RERUNS = 2

# verdict: the campaign's error rate across its window rows, how it is kept, the equivalence margin
# of "no observable effect", and the noise between boots declared for where none was measured
ERROR_RATE = 0.05
CORRECTION: Final = "holm"
MARGIN = 0.05
BOOT_NOISE: float | None = None  # nothing declared: a shape whose noise was not measured gets no call
CONTROL_POSITION: Final = "both"
DETECT = 0.05  # ruler plan: the least effect worth calling
POWER = 0.8  # ruler plan: the share of such effects a design should call

SEED = 1234  # quality requests always send a seed; this one when the campaign has none
# The greedy prompts a campaign gets when its quality section names none (ships with ruler).
GREEDY_FILE = Path(__file__).resolve().parents[2] / "campaigns" / "prompts" / "greedy.txt"
