"""The console's ``:`` command line (k9s's): a command for what each key does, and a few the keys
cannot say (a row by its key, the report). Parsed here; the app runs them."""

from __future__ import annotations

from dataclasses import dataclass

# name -> (its arguments, what it does): the help and the error for an unknown command list them.
COMMANDS: dict[str, tuple[str, str]] = {
    "rerun": ("[ROW|WINDOW]", "measure a void or failed row again, or a window's (the cursor's)"),
    "abort": ("", "stop the campaign (asks first)"),
    "advance": ("[SESSION]", "end the current window, go on with the next"),
    "rewarm": ("[SESSION]", "a warm pass before the next rep"),
    "pause": ("[SESSION]", "pause between reps"),
    "resume": ("[SESSION]", "resume"),
    "report": ("[--html]", "write report.md (and report.html) for this run"),
    "open": ("ROW|WINDOW", "the detail view of a row or window"),
    "filter": ("[WORDS]", "keep the windows whose text holds every word (none: all)"),
    "sort": ("COLUMN", "order the windows list (or the reps table, focused) by a column"),
    "log": ("", "the window's boot log in $PAGER"),
    "help": ("", "the keys and marks"),
    "quit": ("", "quit the console; the engine keeps running"),
}
ALIASES = {"q": "quit", "q!": "quit", "detail": "open", "?": "help"}


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
        raise CommandError("no command; known: " + ", ".join(COMMANDS))
    name = ALIASES.get(words[0].lower(), words[0].lower())
    if name not in COMMANDS:
        raise CommandError(f"unknown command {words[0]!r}; known: " + ", ".join(COMMANDS))
    args = words[1:]
    takes = COMMANDS[name][0]
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
    lines = [f"{name} {args}".strip() if not args.startswith(("[", "ROW")) else name
             for name, (args, _) in COMMANDS.items()]
    lines += ["report --html"]
    lines += [f"{name} {k}" for name in ("rerun", "open") for k in keys]
    low = prefix.lower()
    return [c for c in lines if c.startswith(low) and c != low]
