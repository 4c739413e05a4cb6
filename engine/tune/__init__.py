"""``ruler tune``: a search for the best launch flags, anchored to the control.

Each round is an ordinary run (its own run directory under the tune's ``runs/``, its journal, the
console by ``ruler attach``, ``--resume``, the campaign's places), whose control is the incumbent.
An *axes* round tries every flag of the space alone; a value is kept when the campaign's verdict
(engine.record.trade.cell_of) calls it better on the objective and its quality holds (lossless:
greedy identical and teacher-forced |dlogp| exact or close; lossy: KL mean at most ``kl_max``).
A *combine* round, after two winners or more, puts them together over the best single change.
It stops when an axes round keeps nothing, when the budget cannot pay for the next round, or after
``max_rounds``; ``tune.md`` and ``tune.json`` say what it recommends and what it ruled out.

One module per concern:

- :mod:`.spec`: the tune file, checked as a campaign is (file:line:col, exit 2);
- :mod:`.rounds`: what each round asks, which round follows which, the round's campaign;
- :mod:`.judge`: a round judged from its run (the verdict, the quality, the decision);
- :mod:`.budget`: boots and minutes before each round;
- :mod:`.journal`: the tune's own journal, ``tune.jsonl`` (typed, position-independent);
- :mod:`.loop`: the rounds run or resumed to the end;
- :mod:`.summary`: ``tune.json`` and ``tune.md``.

The command (``engine.commands.tune``) loads the file, makes the tune directory and hands the loop
what starts a run; the tuner itself starts no process.
"""
