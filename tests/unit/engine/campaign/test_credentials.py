"""Secrets by their value: a URL's password and the well-known shapes of a credential are secret
whatever name holds them (issue 49's repeat: HF_ENDPOINT: https://user:pw@hf.example leaked).
Which names are secret, and the filter itself, are tests/unit/engine/campaign/test_redact.py's."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.campaign.redact import Redactor
from engine.campaign.secrets import command_words, credentials, entry, held
from engine.campaign.sweep import label

# One strategy per shape: each as its issuer writes it.
SHAPES = {
    "hugging face": st.from_regex(r"hf_[A-Za-z0-9]{34,40}", fullmatch=True),
    "openai": st.from_regex(r"sk-(proj-|ant-api03-)?[A-Za-z0-9_-]{8,40}[A-Z][0-9][A-Za-z0-9_-]{10,50}",
                            fullmatch=True),
    "google": st.from_regex(r"AIza[0-9A-Za-z_-]{35}", fullmatch=True),
    "gitlab": st.from_regex(r"glpat-[0-9A-Za-z_-]{20}", fullmatch=True),
    "github": st.from_regex(r"gh[pousr]_[A-Za-z0-9]{36}", fullmatch=True),
    "github fine-grained": st.from_regex(r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}", fullmatch=True),
    "slack": st.from_regex(r"xox[abpr]-[0-9]{10,13}-[0-9]{10,13}-[A-Za-z0-9]{24}", fullmatch=True),
    # An opaque token: its header's word says what it is (the written form is the header).
    "bearer": st.from_regex(r"(Authorization: Bearer|Bearer|Authorization: Token) "
                            r"[A-Za-z0-9._~+/-]{4,20}[0-9][A-Za-z0-9._~+/-]{3,20}=*", fullmatch=True),
    "aws": st.from_regex(r"(AKIA|ASIA)[0-9A-Z]{16}", fullmatch=True),
    "jwt": st.from_regex(r"eyJ[A-Za-z0-9_-]{10,40}\.eyJ[A-Za-z0-9_-]{10,80}\.[A-Za-z0-9_-]{20,60}",
                         fullmatch=True),
    "pem": st.builds(lambda kind, lines: (f"-----BEGIN {kind}PRIVATE KEY-----\n" + "\n".join(lines)
                                          + f"\n-----END {kind}PRIVATE KEY-----"),
                     st.sampled_from(["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED "]),
                     st.lists(st.from_regex(r"[A-Za-z0-9+/]{64}", fullmatch=True), min_size=1,
                              max_size=4)),
}
# Text around a credential, and what ends it there: a space, a quote, an '=' or a ','...
AROUND = st.text(st.characters(codec="utf-8"), max_size=30)
SEPARATOR = st.sampled_from([" ", "=", ": ", '"', "'", ",", ";", "\n", "\t", "(", ")"])
USER = st.from_regex(r"[A-Za-z0-9._-]{0,12}", fullmatch=True)
PASSWORD = st.from_regex(r"[A-Za-z0-9._~!$&'()*+,;=%:-]{1,30}", fullmatch=True)
HOST = st.from_regex(r"[a-z0-9-]{1,12}(\.[a-z]{2,6}){0,2}(:[0-9]{2,5})?", fullmatch=True)
SCHEME = st.sampled_from(["https", "http", "s3", "redis", "postgresql", "git+https"])


def survives(secret: str, redact: Redactor, value: str) -> list[str]:
    """The forms of ``value`` a record may hold (as written, lower- and upper-cased, as a
    window's name spells it) that still hold ``secret`` in any case once redacted."""
    forms = [value, value.lower(), value.upper(), f"sw-{label(secret)}"]
    return [form for form in forms if secret.lower() in redact(form).lower()]


@settings(max_examples=300)
@given(shape=st.sampled_from(sorted(SHAPES)), data=st.data(), before=AROUND, after=AROUND,
       left=SEPARATOR, right=SEPARATOR)
def test_a_credential_of_a_known_shape_never_survives_whatever_its_name(
        shape: str, data: st.DataObject, before: str, after: str, left: str, right: str) -> None:
    written = data.draw(SHAPES[shape])
    secret = written.rsplit(" ", 1)[-1] if shape == "bearer" else written  # a header's token
    value = f"{before}{left}{written}{right}{after}"
    redact = Redactor([("HF_ENDPOINT", found) for found in held("HF_ENDPOINT", value)])
    assert not survives(secret, redact, value)
    assert "<redacted:HF_ENDPOINT>" in redact(value)


@settings(max_examples=300)
@given(scheme=SCHEME, user=USER, password=PASSWORD, host=HOST,
       path=st.from_regex(r"(/[A-Za-z0-9._-]{1,10}){0,3}", fullmatch=True), before=AROUND,
       left=SEPARATOR)
def test_a_password_in_a_url_never_survives_and_the_url_stays_readable(
        scheme: str, user: str, password: str, host: str, path: str, before: str, left: str) -> None:
    url = f"{scheme}://{user}:{password}@{host}{path}"
    value = f"{before}{left}{url}"
    redact = Redactor([("HF_ENDPOINT", found) for found in held("HF_ENDPOINT", value)])
    for form in (value, value.lower(), value.upper()):
        said = redact(form).lower()
        assert f":{password}@".lower() not in said, (form, said)
        if len(password) >= 8:  # the password alone is replaced: the rest of the URL is as it was
            assert password.lower() not in said
            # (unless the URL shares the password's first or last 8 characters: a cut secret's)
            rest = f"{scheme}://{user}@{host}{path}".lower()
            assume(not any(form[:8] in rest or form[-8:] in rest  # its window-name form's too
                           for form in (password.lower(), label(password).lower())))
            assert f"{scheme}://{user}:<redacted:hf_endpoint>@{host}{path}".lower() in said


def test_the_url_keeps_its_user_and_host() -> None:
    value = "https://user:pwSecretInUrl9988@hf.example/api"
    redact = Redactor([("HF_ENDPOINT", found) for found in held("HF_ENDPOINT", value)])
    assert redact(f"endpoint {value}") == "endpoint https://user:<redacted:HF_ENDPOINT>@hf.example/api"
    # A password shorter than a credential is replaced with as much around it as makes one.
    short = Redactor([("MIRROR", found) for found in held("MIRROR", "http://u:pw@h.example/x")])
    assert short("get http://u:pw@h.example/x") == "get http://<redacted:MIRROR>/x"


@pytest.mark.parametrize(("value", "what"), [
    ("hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "a Hugging Face token"),
    ("Bearer ghp_abcdefghijklmnopqrstuvwxyz0123456789", "a GitHub token"),
    ("AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
    ("https://user:pwSecretInUrl9988@hf.example", "a password in a URL"),
    ("Authorization: Bearer 0123456789abcdef", "a bearer token"),
])
def test_what_a_credential_is_said_to_be(value: str, what: str) -> None:
    [found] = credentials(value)
    assert found.what == what and found.text in value


# A campaign's real values: flags' values, model paths, names of knobs, URLs without a password.
WORD = st.from_regex(r"[a-z][a-z0-9]{0,7}", fullmatch=True)
BENIGN = st.one_of(
    st.integers().map(str), st.floats(allow_nan=False).map(str),
    st.sampled_from(["auto", "fp8", "fp8_e5m2", "q8_0", "f16", "true", "hf_transfer", "hf_xet",
                     "--kv-cache-dtype", "--tokenizer", "max_tokens", "ngram-simple", "sk-learn",
                     "task-oriented-dialogue", "draft-simple", "0.9", "AKIA", "eyJ", "Bearer",
                     "-----BEGIN PUBLIC KEY-----", "-----BEGIN CERTIFICATE-----"]),
    st.builds(lambda parts, snap, leaf: (f"/models/hf_cache/models--{'--'.join(parts)}"
                                         f"/snapshots/{snap}/{leaf}"),
              st.lists(WORD, min_size=1, max_size=3), st.from_regex(r"[0-9a-f]{40}", fullmatch=True),
              st.from_regex(r"[A-Za-z0-9_.-]{1,30}\.gguf", fullmatch=True)),
    st.builds(lambda scheme, user, host, path: f"{scheme}://{user}{host}{path}", SCHEME,
              st.sampled_from(["", "user@", "git@", ":@"]), HOST,
              st.from_regex(r"(/[A-Za-z0-9._~-]{1,16}){0,4}(\?[a-z]{1,6}=[A-Za-z0-9]{1,12})?",
                            fullmatch=True)),
    st.lists(WORD, min_size=1, max_size=6).map("_".join),
    st.lists(WORD, min_size=1, max_size=6).map("-".join),
)


@settings(max_examples=500)
@given(value=BENIGN)
def test_a_benchmarks_own_values_are_no_credential(value: str) -> None:
    assert credentials(value) == []
    redact = Redactor([("LLAMA_ARG_MODEL", found) for found in held("LLAMA_ARG_MODEL", value)])
    assert redact(f"boot: {value} ok") == f"boot: {value} ok"


SECRET_VALUE = st.from_regex(r"[A-Za-z0-9_-]{8,30}", fullmatch=True)  # "-" first too (H7)


@settings(max_examples=60, deadline=None)
@given(value=SECRET_VALUE, flag=st.sampled_from(["--api-key", "--hf-token", "-hft"]),
       variable=st.sampled_from(["HF_TOKEN", "WANDB_API_KEY", "GITHUB_PAT"]))
def test_a_secret_given_inside_a_word_is_found_under_its_name(value: str, flag: str, variable: str) -> None:
    """Issue 49, round 5 (H5): the value in a flag's own name (an args key), an assignment word
    (``env NAME=V``, ``docker --env=NAME=V``, ``--export=ALL,NAME=V``) and a shell string's
    ``--flag V``: each is the value of a secret's name, as its args: entry would give it."""
    assert (flag, value) in entry(f"{flag}={value}", True)
    assert (flag, value) in entry(flag, value)
    assert (flag, str(12345678912)) in entry(flag, 12345678912) and entry(flag, True) == []
    argv = ["env", f"{variable}={value}", "sh", "-c", f"exec server {flag} {value} \"$@\"",
            f"--env={variable}={value}", f"--export=ALL,{variable}={value}", f"{flag}={value}"]
    found = {(name, word) for _, name, word in command_words(argv)}
    assert {(variable, value), (flag, value)} <= found
    assert all(held(name, word) == [word] for name, word in found if word == value)


@pytest.mark.parametrize("flag", ["--api-key", "--hf-token", "-hft", "--ssl-keyfile-password"])
def test_a_secret_flags_value_that_starts_with_a_dash_is_its_value(flag: str) -> None:
    """Issue 49c, H7: a URL-safe key may start with '-' (token_urlsafe gives one in 64); the word
    after a secret flag that takes a value is that value whatever it starts with, on a command
    line and inside a shell string; the word after it is no value of the key (its marker would
    name the key)."""
    key = "-DashLeadingKeyQ7w8E9r0T1"
    found = command_words(["llama-server", flag, key, "--port", "8080", "x"])
    assert (2, flag, key) in found
    assert (4, "--port", "8080") in found and (5, "command", "x") in found
    assert all(key not in name for _, name, _ in found)
    shell = command_words(["sh", "-c", f'exec llama-server {flag} {key} --alias y "$@"', "llama-server"])
    assert (2, flag, key) in shell and (2, "--alias", "y") in shell
    assert all(key not in name for _, name, _ in shell)
    redact = Redactor([(n, s) for _, n, w in found + shell for s in held(n, w)])
    assert key not in redact(f"argv: llama-server {flag} {key} --port 8080")


def test_a_secret_flag_that_takes_no_value_leaves_the_next_flag_a_flag() -> None:
    """vLLM's --allow-credentials is a switch (tests/fixtures/names): the flag after it is no secret."""
    found = command_words(["vllm", "serve", "--allow-credentials", "--max-model-len", "4096"])
    assert not any(held(name, word) for _, name, word in found)
    assert (4, "--max-model-len", "4096") in found


@pytest.mark.parametrize("argv", [
    # vLLM's --hf-token may be given alone (the cached login): the next flag is a flag.
    ["vllm", "serve", "m", "--hf-token", "--api-key", "PlainApiKeyAfterBareSwitch9"],
    ["llama-server", "-hft", "--api-key", "PlainApiKeyAfterBareSwitch9"],
    # vLLM's --api-key takes one key or several: each is a secret.
    ["vllm", "serve", "m", "--api-key", "FirstOfTwoKeysAAAA1", "PlainApiKeyAfterBareSwitch9", "-tp", "1"],
    ["sh", "-c", "exec vllm serve m --hf-token --api-key K1aaaaaaaa PlainApiKeyAfterBareSwitch9 \"$@\""],
])
def test_a_secret_flag_takes_every_value_up_to_the_next_flag(argv: list[str]) -> None:
    secrets = {word for _, name, word in command_words(argv) if name == "--api-key"}
    assert "PlainApiKeyAfterBareSwitch9" in secrets
    assert not {"-tp", "1", "m", "--api-key"} & secrets  # the next flag and its value are not


def test_the_servers_secret_flags_are_the_ones_ruler_knows() -> None:
    """The word after a secret flag is its value unless it is another secret flag of a server."""
    from pathlib import Path

    from engine.campaign.secrets import SERVER_SECRET_FLAGS, takes_secret
    names = Path(__file__).parents[3] / "fixtures" / "names"
    found = {w for f in names.glob("*.txt") for w in f.read_text().split()
             if w.startswith("-") and takes_secret(w)}
    assert found == SERVER_SECRET_FLAGS


@pytest.mark.parametrize("argv, secret", [
    (["llama-server", "--api-key", "--lowercase-secret-value-zz", "--port", "8"],
     "--lowercase-secret-value-zz"),
    (["llama-server", "-hft", "-Secret1234abcd", "--port", "8"], "-Secret1234abcd"),
    (["sh", "-c", "exec llama-server -hft -Secret1234abcd --port 8"], "-Secret1234abcd"),
])
def test_a_secret_flags_value_is_the_next_word_whatever_its_shape(argv: list[str], secret: str) -> None:
    assert secret in {word for _, name, word in command_words(argv) if name in ("--api-key", "-hft")}


def test_the_shell_words_after_a_key_are_not_secrets() -> None:
    """Each secret's text is cut from every record, a journal's keys included: a shell string's
    own words after a key ("$@", | tee concurrency.log, || echo finished) must not be secrets."""
    argv = ["sh", "-c", "exec llama-server --api-key K1xxxxxxxx9 \"$@\" 2>&1 | tee concurrency.log "
            "|| echo finished"]
    secrets = {word for _, name, word in command_words(argv) if name == "--api-key"}
    assert secrets == {"K1xxxxxxxx9"}
