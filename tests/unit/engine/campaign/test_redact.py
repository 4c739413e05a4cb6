"""Secrets: which names are secret, what is redacted and how, and the warning for a secret on a
server's command line (validate, dry run). A real run is in tests/integration/test_secrets.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.campaign.checks.warnings import argv_warnings
from engine.campaign.dryrun import dry_run
from engine.campaign.load import load_campaign
from engine.campaign.redact import DUMPED, Redactor, frozen_copy, redactor_for
from engine.campaign.secrets import is_secret
from engine.commands.validate import cmd_validate
from engine.record.results import scrub_data

TOKEN = "hf_rulerFakeToken0123456789abcdef"

BASE = """\
name: sec
server: llamacpp
runtime: process
process:
  command: ["/usr/bin/llama-server"]
pass_env: [HF_TOKEN, HF_HOME]
control:
  model: /models/SmolLM2.gguf
  args:
    -m: ${model}
    -c: 1024
windows:
  - name: flag
    axis: the token as a flag
    change:
      args:
        --hf-token: ${HF_TOKEN}
sessions:
  s1: [flag]
workload:
  classes:
    prose: {prompts: ["Say hi."]}
  concurrency: [1]
  reps: 1
"""


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY",
                                  "OPENAI_KEY", "MY_KEY_FILE", "AWS_SECRET_ACCESS_KEY",
                                  "DB_PASSWORD", "GCP_CREDENTIALS", "HF_AUTH", "AWS_SESSION_TOKEN",
                                  "GITHUB_PAT", "GH_PAT", "PAT", "--github-pat", "SESSION_COOKIE",
                                  "--token", "SLACK_BOT_TOKEN", "GITHUBTOKEN", "-hft"])
def test_secret_names(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize("name", ["HF_HOME", "MAX_TOKENS", "max_tokens", "TOKENIZERS_PARALLELISM",
                                  "CUDA_VISIBLE_DEVICES", "LLAMA_ARG_CTX_SIZE", "PATH", "PYTHONPATH",
                                  "LD_LIBRARY_PATH", "--patience", "COMPAT_MODE", "--kv-cache-dtype",
                                  "--tokenizer", "EOS_TOKEN_ID", "--long-prefill-token-threshold",
                                  "--return-tokens-as-token-ids", "--bucket-time-to-first-token",
                                  "--kt-max-deferred-experts-per-token", "SGLANG_MM_AVOID_RETOKENIZE",
                                  "HF_HUB_ENABLE_HF_TRANSFER"])
def test_not_secret_names(name: str) -> None:
    assert not is_secret(name)


NAMES = Path(__file__).parents[3] / "fixtures" / "names"
# The secrets among every flag and environment variable each server reads
# (tests/fixtures/names/README.md): each other name is a server's knob, whose value a record keeps
# and a sweep names its windows by. The CORS switches and sglang's graph-key switch are booleans,
# which no redaction touches.
SERVER_SECRETS = {
    "llamacpp": {"--api-key", "--api-key-file", "--hf-token", "-hft", "--ssl-key-file",
                 "--cors-credentials", "--no-cors-credentials", "HF_TOKEN", "LLAMA_API_KEY",
                 "LLAMA_ARG_API_KEY_FILE", "LLAMA_ARG_SSL_KEY_FILE", "LLAMA_ARG_CORS_CREDENTIALS"},
    "vllm": {"--api-key", "--hf-token", "--ssl-keyfile", "--allow-credentials",
             "--no-allow-credentials", "VLLM_API_KEY", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"},
    "sglang": {"--api-key", "--admin-api-key", "--ssl-keyfile", "--ssl-keyfile-password",
               "--watermark-key", "--watermark-key-b", "EXA_API_KEY", "SGLANG_LOG_DECODE_GRAPH_KEY"},
}


@pytest.mark.parametrize("server", sorted(SERVER_SECRETS))
def test_the_real_names_of_each_server_that_are_secret(server: str) -> None:
    """Issue 49: a name rule too wide hides a benchmark's knob (vLLM's
    --long-prefill-token-threshold was secret: its sweep's windows named 1, 2...); too narrow, it
    leaks. Every flag and variable of llama-server, vLLM and SGLang is checked."""
    names = (NAMES / f"{server}.txt").read_text().split()
    assert len(names) > 500 and "--api-key" in names
    assert {name for name in names if is_secret(name)} == SERVER_SECRETS[server]


def test_only_secret_values_are_redacted_and_named(tmp_path: Path) -> None:
    spec = tmp_path / "sec.yaml"
    spec.write_text(BASE.replace("  model: /models/SmolLM2.gguf",
                                 "  model: /models/SmolLM2.gguf\n  env: {OPENAI_API_KEY: sk-inline-12345}"))
    campaign = load_campaign(spec)
    redact = redactor_for(campaign, {"HF_TOKEN": TOKEN, "HF_HOME": "llama", "MAX_TOKENS": "4096"})
    text = redact(campaign.source_text + f"\nlog: token={TOKEN} ctx=4096 server llamacpp\n")
    # A passed-through HF_HOME of "llama" once made the frozen campaign say "server: <redacted>cpp".
    assert "server: llamacpp" in text and "ctx=4096" in text
    assert "token=<redacted:HF_TOKEN>" in text and TOKEN not in text
    assert "OPENAI_API_KEY: <redacted:OPENAI_API_KEY>" in text  # an inline env: secret too
    event = scrub_data({"plan": {"argv": ["--hf-token", TOKEN]}, f"k{TOKEN}": 1}, redact)
    assert event == {"plan": {"argv": ["--hf-token", "<redacted:HF_TOKEN>"]},
                     "k<redacted:HF_TOKEN>": 1}


def test_a_short_value_is_no_credential() -> None:
    redact = Redactor({"USE_AUTH_TOKEN": "true", "HF_TOKEN": TOKEN})
    assert redact("trust: true, token: " + TOKEN) == "trust: true, token: <redacted:HF_TOKEN>"


def test_validate_warns_about_a_secret_on_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "sec.yaml"
    spec.write_text(BASE)
    assert cmd_validate(str(spec)) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{spec.resolve()}:17:21: warning: --hf-token: ${{HF_TOKEN}} puts a secret on "
                   "the server's command line, which `ps` and `docker inspect` show to other "
                   "users; ruler redacts it from its records, but prefer the environment "
                   "(pass_env: [HF_TOKEN]) if the server reads it there"]
    # Through the environment only: nothing to warn about.
    spec.write_text(BASE.replace("        --hf-token: ${HF_TOKEN}", "        -c: 2048"))
    assert argv_warnings(load_campaign(spec)) == []


def test_dry_run_shows_the_reference_and_the_warning(tmp_path: Path) -> None:
    spec = tmp_path / "sec.yaml"
    spec.write_text(BASE)
    text = dry_run(str(spec), "process", environ={"HF_TOKEN": TOKEN, "HF_HOME": "/hf"}, testbed={})
    assert TOKEN not in text
    assert "--hf-token '${HF_TOKEN}'" in text
    assert "warning: --hf-token: ${HF_TOKEN} puts a secret on the server's command line" in text
    docker = dry_run(str(spec), "docker", environ={"HF_TOKEN": TOKEN, "HF_HOME": "/hf"}, testbed={})
    assert TOKEN not in docker
    assert ("note: HF_TOKEN is passed through by name; its value is never recorded "
            "(set on this host)") in docker
    assert ("note: HF_HOME is passed through by name; not a secret's name, so its value is not "
            "redacted where it appears (set on this host)") in docker


PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
       "-----END PRIVATE KEY-----\n")


def test_a_multi_line_secret_is_redacted_a_line_at_a_time() -> None:
    redact = Redactor({"TLS_PRIVATE_KEY": PEM})
    body = PEM.splitlines()[1]
    # A log holds the key a line at a time, each after the server's own prefix.
    assert redact(f"srv  env: {body}") == "srv  env: <redacted:TLS_PRIVATE_KEY>"
    assert redact(PEM.replace("\n", "\r\n")).count(body) == 0
    assert redact(f"key={PEM}end") == "key=<redacted:TLS_PRIVATE_KEY>end"  # whole, where it is whole


def test_a_secret_is_redacted_inside_json_text() -> None:
    quoted = 'pa"ss\\wörd-1234'
    redact = Redactor({"HF_TOKEN": TOKEN, "DB_PASSWORD": quoted, "TLS_PRIVATE_KEY": PEM})
    for secret, name in ((quoted, "DB_PASSWORD"), (PEM, "TLS_PRIVATE_KEY")):
        for ascii_only in (True, False):
            text = json.dumps({"error": f"bad: {secret}"}, ensure_ascii=ascii_only)
            assert json.loads(redact(text)) == {"error": f"bad: <redacted:{name}>"}


def test_a_secret_cut_in_two_is_redacted_piece_by_piece() -> None:
    redact = Redactor({"HF_TOKEN": TOKEN})
    # Wrapped by the server, the rest after a prefix of its own; read a line at a time (boot.log).
    assert redact(f"srv  env: HF_TOKEN={TOKEN[:14]}") == "srv  env: HF_TOKEN=<redacted:HF_TOKEN>"
    assert redact(f"srv  env: {TOKEN[14:]} (from env)") == "srv  env: <redacted:HF_TOKEN> (from env)"
    # Truncated (an error quoted up to so many characters), and both within one text.
    assert redact(f'stream error: {{"message": "bad {TOKEN[:20]}') == \
        'stream error: {"message": "bad <redacted:HF_TOKEN>'
    assert redact(f"a {TOKEN[:10]}\n{TOKEN[10:]} b\n") == "a <redacted:HF_TOKEN>\n<redacted:HF_TOKEN> b\n"
    # A piece shorter than a credential is any other text.
    assert redact(f"{TOKEN[:7]} and {TOKEN[-7:]} mid-line") == f"{TOKEN[:7]} and {TOKEN[-7:]} mid-line"


@pytest.mark.parametrize("suffix", ["...", "\u2026", "'", '" (truncated)', " [...]", " (cut)"])
def test_a_truncated_secret_followed_by_more_text_is_redacted(suffix: str) -> None:
    """An error quoted up to so many characters, then marked as cut (``text[:77] + "..."``), or
    written as its repr (``f"{payload[:200]!r}"``): the secret's first piece ends no line, a mark
    that is no part of a word follows it."""
    redact = Redactor({"HF_TOKEN": TOKEN})
    assert redact(f"chunk: {TOKEN[:12]}{suffix}") == f"chunk: <redacted:HF_TOKEN>{suffix}"
    payload = "x" * 180 + TOKEN
    assert TOKEN[:8] not in redact(f"malformed stream chunk: {payload[:200]!r}")


def test_a_secret_is_redacted_inside_its_repr() -> None:
    quoted = "it's-\"a\"-pass"  # both quotes: its repr escapes one of them, unlike JSON
    redact = Redactor({"DB_PASSWORD": quoted})
    said = redact(f"bad chunk: {('x ' + quoted)!r}")
    assert said == "bad chunk: 'x <redacted:DB_PASSWORD>'", said


def test_a_secret_that_is_a_place_leaves_other_places_as_they_are() -> None:
    """A secret-looking name whose value is a path or a URL (a keyring's socket): other paths and
    URLs on the host share its start, and stay as they are; its own start where a cut leaves it
    (the line's end) is still replaced."""
    redact = Redactor({"GNOME_KEYRING_CONTROL": "/run/user/1000/keyring",
                       "HUB_AUTH_URL": "https://user:s3cret@hub.example"})
    text = "docker: unix:///run/user/1000/docker.sock, https://huggingface.co/x"
    assert redact(text) == text
    assert redact("keyring at /run/user/1000/key") == "keyring at <redacted:GNOME_KEYRING_CONTROL>"
    assert redact("auth https://user:s3cret@hub.example") == "auth <redacted:HUB_AUTH_URL>"


STACKED = BASE.replace("""sessions:
  s1: [flag]""", """  - name: vllm
    server:
      adapter: vllm
      command: [vllm, serve]
      args: {--api-key: sk-stack-literal-flag-0001}
      env:
        HF_TOKEN: hf_stackLiteral0123456789
        WANDB_API_KEY: ${NOT_SECRET_LOOKING}
  - name: sw
    axis: the token swept
    sweep: {env: {OPENAI_API_KEY: [sk-Swept-Value-AAAA1111, sk-Swept-Value-BBBB2222]}}
sessions:
  s1: [flag, vllm, sw]""")


def test_every_secret_source_of_a_campaign_is_redacted_with_its_derived_forms(tmp_path: Path) -> None:
    """Issue 49: a stack window's server.env (literal, or a ${VAR} of a name that looks like none),
    a secret-named flag's value, a sweep over a secret variable: each is redacted wherever it is
    written, and so are its other cases and the name a value would give a window."""
    spec = tmp_path / "sec.yaml"
    spec.write_text(STACKED)
    campaign = load_campaign(spec)
    held = "ValueHeldByAPlainName42"
    redact = redactor_for(campaign, {"HF_TOKEN": TOKEN, "NOT_SECRET_LOOKING": held})
    secrets = ["hf_stackLiteral0123456789", held, "sk-stack-literal-flag-0001",
               "sk-Swept-Value-AAAA1111", "sk-Swept-Value-BBBB2222"]
    for value in secrets:
        for form in (value, value.lower(), value.upper(), f"sw-{value.lower()}"):
            said = redact(f"boot: {form} ok")
            assert value.lower() not in said.lower(), (form, said)
    frozen = redact(campaign.source_text)
    assert not any(s in frozen for s in secrets[:1] + secrets[2:]), frozen


def test_a_sweep_over_a_secret_names_its_windows_by_position(tmp_path: Path) -> None:
    """A window's name is in directory names, the journal, throughput.csv and every receipt: one
    made of a secret's value would carry it past any redaction; and its axis says no value."""
    spec = tmp_path / "sec.yaml"
    spec.write_text(STACKED)
    campaign = load_campaign(spec)
    swept = [w for w in campaign.windows if w.sweep == "sw"]
    assert [w.name for w in swept] == ["sw-1", "sw-2"]
    assert [w.axis for w in swept] == ["the token swept: value 1", "the token swept: value 2"]


def test_a_secret_under_a_short_flag_or_inside_the_command_is_redacted(tmp_path: Path) -> None:
    """Issue 49's repeat: a token given as llama-server's -hft (--hf-token's short form), and an
    --api-key written inside process.command, were in clear in the journal, the boot log and the
    frozen campaign, where the same under args: was redacted."""
    spec = tmp_path / "sec.yaml"
    spec.write_text(BASE.replace('command: ["/usr/bin/llama-server"]',
                                 'command: ["/usr/bin/llama-server", "--api-key", "sk-in-command-1234",'
                                 ' "--api-key=sk-in-command-5678"]')
                    .replace("--hf-token: ${HF_TOKEN}", "-hft: hf_shortFlagToken0123"))
    campaign = load_campaign(spec)
    redact = redactor_for(campaign, {})
    text = redact(campaign.source_text)
    for value in ("sk-in-command-1234", "sk-in-command-5678", "hf_shortFlagToken0123"):
        assert value not in text and value.upper() not in redact(value.upper())
    assert "<redacted:--api-key>" in text and "<redacted:-hft>" in text


BY_VALUE = """\
name: sec
server: llamacpp
runtime: process
process:
  command: ["/usr/bin/llama-server", "--header", "x-auth: ghp_InTheCommand0123456789abcdefghijklmn",
            "--mirror=https://u:pwInTheCommand1234@m.example"]
control:
  model: /models/hf_cache/SmolLM2.gguf
  args:
    -m: ${model}
    --hf-endpoint: https://user:pwInTheArgs12345@hf.example
  env:
    GITHUB_PAT: ghp_HeldByAPatName0123456789abcdefghij
    HF_ENDPOINT: https://user:pwSecretInUrl9988@hf.example
    HF_HUB_ENABLE_HF_TRANSFER: hf_transfer
windows:
  - name: mirror
    axis: another mirror
    change:
      env: {MIRROR: "${PLAIN_VAR}"}
  - name: stack
    axis: vllm
    server:
      adapter: vllm
      command: [vllm, serve]
      args: {--served-model-name: "Bearer sk0123456789abcdefghij"}
      env: {UPLOAD_TO: "AKIAIOSFODNN7EXAMPLE"}
  - name: sw
    axis: the endpoint swept
    sweep: {env: {HF_ENDPOINT: ["https://u:pwSweptAAAA1111@h.example", "https://u:pwSweptBBBB2222@h.example"]}}
sessions:
  s1: [mirror, stack, sw]
workload:
  classes:
    prose: {prompts: ["Say hi."]}
  concurrency: [1]
  reps: 1
"""
BY_VALUE_SECRETS = ["ghp_InTheCommand0123456789abcdefghijklmn", "pwInTheCommand1234", "pwInTheArgs12345",
                    "ghp_HeldByAPatName0123456789abcdefghij", "pwSecretInUrl9988", "pwFromAPlainVariable77",
                    "sk0123456789abcdefghij", "AKIAIOSFODNN7EXAMPLE", "pwSweptAAAA1111", "pwSweptBBBB2222",
                    "pwOfTheHostsProxy555"]


def test_a_secret_by_its_value_is_redacted_from_every_source(tmp_path: Path) -> None:
    """Issue 49's repeat: a credential under a plain name (a URL's password, a token of a known
    shape), wherever the campaign gives it (the control's env and args, a window's change, a
    stack window's server, a command, a sweep, a ${VAR} of a plain name, the host's own
    environment), is redacted in each of its forms; the URL stays readable, and a benchmark's own
    values (the model's path, hf_transfer) stay as they are."""
    spec = tmp_path / "sec.yaml"
    spec.write_text(BY_VALUE)
    campaign = load_campaign(spec)
    redact = redactor_for(campaign, {"PLAIN_VAR": "https://u:pwFromAPlainVariable77@h.example",
                                     "HTTPS_PROXY": "http://proxy:pwOfTheHostsProxy555@proxy:3128"})
    for secret in BY_VALUE_SECRETS:
        for form in (secret, secret.lower(), secret.upper()):
            said = redact(f"boot: {form} ok")
            assert secret.lower() not in said.lower(), (form, said)
    frozen = redact(campaign.source_text)
    assert not any(secret in frozen for secret in BY_VALUE_SECRETS), frozen
    assert "HF_ENDPOINT: https://user:<redacted:HF_ENDPOINT>@hf.example" in frozen
    assert "GITHUB_PAT: <redacted:GITHUB_PAT>" in frozen
    assert "/models/hf_cache/SmolLM2.gguf" in frozen and "hf_transfer" in frozen
    assert [w.name for w in campaign.windows if w.sweep == "sw"] == ["sw-1", "sw-2"]


def test_the_dry_run_says_no_secret_the_file_writes(tmp_path: Path) -> None:
    """A literal under a secret's name and a credential under a plain one, printed as the run's
    records would hold them; a plain variable whose value holds one is shown as its reference."""
    spec = tmp_path / "sec.yaml"
    spec.write_text(BY_VALUE)
    text = dry_run(str(spec), "process", testbed={},
                   environ={"PLAIN_VAR": "https://u:pwFromAPlainVariable77@h.example"})
    assert not any(secret.lower() in text.lower() for secret in BY_VALUE_SECRETS), text
    assert "--hf-endpoint https://user:<redacted:--hf-endpoint>@hf.example" in text
    assert "'MIRROR=${PLAIN_VAR}'" in text and "# + passed through: GITHUB_PAT, HF_ENDPOINT" in text
    spec.write_text(STACKED)
    text = dry_run(str(spec), "process", environ={}, testbed={})
    assert "sk-stack-literal-flag-0001" not in text and "vllm serve --api-key <redacted:--api-key>" in text


def validate_notes(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`ruler validate`'s notes on a campaign file of ``text``, each from its line:col on."""
    spec = tmp_path / "sec.yaml"
    spec.write_text(text)
    assert cmd_validate(str(spec)) == 0
    return [line.removeprefix(f"{spec.resolve()}:") for line in capsys.readouterr().err.splitlines()
            if ": note: " in line]


def test_validate_says_which_values_it_will_redact(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Each value the file writes that ruler redacts, where it is written: by its name, or by its
    shape under a plain name (a sweep's value once, at the sweep); a ${...} is known at run time."""
    notes = validate_notes(tmp_path, BY_VALUE, capsys)
    tail = ", a secret under any name: ruler redacts it wherever it writes"
    assert notes == [
        f"5:50: note: --header: its value holds a GitHub token{tail} (x-auth: <redacted:--header>)",
        f"6:13: note: --mirror: its value holds a password in a URL{tail} "
        "(https://u:<redacted:--mirror>@m.example)",
        f"11:20: note: --hf-endpoint: its value holds a password in a URL{tail} "
        "(https://user:<redacted:--hf-endpoint>@hf.example)",
        "13:17: note: GITHUB_PAT: a secret by its name: ruler writes <redacted:GITHUB_PAT> for its value",
        f"14:18: note: HF_ENDPOINT: its value holds a password in a URL{tail} "
        "(https://user:<redacted:HF_ENDPOINT>@hf.example)",
        f"26:35: note: --served-model-name: its value holds a bearer token{tail} "
        "(Bearer <redacted:--served-model-name>)",
        f"27:24: note: UPLOAD_TO: its value holds an AWS access key id{tail} (<redacted:UPLOAD_TO>)",
        f"30:33: note: HF_ENDPOINT: its value holds a password in a URL{tail} "
        "(https://u:<redacted:HF_ENDPOINT>@h.example)",
        f"30:72: note: HF_ENDPOINT: its value holds a password in a URL{tail} "
        "(https://u:<redacted:HF_ENDPOINT>@h.example)"]


IN_WORDS = BASE.replace('command: ["/usr/bin/llama-server"]', """command: [
            env, HF_TOKEN=hf_envAssignSecretDDDD4444, sh, -c,
            "exec llama-server --api-key sk-shellSecretCCCC3333 \\
              -hft hf_shellHftSecret0000 \\"$@\\"",
            llama-server, "--env=WANDB_API_KEY=wandbEnvFlagSecret1"]
attach: {url: "http://ruler:pwAttachSecretKKKK1111@127.0.0.1:9/v1"}""").replace("""    -c: 1024
""", """    -c: 1024
    --hf-token=hf_eqFormSecretAAAA1111: true
    -hft=hf_shortEqSecretBBBB2222: true
    --api-key: 987654321098765
""").replace("""  reps: 1
""", """  reps: 1
  knobs: {api_key: sk-knobSecretHHHH8888, extra_headers: {Authorization: Bearer knobBearerJJJJ0000}}
""")
IN_WORDS_SECRETS = {  # each secret -> the name its marker says
    "hf_envAssignSecretDDDD4444": "HF_TOKEN", "sk-shellSecretCCCC3333": "--api-key",
    "hf_shellHftSecret0000": "-hft", "wandbEnvFlagSecret1": "WANDB_API_KEY",
    "pwAttachSecretKKKK1111": "attach.url", "hf_eqFormSecretAAAA1111": "--hf-token",
    "hf_shortEqSecretBBBB2222": "-hft", "987654321098765": "--api-key",
    "sk-knobSecretHHHH8888": "api_key", "Bearer knobBearerJJJJ0000": "Authorization"}


def test_a_secret_in_a_flags_own_name_a_number_a_shell_string_a_knob_or_the_attach_url_is_redacted(
        tmp_path: Path) -> None:
    """Issue 49, round 5 (H5): ``--hf-token=K: true`` and ``-hft=K: true`` as an args key, an
    unquoted number under --api-key, ``env HF_TOKEN=K`` and ``sh -c "... --api-key K"`` in a
    command, a request knob and a header under a secret's name, and attach.url's password were in
    clear in the journal, the boot logs and the frozen campaign."""
    spec = tmp_path / "sec.yaml"
    spec.write_text(IN_WORDS)
    campaign = load_campaign(spec)
    redact = redactor_for(campaign, {})
    frozen = redact(campaign.source_text)
    for secret, name in IN_WORDS_SECRETS.items():
        assert secret not in frozen, (secret, frozen)
        for form in (secret, secret.lower(), secret.upper()):
            said = redact(f"argv {form} ok")
            assert said == f"argv <redacted:{name}> ok", (form, said)
    assert "http://ruler:<redacted:attach.url>@127.0.0.1:9/v1" in frozen
    assert "--hf-token=<redacted:--hf-token>: true" in frozen


def test_validate_notes_each_secret_in_a_flags_name_a_shell_string_a_knob_or_the_attach_url(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = validate_notes(tmp_path, IN_WORDS, capsys)
    by_name = "a secret by its name: ruler writes <redacted:{0}> for its value"
    assert notes == [f"{at}: note: {name}: {by_name.format(name)}" if name != "attach.url" else
                     f"{at}: note: attach.url: its value holds a password in a URL, a secret under any "
                     "name: ruler redacts it wherever it writes (http://ruler:<redacted:attach.url>@127.0.0.1:9/v1)"
                     for at, name in [("6:18", "HF_TOKEN"), ("7:13", "--api-key"), ("7:13", "-hft"),
                                      ("9:27", "WANDB_API_KEY"), ("10:15", "attach.url"),
                                      ("17:5", "--hf-token"), ("18:5", "-hft"), ("19:16", "--api-key"),
                                      ("33:20", "api_key"), ("33:74", "Authorization")]], notes


def test_two_secrets_that_share_their_start_leave_no_piece_of_either() -> None:
    """Two secrets with their first 8 characters in common: a piece of the shorter was cut where
    the longer's start stopped matching, and the rest of it (16 of 24 characters) kept."""
    longer, shorter = "hf_stackHftSecretEEEE5555", "hf_stackEqSecretIIII9999"
    redact = Redactor({"-hft": longer, "--hf-token": shorter})
    assert redact(f"--hf-token={shorter}") == "--hf-token=<redacted:--hf-token>"
    for cut in (shorter[:20], longer[:20]):
        said = redact(f'error: "{cut}..."')
        assert said.startswith('error: "<redacted:') and said.endswith('>..."'), said
    said = redact(f"tail {shorter[-12:]} and {longer[-12:]}")
    assert said == "tail <redacted:--hf-token> and <redacted:-hft>", said


def test_a_secret_echoed_in_base64_is_redacted() -> None:
    """A server that echoes a key as a Basic header carries it, or encoded: at any offset the
    encoding puts it at, no more than the two groups its neighbours share stay."""
    import base64
    key = "sk-echoedKeyNN1234567890"
    redact = Redactor({"--api-key": key})
    for before in ("", "a", "ab", "user:"):
        text = base64.b64encode(f"{before}{key}".encode()).decode()
        said = redact(f"echo {text}")
        kept = len(said) - len("echo <redacted:--api-key>") - len(base64.b64encode(before.encode()))
        assert "<redacted:--api-key>" in said and kept <= 8, said


def test_a_secret_in_an_sbatch_option_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An #SBATCH line can name no variable: the secret would stand in job.sh, kept in the run."""
    spec = tmp_path / "sec.yaml"
    spec.write_text(BASE.replace("runtime: process", "runtime: slurm\nslurm:\n"
                                 "  sbatch: ['--export=ALL,HF_TOKEN=hf_sbatchSecretLLLL2222', --mem=0]"))
    assert cmd_validate(str(spec)) == 2
    err = capsys.readouterr().err
    assert f"{spec.resolve()}:5:12: slurm.sbatch[0]: --export gives HF_TOKEN a secret" in err, err
    assert "hf_sbatchSecretLLLL2222" not in err


def test_a_secrets_piece_inside_a_word_of_other_text_is_left_as_it_is() -> None:
    """Issue 49c: a secret's first or last 8 characters were replaced wherever they stood, so a
    key that starts "llama-se" turned every "llama-server" of a boot log into a marker. A piece
    is a secret cut short only where the cut is one: the line's edge, a mark of a cut ("...", a
    quote), or a wrapped line's prefix ("srv  env: ")."""
    redact = Redactor([("LLAMA_API_KEY", "llama-server-key-01"), ("--api-key", "secret-key-for-testing-2024"),
                       ("DB_PASSWORD", "pw-12345678")])
    for text in ("main: llama-server listening on 8080", "started llama-server, pid 7",
                 "the secret-keys are kept", "path /0/12345678 and 1765112345678.25"):
        assert redact(text) == text
    # A cut one: truncated at the line's end or before a mark, wrapped after a prefix of its own.
    assert redact("argv: llama-server-k") == "argv: <redacted:LLAMA_API_KEY>"
    assert redact("bad key 'secret-key-fo...'") == "bad key '<redacted:--api-key>...'"
    assert redact("srv  env: key-for-testing-2024 (from env)") == "srv  env: <redacted:--api-key> (from env)"


SPELLED = {
    # A line commented out: a token of a known shape, and a secret name's value.
    "comment": ("  # --hf-token: hf_CommentedOutTokenAAAAAAAAAAAAAAAAAAAA1\n"
                "  # --api-key: commentedPlainSecret12345\n", []),
    # YAML escapes: the text spells the value otherwise.
    "escapes": ('    HEXKEY_API_KEY: "\\x68\\x65\\x78\\x53\\x65\\x63\\x72\\x65\\x74\\x56\\x61\\x6c"\n',
                [("HEXKEY_API_KEY", "hexSecretVal")]),
    # Escaped line breaks: the value is the lines joined, no space between.
    "split": ('    FOLD_API_KEY: "firstPartSecretAAAA\\\n      MIDDLEPARTSECRETBBBBBBBBBB\\\n'
              '      lastPartSecretCCCC"\n',
              [("FOLD_API_KEY", "firstPartSecretAAAAMIDDLEPARTSECRETBBBBBBBBBBlastPartSecretCCCC")]),
    # A quote doubled: cut from the text, the rest is no YAML.
    "quote": ("    QUOTE_API_KEY: 'it''s-my-quoted-secretVALUE9'\n",
              [("QUOTE_API_KEY", "it's-my-quoted-secretVALUE9")]),
}


@pytest.mark.parametrize("form", sorted(SPELLED))
def test_the_frozen_campaign_holds_no_secret_however_its_text_spells_it(form: str) -> None:
    """Issue 49c, H8: the frozen campaign.yaml was the source text with the parsed values cut out,
    so a commented-out token, an escaped or a split secret stayed readable, and a doubled quote's
    cut broke the YAML. The copy parses to the source's document with markers for secrets, and
    no secret is left in its text, as written or decoded."""
    lines, secrets = SPELLED[form]
    text = f"name: sec\ncontrol:\n  args: {{-c: 2048}}\n{lines}  env:\n    PLAIN: 1\n" if form == "comment" \
        else f"name: sec\ncontrol:\n  env:\n{lines}    PLAIN: 1\n"
    source = yaml.safe_load(text)
    for name, value in secrets:
        assert source["control"]["env"][name] == value  # the form is the one meant
    frozen = frozen_copy(text, Redactor(secrets))
    copy = yaml.safe_load(frozen)
    for name, _ in secrets:
        assert copy["control"]["env"][name] == f"<redacted:{name}>"
    assert copy["control"]["env"]["PLAIN"] == 1 and copy["name"] == "sec"
    for leak in ["CommentedOutToken", "commentedPlain", "\\x68", "hexSecret", "PartSecret", "MIDDLEPART",
                 "quoted-secret", *(value for _, value in secrets)]:
        assert leak not in frozen, (leak, frozen)
    assert frozen.startswith(DUMPED) == (form != "comment")  # a comment alone keeps the text
    assert frozen_copy(text, Redactor(secrets)) == frozen  # what --resume compares


def test_the_frozen_campaign_keeps_a_urls_password_marker_by_its_name() -> None:
    """The value rule over the whole text reads a marker in a URL as a password; it is one already."""
    text = "name: sec\ncontrol:\n  env:\n    HF_ENDPOINT: https://user:pwSecretInUrl9988@hf.example\n"
    frozen = frozen_copy(text, Redactor([("HF_ENDPOINT", "pwSecretInUrl9988")]))
    assert frozen == text.replace("pwSecretInUrl9988", "<redacted:HF_ENDPOINT>")


def test_no_comment_is_copied_into_the_frozen_campaign() -> None:
    """A comment is free text: a secret can be spelt there in any form, so none is copied (the
    line kept, so that a file:line still points at the source's)."""
    text = ("name: x\ncontrol:\n  args: {-c: 2048}  # the context\n  env: {A: \"x#y\"}\n"
            "# process: {command: [llama-server, --api-key, CommentedCmdSecretHHHH7777]}\n"
            "# export HF_TOKEN=ExportStyleSecret777\n#--api-key   DashSpacedSecret9999\n"
            "# password hunter2hunter2\n")
    copy = frozen_copy(text, Redactor([]))
    for secret in ("CommentedCmdSecretHHHH7777", "ExportStyleSecret777", "DashSpacedSecret9999",
                   "hunter2hunter2", "the context"):
        assert secret not in copy
    assert copy.count("\n") == text.count("\n") and "x#y" in copy
    assert yaml.safe_load(copy) == yaml.safe_load(text)
    # A '#' after a space inside quotes is cut as any other: the document changed, so the copy is
    # the parsed document dumped, which holds it whole.
    quoted = frozen_copy("name: x\nenv: {A: \"x # y\"}  # a note\n", Redactor([]))
    assert quoted.startswith(DUMPED) and yaml.safe_load(quoted) == {"name": "x", "env": {"A": "x # y"}}


def test_a_comment_after_an_unbalanced_quote_is_not_copied() -> None:
    text = ("name: x\ndescription: rock 'n roll # --api-key QuotedCommentSecret1234\n"
            "control:\n  args: {-c: 2048}\n")
    copy = frozen_copy(text, Redactor([]))
    assert "QuotedCommentSecret1234" not in copy
    assert yaml.safe_load(copy) == yaml.safe_load(text)
