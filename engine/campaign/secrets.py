"""What is a secret, and what a secret's value is replaced with wherever ruler writes: the rules
engine.campaign.redact filters by and engine.campaign.sweep names windows by (a window of a sweep
over a secret is named by its position, never by its value). A value is secret by its name
(:func:`is_secret`: ``HF_TOKEN``, ``--api-key``), or, whatever its name, by its own shape
(:func:`credentials`: a URL's password, a token as its issuer writes it)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from typing import NamedTuple
from urllib.parse import unquote

# HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, OPENAI_KEY, HF_AUTH, --api-key,
# SESSION_COOKIE...: these words anywhere in a name.
SECRET_PART = re.compile(r"KEY|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE", re.I)
# GITHUB_PAT, --github-pat: a personal access token, a word of its own (PATH, --patience are not).
SECRET_WORDS = frozenset({"PAT"})
# A token is a credential where it ends the name (HF_TOKEN, AWS_SESSION_TOKEN, --token); the
# servers' knobs count text tokens (MAX_TOKENS, --long-prefill-token-threshold,
# --kt-max-deferred-experts-per-token, EOS_TOKEN_ID), and their values, read everywhere in a
# record, are no credential. The words before TOKEN that make it a text token:
TEXT_TOKEN = frozenset({"PER", "FIRST", "LAST", "NEXT", "NEW", "EOS", "BOS", "PAD", "UNK", "SEP",
                        "CLS", "MASK", "STOP", "SPECIAL", "IMAGE", "VIDEO", "AUDIO"})
# A shorter value is no credential (a flag like USE_AUTH_TOKEN=true) and replacing it would
# corrupt unrelated text.
MIN_SECRET_LEN = 8


# The short forms of secret flags, whose own names say nothing (llama-server's -hft is --hf-token).
SECRET_SHORT_FLAGS = frozenset({"-hft"})


def is_secret(name: str) -> bool:
    """Whether a variable or flag of this name holds a secret (docs/campaign.md, "Secrets")."""
    if name in SECRET_SHORT_FLAGS or SECRET_PART.search(name):
        return True
    words = re.findall(r"[A-Z0-9]+", name.upper())
    if SECRET_WORDS.intersection(words):
        return True
    return bool(words) and words[-1].endswith("TOKEN") and (
        len(words) == 1 or words[-1] != "TOKEN" or words[-2] not in TEXT_TOKEN)


# The secret flags the servers read that take no value (tests/fixtures/names): after any other,
# the next word is its value whatever it starts with.
BARE_SECRET_FLAGS = frozenset({"--cors-credentials", "--no-cors-credentials", "--allow-credentials",
                               "--no-allow-credentials"})


def takes_secret(flag: str) -> bool:
    """Whether the word after ``flag`` on a command line is a secret, whatever it starts with:
    ``flag`` is a secret flag (:func:`is_secret`) that takes a value."""
    return flag.startswith("-") and "=" not in flag and flag not in BARE_SECRET_FLAGS and is_secret(flag)


def marker(name: str) -> str:
    """What a secret's value is replaced with: it names the variable and stays valid plain YAML."""
    return f"<redacted:{name}>"


class Credential(NamedTuple):
    text: str  # the part of a value that is secret
    what: str  # what it is, as `ruler validate` says it


def _token(what: str, pattern: str) -> tuple[str, re.Pattern[str]]:
    """A token that starts a word: ``task-...`` holds no ``sk-`` key."""
    return what, re.compile(rf"(?<![A-Za-z0-9])(?P<secret>{pattern})")


# The credentials whose issuers give them a shape of their own, each a value no benchmark knob
# takes; the first that matches a part of a value says what it is.
SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(
        r"(?P<secret>-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z))", re.S)),
    _token("a Hugging Face token", r"hf_[A-Za-z0-9]{30,}"),
    _token("a GitHub token", r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"),
    _token("a GitLab token", r"glpat-[A-Za-z0-9_-]{20,}"),
    # OpenAI's sk- and sk-proj-, Anthropic's sk-ant-: random, so a capital and a digit among them
    # (sk-learn-compatible-pipeline is a name).
    _token("an API key", r"sk-(?=[A-Za-z0-9_-]*[A-Z])(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"),
    _token("a Google API key", r"AIza[A-Za-z0-9_-]{35}"),
    _token("a Slack token", r"xox[abpr]-[0-9]+-[A-Za-z0-9-]{8,}"),
    _token("an AWS access key id", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    _token("a JSON web token", r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"),
    # An opaque token, said so by its header: a digit among it (a "bearer of news" is prose).
    ("a bearer token", re.compile(r"(?:\bBearer|\bAuthorization:\s*\w+)\s+"
                                  r"(?P<secret>(?=[^\s]*[0-9])[A-Za-z0-9._~+/-]{8,}=*)")),
)
# A URL's authority (user:password@host), up to its path, query or fragment.
_AUTHORITY = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?P<authority>[^\s/?#]*)")


def credentials(value: str) -> list[Credential]:
    """Every part of ``value`` that is a credential by its shape, whatever name holds it: a URL's
    password (alone, where it is MIN_SECRET_LEN characters or longer, so the URL stays readable;
    a shorter one with as much of the URL around it as makes so many), and each token of a
    shape of :data:`SHAPES`."""
    found: list[Credential] = []
    spans: list[tuple[int, int]] = []
    for what, pattern in SHAPES:
        for m in pattern.finditer(value):
            start, end = m.span("secret")
            if not any(a <= start < b or a < end <= b for a, b in spans):
                spans.append((start, end))
                found.append(Credential(m["secret"], what))
    for m in _AUTHORITY.finditer(value):
        userinfo, at, host = m["authority"].rpartition("@")
        user, _, password = userinfo.partition(":")
        if not at or not password:
            continue
        wider = [password, f"{user}:{password}", m["authority"]]
        found.append(Credential(next((w for w in wider if len(w) >= MIN_SECRET_LEN), m[0]),
                                "a password in a URL"))
        if len(unquote(password)) >= MIN_SECRET_LEN and unquote(password) != password:
            found.append(Credential(unquote(password), "a password in a URL"))  # as a server decodes it
    return found


def held(name: str, value: str) -> list[str]:
    """What of ``value``, given under ``name``, is secret: all of it under a secret's name, else
    each credential in it."""
    return [value] if is_secret(name) else [c.text for c in credentials(value)]


def holds_secret(name: str, value: object) -> bool:
    """Whether ``value``, given under ``name``, is or holds a secret: a sweep's windows over it
    are named by position, an environment entry is passed by name and never recorded."""
    return is_secret(name) or (isinstance(value, str) and bool(credentials(value)))


def command_words(argv: Sequence[str] | None) -> list[tuple[int, str, str]]:
    """(index, name, word) of each word of a command: a flag's value (``--api-key K`` or
    ``--api-key=K``) named by that flag, as its ``args:`` would give it, any other word (a flag's
    own name among them, which only a credential's shape makes secret) by ``command``; and after
    each, what is given inside it (:func:`inner`): an assignment (``env HF_TOKEN=K``,
    ``--env=HF_TOKEN=K``), a shell string's flags (``sh -c "exec server --api-key K"``), at the
    same index. The word after a secret flag that takes a value (:func:`takes_secret`) is its
    value whatever it starts with (``--api-key -K``: a URL-safe key may start with ``-``); after
    any other flag, a word that starts with ``-`` is the next flag."""
    out: list[tuple[int, str, str]] = []
    flag = ""  # the flag the next word may be the value of
    secret = ""  # the secret flag whose further values the words at hand may be
    for i, item in enumerate(argv or ()):
        name, eq, value = item.partition("=")
        if secret and more_value(item):
            out.append((i, secret, item))
            continue
        secret = ""
        if flag and takes_secret(flag) and not is_secret_flag(name):
            out.append((i, flag, item))  # all of it secret: nothing inside it to name
            secret, flag = flag, ""
        elif flag and not item.startswith("-"):
            out += [(i, flag, item), *((i, n, v) for n, v in inner(item))]
            flag = ""
        elif name.startswith("-") and eq:
            out += [(i, name, value), *((i, n, v) for n, v in inner(value))]
            flag = ""
        else:
            out += [(i, "command", item), *((i, n, v) for n, v in inner(item))]
            flag = item if item.startswith("-") else ""
    return out


# The secret flags llama-server, vLLM and SGLang take (tests/fixtures/names: the test pins them).
SERVER_SECRET_FLAGS = frozenset({
    "--admin-api-key", "--api-key", "--api-key-file", "--hf-token", "--ssl-key-file", "--ssl-keyfile",
    "--ssl-keyfile-password", "--watermark-key", "--watermark-key-b", "-hft"})


def is_secret_flag(word: str) -> bool:
    """Whether the word after a secret flag is the next secret flag of a server rather than its
    value: vLLM's ``--hf-token`` may take no value (the cached login), ``--hf-token --api-key K``.
    Any other word is its value whatever it looks like (``--api-key -K``, ``--api-key
    --lower-case-secret``: llama-server takes the next word as the value whatever it is)."""
    return word in BARE_SECRET_FLAGS or word in SERVER_SECRET_FLAGS


# A further key: vLLM's --api-key takes several (--api-key K1 K2). Only a word shaped like a
# key (letters and a digit, no shell syntax, no path) counts as one: after a key, a shell string
# goes on with its own words ("$@", 2>&1, | tee run.log), which must not become secrets (each
# secret's text is cut from every record, a journal's keys included).
_MORE_KEY = re.compile(r"(?=\S*[0-9])(?=\S*[A-Za-z])[A-Za-z0-9_+=~-]{8,}")


def more_value(word: str) -> bool:
    """Whether a word after a secret flag's value is another value of it (:data:`_MORE_KEY`)."""
    return not word.startswith("-") and bool(_MORE_KEY.fullmatch(word))


def entry(name: str, value: object) -> list[tuple[str, str]]:
    """(name, text) of each value an entry ``name: value`` of an ``env``, ``args`` or ``knobs``
    gives: its value as the server is given it (a number as its text; true, false and null give
    none), under the flag its name is (``--hf-token=K: true`` gives ``K`` under ``--hf-token``),
    and what is given inside either (:func:`inner`)."""
    out: list[tuple[str, str]] = []
    flag, eq, given = name.partition("=")
    if eq and (flag.startswith("-") or _ENV_NAME.fullmatch(flag)):
        out += [(flag, given), *inner(given)]
    else:
        flag = name
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        text = str(value)
        out += [(flag, text), *inner(text)]
    return out


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def inner(text: str, depth: int = 2) -> Iterator[tuple[str, str]]:
    """(name, value) of each flag's or variable's value given inside a word or a text of words
    (a shell string, split as the shell would, else at whitespace): ``--api-key K``,
    ``--api-key=K``, ``-hft K`` (the word after a secret flag whatever it starts with:
    :func:`takes_secret`), ``HF_TOKEN=K``, and inside an assignment's value, the same
    (``--env=HF_TOKEN=K``; ``--export=ALL,HF_TOKEN=K``, a list at its commas)."""
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    value_of = ""  # the secret flag the words at hand are the values of
    for i, word in enumerate(words):
        if value_of:
            value_of = value_of if more_value(words[i + 1] if i + 1 < len(words) else "") else ""
            continue  # a secret flag's value, given above: nothing inside it to name
        for piece in dict.fromkeys([word, *(word.split(",") if "," in word else [])]):
            name, eq, value = piece.partition("=")
            if eq and (name.startswith("-") or _ENV_NAME.fullmatch(name)):
                yield name, value
                if depth > 1:
                    yield from inner(value, depth - 1)
        following = words[i + 1] if i + 1 < len(words) else ""
        if word.startswith("-") and "=" not in word and takes_secret(word):
            if following and not is_secret_flag(following):
                yield word, following
                value_of = word
                for later in words[i + 2:]:
                    if not more_value(later):
                        break
                    yield word, later
        elif word.startswith("-") and "=" not in word and following and not following.startswith("-"):
            yield word, following
