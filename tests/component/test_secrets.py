"""A server that echoes the secrets it was passed (pass_env) into its boot log, its stream errors
and its generated text: no file of the run holds one. The real llama-server's run is in
tests/integration/test_secrets.py; the filter itself in tests/unit/engine/campaign/test_redact.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.context import Phase
from engine.quality import Quality
from engine.run.measure import Measurement
from tests.campaigns import CTX, campaign
from tests.component.fakes import Behaviour, FakeRuntime, by_window
from tests.component.helpers import runner

pytestmark = pytest.mark.timeout(60)

TOKEN = "hf_rulerFakeToken0123456789abcdef"
PEM_LINES = ["-----BEGIN PRIVATE KEY-----",
             "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
             "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
             "-----END PRIVATE KEY-----"]
PEM = "\n".join(PEM_LINES) + "\n"


def run_and_read(tmp: Path, spec: dict[str, Any], fake: FakeRuntime, phases: list[Phase]) -> dict[str, str]:
    """The campaign run against ``fake`` (closed after): every file the run wrote (but the lock),
    by its path in the run directory."""
    try:
        r = runner(tmp, spec, fake, phases=phases)
        r.run()
    finally:
        fake.close()
    return {p.relative_to(r.run_dir).as_posix(): p.read_text(errors="replace")
            for p in r.run_dir.rglob("*") if p.is_file() and p.name != "engine.lock"}


def prepared_run(tmp: Path, spec: dict[str, Any], behaviour: Any,
                 spelled: dict[str, str] | None = None) -> tuple[Path, list[Path], dict[str, str]]:
    """The campaign prepared as `ruler run` does (its frozen campaign.yaml) and run against a
    fake of ``behaviour``: the run directory, every path under it (but the lock) and every
    file's text by its path in it. ``spelled``: text of the written file -> what it is replaced
    with (a value spelled as YAML allows, a comment)."""
    from engine.commands.launch import prepare
    from tests.campaigns import write

    path = write(tmp, spec)
    for dumped, spelling in (spelled or {}).items():
        assert dumped in path.read_text(), dumped
        path.write_text(path.read_text().replace(dumped, spelling))
    run_dir = prepare(str(path), str(tmp / "results"), None)
    fake = FakeRuntime(behaviour)
    try:
        runner(tmp, spec, fake, run_dir=run_dir).run()
    finally:
        fake.close()
    paths = [p for p in run_dir.rglob("*") if p.name != "engine.lock"]
    written = {p.relative_to(run_dir).as_posix(): p.read_text(errors="replace") for p in paths if p.is_file()}
    return run_dir, paths, written


def test_what_a_server_echoes_of_its_secrets_is_in_no_file(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("TLS_PRIVATE_KEY", PEM)
    # The control echoes both into its log (the key a line at a time, as a server prints a
    # multi-line value) and the token into every reply; the window's streams end in an error
    # that quotes the token.
    echo = (f"srv  main: hf token {TOKEN}", *(f"srv  main: key | {line}" for line in PEM_LINES))
    fake = FakeRuntime(by_window({"control": Behaviour(echo=echo),
                                  "ctx": Behaviour(stream_error=f"bad token {TOKEN}\n{PEM}")}))
    spec = campaign("sec", CTX, {"s1": ["ctx"]}, reps=1, requests_per_rep=1,
                    quality={"greedy": {"n": 1, "max_tokens": 4}, "teacher_forced": {"positions": 1}})
    spec["pass_env"] = ["HF_TOKEN", "TLS_PRIVATE_KEY"]
    written = run_and_read(tmp, spec, fake, [Measurement(), Quality()])
    # Where the server's words land: each of these holds the marker where the secret stood.
    assert "<redacted:HF_TOKEN>" in written["windows/s1-control/boot.log"]
    assert "<redacted:TLS_PRIVATE_KEY>" in written["windows/s1-control/boot.log"]
    assert "<redacted:HF_TOKEN>" in written["windows/s1-control/greedy.json"]
    assert "<redacted:HF_TOKEN>" in written["windows/s1-control/reference.json"]
    assert any("<redacted:HF_TOKEN>" in text for name, text in written.items()
               if name.startswith("windows/s1-ctx/reps/"))
    for name, text in written.items():
        assert TOKEN not in text, name
        for line in PEM_LINES[1:3]:
            assert line not in text, name


def test_a_resume_filters_the_boot_log_a_batch_jobs_node_wrote(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch job's node writes its boot log unfiltered and the window's end filters it; an engine
    killed before that end leaves it as the node wrote it (here written into a finished run's
    window, as such a node would have): the resume filters it before anything boots."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("TLS_PRIVATE_KEY", PEM)
    fake = FakeRuntime()
    try:
        spec = campaign("sec", CTX, {"s1": ["ctx"]}, reps=1, requests_per_rep=1)
        spec["pass_env"] = ["HF_TOKEN", "TLS_PRIVATE_KEY"]
        first = runner(tmp, spec, fake)
        first.run()
        log = first.run_dir / "windows" / "s1-ctx" / "boot.log"
        with log.open("a") as f:
            f.write(f"node: token {TOKEN}\n" + "".join(f"node: {line}\n" for line in PEM_LINES))
        runner(tmp, spec, fake, run_dir=first.run_dir).run()
    finally:
        fake.close()
    text = log.read_text()
    assert TOKEN not in text and "node: token <redacted:HF_TOKEN>" in text
    assert not any(line in text for line in PEM_LINES[1:3])
    assert "node: <redacted:TLS_PRIVATE_KEY>" in text


STACK_TOKEN = "hf_stackWindowLiteral0123456789"
HELD = "valueOfAVariableNamedPlainly42"


def test_a_stack_windows_env_and_the_ids_of_a_prompt_holding_a_secret_are_in_no_file(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: a window on another stack whose ``server.env`` holds a secret (a literal, and a
    ${VAR} of a variable whose name looks like none) echoes both into its boot log; a prompt holds
    the host's token, which both stacks render and tokenize: renderings.json keeps that prompt's
    text redacted and none of its ids (the server's /detokenize would spell the secret back), and
    parity.json none around a divergence."""
    from engine.quality.stacks import StackParity
    from tests.component.fakes import token_id

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("PLAIN_NAME", HELD)
    fake = FakeRuntime(lambda plan: Behaviour(
        echo=(f"srv  main: token {STACK_TOKEN} and {HELD}",) if plan.argv[0] == "other-build" else (),
        after_role=":" if plan.argv[0] == "other-build" else ""))
    spec = campaign("sec", {}, {"s1": ["other"]}, reps=1, requests_per_rep=1)
    spec["workload"]["classes"] = {"prose": {"prompts": [f"Repeat {TOKEN} please.", "Say hi."]}}
    spec["windows"] = [{"name": "other", "axis": "another build", "server": {
        "adapter": "llamacpp", "command": ["other-build"], "args": {"-c": 2048, "--metrics": True},
        "env": {"HF_TOKEN": STACK_TOKEN, "WANDB_API_KEY": "${PLAIN_NAME}"}}}]
    spec["pass_env"] = ["HF_TOKEN"]
    written = run_and_read(tmp, spec, fake, [StackParity(), Measurement()])
    assert "<redacted:HF_TOKEN>" in written["windows/s1-other/boot.log"]
    assert "<redacted:WANDB_API_KEY>" in written["windows/s1-other/boot.log"]
    for name, text in written.items():
        assert TOKEN not in text and STACK_TOKEN not in text and HELD not in text, name
    secret_id = token_id(TOKEN)
    for window in ("s1-control", "s1-other"):
        kept = json.loads(written[f"windows/{window}/renderings.json"])
        [held, plain] = kept["classes"]["prose"]
        assert "<redacted:HF_TOKEN>" in held["text"] and "ids" not in held and held["tokens"] > 3
        assert plain["ids"], plain  # a prompt without a secret keeps its ids
        assert str(secret_id) not in written[f"windows/{window}/renderings.json"]
    parity = json.loads(written["windows/s1-other/parity.json"])
    [held_prompt, _] = parity["classes"][0]["per_prompt"]
    assert held_prompt["divergence"]["ids"] == held_prompt["divergence"]["reference_ids"] == []
    assert str(secret_id) not in written["windows/s1-other/parity.json"]


def test_a_prompt_holding_a_secret_is_frozen_as_its_marker_and_sent_whole(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49's repeat: a prompt holding the host's token was frozen in clear into prompts.json
    (written by ruler run before the run's filter was registered). It is frozen as its marker;
    what the server is sent is the prompt whole, read back from there, even where the marker's
    name holds another value too (a window on another stack with its own HF_TOKEN)."""
    from engine.commands.launch import prepare
    from engine.record.results import PROMPTS
    from tests.campaigns import write

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    spec = campaign("sec", CTX, {"s1": ["ctx"]}, reps=1, requests_per_rep=1)
    spec["workload"]["classes"] = {"prose": {"prompts": [f"Repeat {TOKEN} back."]}}
    spec["pass_env"] = ["HF_TOKEN"]
    spec["windows"].append({"name": "other", "axis": "another build", "server": {
        "adapter": "llamacpp", "command": ["other-build"], "env": {"HF_TOKEN": STACK_TOKEN}}})
    spec["sessions"] = {"s1": ["ctx", "other"]}
    run_dir = prepare(str(write(tmp, spec)), str(tmp / "results"), None)
    frozen = (run_dir / PROMPTS).read_text()
    assert TOKEN not in frozen and "<redacted:HF_TOKEN>" in frozen
    fake = FakeRuntime()
    try:
        runner(tmp, spec, fake, run_dir=run_dir).run()
        sent = [m["content"] for s in fake.servers for body in s.chats for m in body["messages"]]
    finally:
        fake.close()
    assert sent and set(sent) == {f"Repeat {TOKEN} back."}


PAT = "ghp_GithubPatValue0123456789abcdefghijkl"
URL_PASSWORD = "pwSecretInUrl9988"
SWEPT = ["pwSweptEndpointAAAA1111", "pwSweptEndpointBBBB2222"]
IN_COMMAND = "sk-InTheCommand0123456789ABCDEF"
FROM_HOST = "pwFromAPlainVariable77"


def test_a_secret_by_its_name_or_its_value_is_in_no_file_and_no_name(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49's repeat: GITHUB_PAT (a name the rule missed) and a URL's password under a plain
    name (HF_ENDPOINT) were in clear in the journal's env, the state snapshot and the boot log.
    Here with a sweep over such URLs, a token inside the command, and a plain ${VAR} whose host
    value holds a password: every server echoes all it was given (argv and environment) into its
    log. No file under the run directory, and no file's or directory's name, holds any of them in
    any case; the URL keeps its user and host."""
    monkeypatch.setenv("PLAIN_VAR", f"https://mirror:{FROM_HOST}@mirror.example")

    def echoing(plan: Any) -> Behaviour:
        given = {**plan.env, **plan.secret_env}
        return Behaviour(echo=(f"srv  main: argv {' '.join(plan.argv)}",
                               *(f"srv  main: env {k}={v}" for k, v in sorted(given.items()))))

    spec = campaign("sec", {"mirror": {"axis": "another mirror", "env": {"HF_MIRROR": "${PLAIN_VAR}"}}},
                    {"s1": ["mirror", "sw"]}, reps=1, requests_per_rep=1)
    spec["process"] = {"command": ["llama-server", "--header", f"Authorization: Bearer {IN_COMMAND}"]}
    spec["control"]["env"] = {"GITHUB_PAT": PAT, "HF_ENDPOINT": f"https://user:{URL_PASSWORD}@hf.example"}
    spec["windows"].append({"name": "sw", "axis": "the endpoint", "sweep": {"env": {
        "HF_ENDPOINT": [f"https://user:{p}@hf.example" for p in SWEPT]}}})
    run_dir, paths, written = prepared_run(tmp, spec, echoing)
    boot = written["windows/s1-control/boot.log"]
    assert "srv  main: env GITHUB_PAT=<redacted:GITHUB_PAT>" in boot  # the server did echo them
    assert "srv  main: env HF_ENDPOINT=https://user:<redacted:HF_ENDPOINT>@hf.example" in boot
    assert "--header Authorization: Bearer <redacted:--header>" in boot
    assert "HF_ENDPOINT: https://user:<redacted:HF_ENDPOINT>@hf.example" in written["campaign.yaml"]
    assert {"windows/s1-sw-1", "windows/s1-sw-2", "windows/s1-mirror"} <= {
        p.relative_to(run_dir).as_posix() for p in paths if p.is_dir()}
    for secret in (s.lower() for s in [PAT, URL_PASSWORD, *SWEPT, IN_COMMAND, FROM_HOST]):
        assert not [p for p in paths if secret in p.relative_to(run_dir).as_posix().lower()], secret
        assert not [name for name, text in written.items() if secret in text.lower()], secret


IN_WORDS = {  # issue 49, round 5 (H5): each secret, given in a form the walk missed
    "EQ_KEY": "hf_eqFormSecretAAAA1111", "EQ_SHORT": "hf_shortEqSecretBBBB2222", "NUMBER": "987654321098765",
    "SHELL": "sk-shellSecretCCCC3333", "ASSIGN": "hf_envAssignSecretDDDD4444",
    "KNOB": "sk-knobSecretHHHH8888",
    "STACK_HFT": "hf_stackHftSecretEEEE5555", "STACK_EQ": "hf_stackEqSecretIIII9999"}


def test_a_secret_in_a_flags_name_a_number_a_shell_string_or_a_knob_is_in_no_file(tmp: Path) -> None:
    """``--hf-token=K: true`` and ``-hft=K: true`` as args keys, an unquoted number under
    --api-key, ``env HF_TOKEN=K`` and ``sh -c "... --api-key K"`` in the command, a request knob
    under a secret's name, and a stack window's two flags whose values share their first 8
    characters: every server echoes its argv and environment. No file under the run directory
    (the frozen campaign.yaml included), and no file's or directory's name, holds any of them in
    any case, nor a piece of one."""
    s = IN_WORDS

    def echoing(plan: Any) -> Behaviour:
        return Behaviour(echo=(f"srv  main: argv {' '.join(plan.argv)}",
                               f"srv  main: env {json.dumps({**plan.env, **plan.secret_env})}"))

    spec = campaign("sec", CTX, {"s1": ["ctx", "other"]}, reps=1, requests_per_rep=1)
    spec["control"]["args"] |= {f"--hf-token={s['EQ_KEY']}": True, f"-hft={s['EQ_SHORT']}": True,
                                "--api-key": int(s["NUMBER"])}
    spec["process"] = {"command": ["env", f"HF_TOKEN={s['ASSIGN']}", "sh", "-c",
                                   f"exec llama-server --api-key {s['SHELL']} \"$@\"", "llama-server"]}
    spec["workload"]["knobs"] = {"api_key": s["KNOB"]}
    spec["windows"].append({"name": "other", "axis": "another build", "server": {
        "adapter": "llamacpp", "command": ["other-build"],
        "args": {"-c": 2048, "--metrics": True, "-hft": s["STACK_HFT"],
                 f"--hf-token={s['STACK_EQ']}": True}}})
    run_dir, paths, written = prepared_run(tmp, spec, echoing)
    boot = written["windows/s1-control/boot.log"]
    assert "--hf-token=<redacted:--hf-token>" in boot and "-hft=<redacted:-hft>" in boot  # it did echo them
    assert "--api-key <redacted:--api-key>" in boot
    assert "--hf-token=<redacted:--hf-token>" in written["windows/s1-other/boot.log"]
    assert "api_key: <redacted:api_key>" in written["campaign.yaml"]
    for secret in s.values():
        for piece in {secret, secret[:12], secret[-12:]}:
            assert not [p for p in paths if piece.lower() in p.relative_to(run_dir).as_posix().lower()], piece
            assert not [name for name, text in written.items() if piece.lower() in text.lower()], piece


SPELLED = {  # issue 49c: H7, a key that starts with '-'; H8, a secret the source text spells otherwise
    "DASH": "-DashLeadingKeyQ7w8E9r0T1", "DASH_SH": "-DashInShellKeyZ9x8C7v6",
    "COMMENTED": "hf_CommentedOutTokenAAAAAAAAAAAAAAAAAAAA1", "COMMENTED_PLAIN": "commentedPlainSecret12345",
    "HEX": "hexSecretValue12", "FOLD": "firstPartSecretAAAAMIDDLEPARTSECRETBBBBBBBBBBlastPartSecretCCCC",
    "QUOTE": "it's-my-quoted-secretVALUE9"}


def test_a_secret_however_the_campaign_spells_it_is_in_no_file(tmp: Path) -> None:
    """A key that starts with '-' after --api-key in the command and in a shell string; a line
    commented out that held a token and a secret flag's value; a secret written with YAML escapes,
    split over lines with escaped line breaks, and with a doubled quote: every server echoes its
    argv and environment. No file under the run directory (the frozen campaign.yaml included),
    nor any file's or directory's name, holds any of them in any case, as written in the source or
    as its value, nor a piece of one; the frozen copy loads as the campaign it froze."""
    from engine.campaign.load import load_campaign

    s = SPELLED

    def echoing(plan: Any) -> Behaviour:
        return Behaviour(echo=(f"srv  main: argv {' '.join(plan.argv)}",
                               f"srv  main: env {json.dumps({**plan.env, **plan.secret_env})}"))

    spec = campaign("sec", CTX, {"s1": ["ctx", "other"]}, reps=1, requests_per_rep=1)
    spec["process"] = {"command": ["llama-server", "--api-key", s["DASH"]]}
    spec["control"]["env"] = {"HEXKEY_API_KEY": s["HEX"], "FOLD_API_KEY": s["FOLD"],
                              "QUOTE_API_KEY": s["QUOTE"]}
    shell = ["sh", "-c", f'exec other-build --api-key {s["DASH_SH"]} "$@"', "other-build"]
    spec["windows"].append({"name": "other", "axis": "another build", "server": {
        "adapter": "llamacpp", "command": shell, "args": {"-c": 2048, "--metrics": True}}})
    hex_escaped = "".join(f"\\x{ord(c):02x}" for c in s["HEX"])
    # The run is given the values; its source file spells them so.
    spelled = {f"HEXKEY_API_KEY: {s['HEX']}": f'HEXKEY_API_KEY: "{hex_escaped}"',
               f"FOLD_API_KEY: {s['FOLD']}": ('FOLD_API_KEY: "firstPartSecretAAAA\\\n      '
                                              'MIDDLEPARTSECRETBBBBBBBBBB\\\n      lastPartSecretCCCC"'),
               f"QUOTE_API_KEY: {s['QUOTE']}": "QUOTE_API_KEY: 'it''s-my-quoted-secretVALUE9'",
               "\nwindows:": (f"\n# --hf-token: {s['COMMENTED']}\n# --api-key: {s['COMMENTED_PLAIN']}\n"
                              "windows:")}
    run_dir, paths, written = prepared_run(tmp, spec, echoing, spelled)
    assert "--api-key <redacted:--api-key>" in written["windows/s1-control/boot.log"]  # it did echo them
    assert "--api-key <redacted:--api-key>" in written["windows/s1-other/boot.log"]
    assert '"HEXKEY_API_KEY": "<redacted:HEXKEY_API_KEY>"' in written["windows/s1-control/boot.log"]
    leaks = [*s.values(), hex_escaped, "MIDDLEPARTSECRET", "it''s-my"]
    for secret in leaks:
        for piece in {secret, secret[:12], secret[-12:]}:
            assert not [p for p in paths if piece.lower() in p.relative_to(run_dir).as_posix().lower()], piece
            assert not [name for name, text in written.items() if piece.lower() in text.lower()], piece
    frozen = load_campaign(run_dir / "campaign.yaml")
    assert frozen.config_for("control").env["QUOTE_API_KEY"] == "<redacted:QUOTE_API_KEY>"
    assert [w.name for w in frozen.windows] == ["ctx", "other"]
