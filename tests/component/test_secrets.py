"""A server that echoes the secrets it was passed (pass_env) into its boot log, its stream errors
and its generated text: no file of the run holds one. The real llama-server's run is in
tests/integration/test_secrets.py; the filter itself in tests/unit/engine/campaign/test_redact.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
    try:
        spec = campaign("sec", CTX, {"s1": ["ctx"]}, reps=1, requests_per_rep=1,
                        quality={"greedy": {"n": 1, "max_tokens": 4},
                                 "teacher_forced": {"positions": 1}})
        spec["pass_env"] = ["HF_TOKEN", "TLS_PRIVATE_KEY"]
        r = runner(tmp, spec, fake, phases=[Measurement(), Quality()])
        r.run()
    finally:
        fake.close()
    run = r.run_dir
    written = {p.relative_to(run).as_posix(): p.read_text(errors="replace")
               for p in run.rglob("*") if p.is_file() and p.name != "engine.lock"}
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
