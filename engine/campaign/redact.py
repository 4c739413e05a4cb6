"""Secrets: what the campaign and the host give a server that is one (engine.campaign.secrets
says what is), and the one filter every recorded string passes (the warning for a secret put on a
server's command line, and `ruler validate`'s notes, are engine.campaign.checks.warnings's).

Only secrets are redacted: values of secret-looking names, and credentials by their shape under
any name. Redacting every passed-through value (``HF_HOME``, a model directory) would rewrite
unrelated text wherever the value happens to occur: boot facts, the frozen campaign
(``server: <redacted>cpp``).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from engine.campaign.secrets import (
    MIN_SECRET_LEN,
    command_words,
    credentials,
    entry,
    held,
    holds_secret,
    marker,
)
from engine.campaign.spec import Campaign
from engine.campaign.sweep import label
from engine.campaign.variables import expand
from engine.campaign.yamlmarks import load_marked
from engine.runtime.slurm.script import SECRET_VARIABLE
from engine.words import CONTROL

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


Secrets = Mapping[str, str] | Iterable[tuple[str, str]]  # name -> value, or (name, value) pairs


class Redactor:
    """Secret values never reach a file: every recorded string passes through here."""

    def __init__(self, secrets: Secrets) -> None:
        by_value: dict[str, str] = {}
        pairs = secrets.items() if isinstance(secrets, Mapping) else secrets
        # A value known by a variable is named by it (a flag that expands ${HF_TOKEN} too).
        for name, value in sorted(pairs, key=lambda nv: (not _ENV_NAME.fullmatch(nv[0]), nv)):
            if len(value) >= MIN_SECRET_LEN:
                by_value.setdefault(value, name)
        # Longest first, so a secret that contains another is replaced whole.
        self.secrets = sorted(by_value.items(), key=lambda kv: len(kv[0]), reverse=True)
        needles: dict[str, str] = {}
        for value, name in self.secrets:
            for form in _forms(value):
                needles.setdefault(form, name)
        self.needles = sorted(needles.items(), key=lambda kv: len(kv[0]), reverse=True)

    def __bool__(self) -> bool:
        return bool(self.needles)

    def marked(self, text: str) -> bool:
        """Whether ``text`` holds a marker of this filter: a secret was written there."""
        return any(marker(name) in text for _, name in self.secrets)

    def restore(self, text: str) -> str:
        """``text`` as this run's filter wrote it, each secret's marker back to its value: what
        the run froze at its start (its prompts) read back to be sent again. A name with several
        values (a sweep's) keeps its marker: which one stood there is not known."""
        names = [name for _, name in self.secrets]
        for value, name in self.secrets:
            if names.count(name) == 1 and marker(name) in text:
                text = text.replace(marker(name), value)
        return text

    def __call__(self, text: str) -> str:
        for value, name in self.needles:
            if value in text:
                text = text.replace(value, marker(name))
        if not any(v[:MIN_SECRET_LEN] in text or v[-MIN_SECRET_LEN:] in text for v, _ in self.needles):
            return text  # no piece of a secret: the common case, a line at a time
        return "".join(self._cut(line) for line in text.splitlines(keepends=True))

    def _cut(self, line: str) -> str:
        """``line`` with every piece of a secret in it replaced, each run of overlapping pieces
        whole (by the name of its longest): two secrets that share their start give two pieces
        over one place, and the shorter replaced alone would leave the rest of the longer."""
        spans = sorted(span for value, name in self.needles
                       for span in [*_first_pieces(line, value, name), *_last_pieces(line, value, name)])
        if not spans:
            return line
        runs: list[list[tuple[int, int, str]]] = []
        for span in spans:
            if runs and span[0] < max(end for _, end, _ in runs[-1]):
                runs[-1].append(span)
            else:
                runs.append([span])
        out, at = [], 0
        for run in runs:
            start, end = run[0][0], max(end for _, end, _ in run)
            longest = max(run, key=lambda s: s[1] - s[0])
            out += [line[at:start], marker(longest[2])]
            at = end
        return "".join([*out, line[at:]])


# A secret cut in two: by a line break (a server that wraps a long value, then goes on after a
# prefix of its own) or by a truncation (an error quoted up to so many characters, then marked as
# cut: "...", a closing quote). Its first piece and its last piece are replaced wherever they are,
# when at least MIN_SECRET_LEN long: a shorter piece is no more telling than any other few
# characters, and replacing it would corrupt unrelated text. A piece counts only where its cut
# side is one: the first piece's end at the line's end or before a mark of a cut (any space,
# then "...", a quote, a bracket: " (truncated)", " [...]"), the last piece's start at the line's
# start or after a space, an opening quote or bracket, or an ellipsis (a wrapped line's prefix,
# "srv  env: "). A secret that starts "llama-se" then leaves "llama-server listening" and
# "started llama-server, pid 7" as they are: text goes on past the cut.
_AFTER_CUT = frozenset(".\u2026'\"`)]}>([{<")
_BEFORE_CUT = frozenset("\u2026'\"`([{<")


def _cut_after(line: str, at: int) -> bool:
    """Whether a first piece that ends at ``at`` was cut there."""
    rest = line[at:].lstrip()
    return not rest or rest[0] in _AFTER_CUT


def _cut_before(line: str, at: int) -> bool:
    """Whether a last piece that starts at ``at`` was cut there."""
    return at == 0 or line[at - 1].isspace() or line[at - 1] in _BEFORE_CUT


def _first_pieces(line: str, value: str, name: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each start of ``value`` in ``line`` (its first MIN_SECRET_LEN
    characters and as many of those after as the line shares). A value that is a place (an
    absolute path, a URL: a socket under a secret-looking name) starts as any other path or URL
    on the host does: its start counts only where it ends the line, as a cut leaves it."""
    first = value[:MIN_SECRET_LEN]
    place = value.startswith("/") or "://" in value[:MIN_SECRET_LEN + 4]
    out: list[tuple[int, int, str]] = []
    i = line.find(first)
    while i >= 0:
        end = i + MIN_SECRET_LEN
        while end < len(line) and end - i < len(value) - 1 and line[end] == value[end - i]:
            end += 1
        if (not line[end:].strip() if place else _cut_after(line, end)):
            out.append((i, end, name))
        i = line.find(first, end)
    return out


def _last_pieces(line: str, value: str, name: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each end of ``value`` in ``line`` (its last MIN_SECRET_LEN
    characters and as many of those before as the line shares)."""
    last = value[-MIN_SECRET_LEN:]
    out: list[tuple[int, int, str]] = []
    i = line.find(last)
    while i >= 0:
        end = i + MIN_SECRET_LEN
        start = i
        while start > 0 and end - start < len(value) - 1 and line[start - 1] == value[-(end - start) - 1]:
            start -= 1
        if _cut_before(line, start):
            out.append((start, end, name))
        i = line.find(last, end)
    return out


def _forms(value: str) -> list[str]:
    """Every form in which a server's output or a record can hold ``value``: as it is, in lower
    and upper case (a name made of it, a header a server prints upper-cased), and as a window's
    name would spell it (engine.campaign.sweep.label); each of its lines, for a multi-line value
    (a PEM key) that a log holds a line at a time, or that a server prints with a prefix on each
    line; and each of those as a JSON string holds it (a newline, a quote or a non-ASCII
    character escaped), for a record serialised before it is written, and as Python's repr writes
    it, for a text quoted in an error (``{payload!r}``); and in base64 (:func:`_base64`)."""
    lines = [line.strip() for line in value.splitlines()]
    derived = [value.lower(), value.upper(), label(value)]
    plain = [value, *(line for line in [*lines, *derived] if len(line) >= MIN_SECRET_LEN and line != value)]
    out = dict.fromkeys(plain)
    for form in plain:
        escaped = [json.dumps(form, ensure_ascii=a)[1:-1] for a in (True, False)]
        # repr quotes with ' unless the text holds one and no ": then each ' is escaped.
        escaped += [repr(form)[1:-1], repr(form + "'\"")[1:-4]]
        for text in escaped:
            if len(text) >= MIN_SECRET_LEN:
                out.setdefault(text)
    for text in _base64(value):
        out.setdefault(text)
    return list(out)


def _base64(value: str) -> list[str]:
    """``value`` in base64 (a server that echoes a key as it sent it in a Basic header, or
    encoded): at each of the three offsets from the start of what was encoded that it may sit
    at, the characters its own bytes alone decide (a group that holds a byte before or after it
    differs with those bytes), in the standard and the URL-safe alphabet."""
    raw = value.encode()
    out: dict[str, None] = {}
    for k in range(3):
        text = base64.b64encode(b"\0" * k + raw).decode().rstrip("=")
        whole = text[4 if k else 0:len(text) - len(text) % 4]
        if len(whole) >= MIN_SECRET_LEN:
            out.update(dict.fromkeys([whole, whole.replace("+", "-").replace("/", "_")]))
    return list(out)


def campaign_secrets(campaign: Campaign, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(name, value) of every secret the campaign gives a server (engine.campaign.secrets.held):
    of each ``env`` entry, flag, command word and model or artifact path of every window as it
    boots (:func:`_given`), what is secret by its name or by its shape (a credential under any
    name), literal or expanded from ``${...}`` (a variable whose own name looks like no secret
    included)."""
    return [(name, secret) for name, value, _ in _given(campaign, environ) for secret in held(name, value)]


def _given(campaign: Campaign, environ: Mapping[str, str]) -> list[tuple[str, str, bool]]:
    """(name, value, whether it is an environment variable's) of each string the campaign gives a
    server or sends it, expanded: every window as it boots (the control's, a window's change over
    it, a window on another stack's own ``server``; a sweep's windows each with its value), its
    env, args, model and artifacts (engine.campaign.secrets.entry), and each word of its command
    (engine.campaign.secrets.command_words); the requests' knobs; the attached server's url."""
    out: list[tuple[str, str, bool]] = []
    commands = [campaign.process.command, campaign.docker.command]
    knobs: list[tuple[str, object]] = [*_knobs(campaign.workload.knobs)]
    for window in [CONTROL, *(w.name for w in campaign.windows)]:
        config = campaign.config_for(window)
        commands.append(config.command)
        places = [("model", config.model), *config.artifacts.items()]
        for entries, env in ((config.env.items(), True), ([*config.args.items(), *places], False)):
            for name, value in entries:
                for item in value if isinstance(value, tuple | list) else [value]:
                    out += [(n, v, env and n == name) for n, v in entry(name, _expanded(item, environ))]
        if window != CONTROL:
            knobs += _knobs(campaign.window(window).change.knobs)
    for command in commands:
        words = [w if isinstance(w, str) else "" for w in (_expanded(c, environ) for c in command or ())]
        out += [(name, word, False) for _, name, word in command_words(words)]
    out += [(name, v, False) for key, value in knobs for name, v in entry(key, value)]
    out += [(n, v, False) for n, v in entry("attach.url", campaign.attach.url)]
    return out


def _knobs(knobs: Mapping[str, object]) -> list[tuple[str, object]]:
    """(name, value) of each scalar a request's knobs hold, a nested one (a header) by its own key."""
    out: list[tuple[str, object]] = []
    for key, value in knobs.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            out += _knobs(item) if isinstance(item, Mapping) else [(str(key), item)]
    return out


def _expanded(value: object, environ: Mapping[str, str]) -> object:
    """A string as the server is given it, its ``${...}`` expanded; an unset one gives nothing to
    hide (the window is rejected for it); any other value as it is."""
    if not isinstance(value, str):
        return value
    try:
        return expand(value, environ)
    except KeyError:
        return None


def redactor_for(campaign: Campaign, environ: Mapping[str, str] | None = None) -> Redactor:
    """The one filter of a run: the secrets of this host's variables (a process server inherits
    them all, and an argument may expand any of them) and every secret the campaign gives a server
    (:func:`campaign_secrets`), each in every form a record may hold it."""
    env = dict(os.environ if environ is None else environ)
    return Redactor([*((k, secret) for k, v in env.items() for secret in held(k, v)),
                     *campaign_secrets(campaign, env)])


def references(campaign: Campaign, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each secret a server is given -> the variable a Slurm job script writes as ``${NAME}``
    instead of it: a value of an environment variable (of this host, or of a window's env) that
    is or holds a secret, whole, by that variable (a URL whose password alone is secret by the
    variable that holds all of it); any other secret (a flag's literal value, a password inside
    an argument) by a variable of its own (engine.runtime.slurm.script.SECRET_VARIABLE), which
    the job's environment carries."""
    env = dict(os.environ if environ is None else environ)
    given = [*env.items(), *((k, v) for k, v, is_env in _given(campaign, env) if is_env)]
    named = {value: name for name, value in sorted(given) if holds_secret(name, value)}
    rest = sorted({secret for _, secret in campaign_secrets(campaign, env)} - set(named))
    return named | {secret: f"{SECRET_VARIABLE}{i}" for i, secret in enumerate(rest, 1)}


# What stands for a credential found by its shape where no name gave it (a comment).
CREDENTIAL = "credential"
DUMPED = ("# ruler: the campaign as ruler parsed it, each secret replaced: a secret its source text\n"
          "# spells otherwise than its value (YAML escapes, a scalar split or folded over lines, a\n"
          "# quote doubled) cannot be cut from the text, so this copy's lines and comments are not\n"
          "# the source's.\n")


def frozen_copy(text: str, redact: Redactor) -> str:
    """The run's copy of a campaign whose source is ``text``: the text, each secret cut
    (:meth:`Redactor.__call__`), each credential by its shape (engine.campaign.secrets.credentials)
    and no comment (:func:`_uncommented`) -- when that text parses to the source's
    document with each of its strings so filtered (:func:`_scrubbed`). Where it does not (a secret
    the text spells otherwise than its value, so not cut: YAML escapes, a scalar split over lines;
    or a cut that broke the YAML: a quote doubled), that document dumped, with a header saying
    why its lines are not the source's. Either way, every scalar the copy gives holds no secret."""
    want = _scrubbed(load_marked(text).data, redact)
    cut = _uncommented(_shapes(redact(text)))
    try:
        if load_marked(cut).data == want:
            return cut
    except yaml.YAMLError:
        pass
    return DUMPED + yaml.safe_dump(want, allow_unicode=True, sort_keys=False, width=2**20)


def _shapes(text: str) -> str:
    """``text`` with each credential by its shape replaced, but a marker (a URL's password the
    filter already replaced is a password by its shape still)."""
    for found in sorted(credentials(text), key=lambda c: len(c.text), reverse=True):
        if "<redacted:" not in found.text:
            text = text.replace(found.text, marker(CREDENTIAL))
    return text


def _uncommented(text: str) -> str:
    """``text`` with every comment's text removed, its line kept (a file:line still points at the
    source's line): a comment is free text, where a secret can be spelt in any form (a command
    commented out, ``export HF_TOKEN=K``, prose), so none is copied. Every ``#`` at a line's start
    or after a space is cut, quotes or not: one inside a quoted or block scalar changes the
    document, and the copy is then dumped (:func:`frozen_copy`), never a comment kept."""
    return "\n".join(_COMMENT.sub("", line) for line in text.split("\n"))


_COMMENT = re.compile(r"(?:^|\s+)#.*")


def _scrubbed(data: Any, redact: Redactor) -> Any:
    """``data`` with each string in it, keys too, filtered as the copy's text is."""
    if isinstance(data, str):
        return _shapes(redact(data))
    if isinstance(data, dict):
        return {_scrubbed(k, redact): _scrubbed(v, redact) for k, v in data.items()}
    if isinstance(data, list):
        return [_scrubbed(item, redact) for item in data]
    return data
