"""Property: whatever bytes a server sends (its log, an error body, generated text) around a
secret it was passed, single-line or multi-line, printed whole or wrapped across two lines, no file
under the run directory holds the secret, nor a line of it, nor a piece of it of MIN_SECRET_LEN
characters or more (wrapped, or truncated and marked as cut).

The writers are driven directly, each with the server's words where the run puts them: the log
pump (boot.log), a batch job's log as its node wrote it, filtered as the window's end or a resume
filters it (results.scrub_file), a rep's receipt (a request's ``error``), a quality receipt (JSON),
a failure note (text), the journal (an event's text and keys) and its snapshot. This is the lowest
level that covers every writer of a run directory: each consults the directory's filter
(results.guard). A whole run on the component tier's fake server is
tests/component/test_secrets.py.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.campaign.redact import Redactor
from engine.campaign.secrets import MIN_SECRET_LEN
from engine.record import results
from engine.record.receipts import write_rep
from engine.record.writer import JournalWriter
from engine.run.boot import LogPump
from engine.servers import get_adapter

TOKEN = "hf_rulerFakeToken0123456789abcdef"
PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
       "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n"
       "-----END PRIVATE KEY-----\n")
SECRETS = {"HF_TOKEN": TOKEN, "TLS_PRIVATE_KEY": PEM}
# What must not be found: each secret whole, and each line of the key's body.
LEAKS = [TOKEN, PEM, *PEM.splitlines()[1:3]]


class Echo:
    """A server (its log alone) that prints ``data`` and ends."""

    base_url = "http://127.0.0.1:9"
    identity: dict[str, object] = {"runtime": "stand-in"}

    def __init__(self, data: bytes) -> None:
        self.data = data

    def lines(self) -> Iterator[str]:
        # As the process runtime reads a server's pipe (engine/runtime/process.py).
        for raw in self.data.splitlines(keepends=True):
            yield raw.decode("utf-8", "replace").rstrip("\r\n")

    def alive(self) -> bool:
        return False

    def exit_code(self) -> int | None:
        return 0


noise = st.text(max_size=40) | st.binary(max_size=40).map(lambda b: b.decode("utf-8", "replace"))


@settings(max_examples=50, deadline=None)
@given(before=noise, after=noise, name=st.sampled_from(sorted(SECRETS)),
       crlf=st.booleans(), prefix=st.sampled_from(["", "srv  env: ", "\t"]),
       wrap=st.none() | st.integers(MIN_SECRET_LEN, len(TOKEN) - MIN_SECRET_LEN),
       cut=st.none() | st.tuples(st.integers(MIN_SECRET_LEN, len(TOKEN) - 1),
                                 st.sampled_from(["...", "\u2026", "'", '"}', " (cut)"])))
def test_no_secret_reaches_a_file(before: str, after: str, name: str, crlf: bool, prefix: str,
                                  wrap: int | None, cut: tuple[int, str] | None) -> None:
    secret = SECRETS[name].replace("\n", "\r\n") if crlf else SECRETS[name]
    leaks = list(LEAKS)
    if wrap is not None and name == "HF_TOKEN":  # a server that wraps a long value
        secret = f"{TOKEN[:wrap]}\n{TOKEN[wrap:]}"
        leaks += [TOKEN[:wrap], TOKEN[wrap:]]
    elif cut is not None and name == "HF_TOKEN":  # quoted up to so many characters, marked cut
        secret = TOKEN[:cut[0]] + cut[1]
        leaks += [TOKEN[:cut[0]]]
    # The server prints the value as it is, or a line at a time after a prefix of its own.
    printed = "\n".join(prefix + line for line in secret.split("\n")) if prefix else secret
    said = before + printed + after
    # On tmpfs where there is one: each receipt is fsynced.
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        run = Path(d) / "run"
        wdir = run / "windows" / "s1-control"
        (wdir / "reps").mkdir(parents=True)
        results.guard(run, Redactor(SECRETS))
        pump = LogPump(Echo(said.encode()), get_adapter("llamacpp"),  # type: ignore[arg-type]
                       wdir / "boot.log", lambda fact: None, results.scrub_for(run) or str)
        pump.run()
        write_rep(wdir / "reps" / "prose-c1-r1.jsonl", {"rep": 1},
                  [{"worker": 0, "index": 0, "prompt_index": 0, "first_token": None,
                    "completion_tokens": None, "chunks": 0, "error": f"stream error: {said}"}])
        results.write_json(wdir / "greedy.json", {"outputs": [{"text": said, said: 1}]})
        results.write_atomic(wdir / "failure.txt", f"reason: {said}\n")
        node_log = wdir / "boot-node.log"  # a batch job's, written by its node
        node_log.write_text(said)
        results.scrub_file(node_log, results.scrub_for(run) or str)
        journal = JournalWriter(run / results.JOURNAL, snapshot_every=1)  # a snapshot too
        journal.append("engine_error", error=f"server said: {said}", facts={said: said})
        journal.close()
        files = [p for p in run.rglob("*") if p.is_file()]
        assert len(files) == 7, files
        for path in files:
            text = path.read_text(errors="replace")
            for leak in leaks:
                assert leak not in text, (path.name, leak)
