"""Quality and ruler checks, per window against its session's control, with JSON receipts.

The phase (``phase.Quality``) runs after a window's measurement. In order:

- greedy equivalence (``greedy.json``): fixed prompts at temperature 0 with a seed; per prompt
  identical, or the index of the first differing character;
- the ruler check (``knobs.json``, ``knobs.py``): every request knob of the workload must act;
  an inert knob marks the window "ruler suspect";
- teacher-forced |Δlogp| (``teacher-forced.json``): the control's greedy continuations, scored
  token by token under this window's server, against the control's own scores; the control is
  scored twice ("self-score repeat-identical on N tokens");
- KL(oracle || window) for lossy windows (``kl.json``), over the oracle's top-k plus one tail
  bucket, beside the floor (the control against itself, and against the previous session's);
- "no observable effect" (``no-effect.json``, ``effect.py``): boot facts, throughput rows and
  greedy outputs all match the control;
- the tool-call probe (``tools.json``) when the campaign asks for it;
- control drift (run-level ``drift.json``) each time a control of a later session finishes, and
  against a baseline run given with ``ruler run --baseline RUN_DIR``.

Every verdict is a journal event ``verdict`` (session, window, check, verdict, summary, file,
figures) and a column of the run-level ``verdicts.csv``. Checks and their verdicts (the words are
``engine.words.Check`` and ``Verdict``):

==============  ==========================================================================
knobs           acts | ruler suspect
greedy          identical | diverged | no reference; a control: reference (first session),
                else against the previous session's control; a window on another stack:
                agreement (identical of n, a figure)
teacher_forced  exact | close (p99 <= 0.05 nats) | differs
self_score      repeat-identical | repeat-differs                    (controls)
kl              above floor | at floor (lossy windows); floor (controls)
no_effect       no observable effect | observable effect | undetermined (a row void or missing;
                not on a window on another stack)
tool_probe      ok | failed | undetermined (the chat template renders no tools)
drift           within noise | drift                                 (controls)
any check       error | unsupported (the server cannot answer it)
==============  ==========================================================================

With ``control_position: last`` a window runs before its control. From the second session on it is
compared with the previous session's control (and says so); in the first it records its greedy
outputs ("no reference") and the control settles their greedy verdict when it runs.
"""

from typing import Any

from engine.quality.effect import IGNORED_FACT

__all__ = ["IGNORED_FACT", "Quality"]


def __getattr__(name: str) -> Any:
    """``Quality`` on first use: the phase imports the HTTP client and the probes (0.2 s), which
    readers of receipts (``ruler report``, the console) importing ``engine.quality.effect`` do not
    need."""
    if name == "Quality":
        from engine.quality.phase import Quality

        return Quality
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
