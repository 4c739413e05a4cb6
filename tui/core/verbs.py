"""The operator's verbs, each written once: its key and its word in the footer, its entry in the
command palette, its lines in the help (``?``) and its ``:`` command (k9s's command line: what each
key does, and what no key says: a row by its key, the report). The run screen's bindings, the
palette, the help and the ``:`` line are all made from :data:`VERBS`; each lists them in its own
order (:data:`LINE`, :data:`HELP`). Parsed here; the run screen runs them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verb:
    """One thing the operator can do. ``name`` is the run screen's action (``action_<name>``) and,
    where ``line`` is set, the ``:`` command."""

    name: str
    key: str = ""  # Textual's key name ("" none); several, spaced, pass the key to the action
    shown: str = ""  # the key as the palette and the help write it
    footer: str = ""  # the binding's word; shown in the footer when ``show``
    show: bool = False
    title: str = ""  # the command palette's entry ("" none), with its description
    about: str = ""
    help: str = ""  # the help's line (markup); a line break continues it on the next row
    line: str | None = None  # the ``:`` command's arguments ("" none; None: no ``:`` command)
    says: str = ""  # what the ``:`` command does
    engine: bool = False  # sent to the engine: greyed once the run is over

    @property
    def entry(self) -> str:
        """The palette's title, with the key that does the same."""
        return f"{self.title} ({self.shown})" if self.shown else self.title


# The sort keys (k9s's, shift): what each orders by; N goes back to the campaign's order.
SORT_BY = {"N": "campaign order", "S": "status", "D": "delta", "T": "tok/s", "P": "spread"}

# In the bindings' order, which is the footer's and the palette's.
VERBS: tuple[Verb, ...] = (
    # Textual's own goes into ~/Downloads, which a server may not have: into the run directory.
    Verb("screenshot", title="Screenshot (an SVG in the run directory)", about="Save the screen as it is"),
    Verb("abort", "a", "a", "abort", True, "Abort the campaign", "Stop the campaign; asks first",
         "abort the campaign (asks first)", "", "stop the campaign (asks first)", engine=True),
    Verb("advance", "n", "n", "advance", True, "Advance", "End the current window, go on with the next",
         "advance: end the current window, go on with the next", "[SESSION]",
         "end the current window, go on with the next", engine=True),
    Verb("rewarm", "w", "w", "rewarm", True, "Rewarm", "A warm pass before the next rep",
         "rewarm: a warm pass before the next rep", "[SESSION]", "a warm pass before the next rep",
         engine=True),
    Verb("rerun", "r", "r", "rerun", True, "Rerun", "Measure the void or failed row under the cursor "
         "again, or the window's", "rerun the void or failed row under the cursor (reps table), or "
         "every such row of the window (windows list): its window boots again", "[ROW|WINDOW]",
         "measure a void or failed row again, or a window's (the cursor's)", engine=True),
    Verb("pause", "p", "p", "pause", True, "Pause / resume", "Pause or resume between reps",
         "pause / resume between reps", "[SESSION]", "pause between reps", engine=True),
    Verb("search", "slash", "/", "filter", True, "Filter the windows", "Keep the windows whose text "
         "holds the words typed; on the log, find a line", "filter the windows: words of a name, "
         "status, axis or note ([b]!word[/b]: without it); on the log, find a line ([b]enter[/b] "
         "next older match); [b]esc[/b] clears"),
    Verb("command_line", "colon", ":", "cmd", True, "Command line",
         ":rerun ROW, :report, :open ROW, :filter, :sort", "command line: [b]rerun ROW[/b], "
         "[b]report[/b], [b]open ROW[/b], [b]filter WORDS[/b], [b]sort COLUMN[/b], [b]advance "
         "s2[/b]...; tab completes"),
    # The log's keys: in the help and the palette, not the footer.
    Verb("follow", "f", "f", "follow", False, "Follow the log on/off", "Toggle following the live log",
         "follow the log on / off"),
    Verb("raw_log", "v", "v", "raw", False, "Raw log / serving view", "Every line of the server log, "
         "or only what matters once it serves", "the raw log, every line / the serving view: once "
         "the server is ready, errors, warnings and the lines ruler reads; the rest folded"),
    Verb("sweep", "t", "t", "sweep", False, "Sweep view", "Each swept value against the control, per "
         "class and load, and the answer in words", "the sweep view: each swept value against the "
         "control, and the answer"),
    Verb("help", "question_mark", "?", "help", True, "Help", "Keys and marks", line="",
         says="the keys and marks"),
    Verb("quit", "q", "q", "quit", True, "Quit the console", "The engine keeps running",
         "quit the console: [b]the engine keeps running[/b];\nreattach with [b]ruler attach "
         "RUN_DIR[/b]\nonce the run is over its keys are greyed and a banner says what to type next",
         "", "quit the console; the engine keeps running"),
    Verb("live", "escape", "esc", "live", help="back to the live window and shape"),
    Verb("sort", " ".join(SORT_BY), "S D T P", "sort", help="sort by status, delta (windows), tok/s, "
         "spread (reps); again: the other way; [b]N[/b] campaign order; a click on a column's header "
         "sorts by it", line="COLUMN", says="order the windows list (or the reps table, focused) by "
         "a column"),
    # The : line's alone.
    Verb("resume", line="[SESSION]", says="resume", engine=True),
    Verb("report", line="[--html]", says="write report.md (and report.html) for this run"),
    Verb("open", line="ROW|WINDOW", says="the detail view of a row or window"),
    Verb("filter", line="[WORDS]", says="keep the windows whose text holds every word (none: all)"),
    Verb("log", line="", says="the window's boot log in $PAGER"),
)
VERB = {v.name: v for v in VERBS}
ENGINE_VERBS = frozenset(v.name for v in VERBS if v.engine)  # they need an engine

# The : line's commands in its order (the help's, an unknown command's error and completion's).
LINE = ("rerun", "abort", "advance", "rewarm", "pause", "resume", "report", "open", "filter", "sort",
        "log", "help", "quit")
ALIASES = {"q": "quit", "q!": "quit", "detail": "open", "?": "help"}

# The help's rows in its order: a verb by name, or a key no verb has (the tables' own).
MOVES = {
    "↑ ↓": "pick a window (or a row); a click picks too",
    "enter": "everything about the window or row under the cursor: the whole reason, every rep, the "
             "interval and how it was formed, the boot facts, the server command ([b]c[/b] copies "
             "it), the receipts; [b]l[/b] its boot log in $PAGER; [b]esc[/b] back",
    "tab": "windows list -> reps table -> log (the heavy line marks it)",
    "ctrl+p": "command palette (every key is there too)",
}
HELP = ("↑ ↓", "enter", "tab", "search", "command_line", "sort", "abort", "advance", "rewarm", "rerun",
        "pause", "follow", "raw_log", "live", "ctrl+p", "quit", "sweep")


def help_rows() -> list[tuple[str, str]]:
    """(key, what it does) in the help's order; a verb's further lines under an empty key."""
    rows: list[tuple[str, str]] = []
    for name in HELP:
        if name in MOVES:
            rows.append((name, MOVES[name]))
            continue
        first, *more = VERB[name].help.split("\n")
        rows += [(VERB[name].shown, first), *(("", m) for m in more)]
    return rows


class CommandError(ValueError):
    """A command line the console cannot run: the message says why and what it knows."""


@dataclass(frozen=True)
class Command:
    name: str
    args: list[str]


def parse(line: str) -> Command:
    """``rerun s1-ngram/prose/c4`` -> Command("rerun", ["s1-ngram/prose/c4"])."""
    words = line.strip().lstrip(":").split()
    if not words:
        raise CommandError("no command; known: " + ", ".join(LINE))
    name = ALIASES.get(words[0].lower(), words[0].lower())
    if name not in LINE:
        raise CommandError(f"unknown command {words[0]!r}; known: " + ", ".join(LINE))
    args = words[1:]
    takes = VERB[name].line or ""
    if not takes and args:
        raise CommandError(f"{name} takes no argument")
    if takes and not takes.startswith("[") and not args:
        raise CommandError(f"usage: {name} {takes}")
    if name == "report" and args not in ([], ["--html"]):
        raise CommandError("usage: report [--html]")
    return Command(name, args)


def completions(prefix: str, keys: list[str]) -> list[str]:
    """Command lines that start with ``prefix``: the commands, then each with a key of the run
    (rows and windows), in that order."""
    lines = [name if (VERB[name].line or "").startswith(("[", "ROW")) else
             f"{name} {VERB[name].line}".strip() for name in LINE]
    lines += ["report --html"]
    lines += [f"{name} {k}" for name in ("rerun", "open") for k in keys]
    low = prefix.lower()
    return [c for c in lines if c.startswith(low) and c != low]
