"""A guarded run directory: every file the results writers put under it passes its filter
(engine.record.results.guard), whichever path names it; files elsewhere are written as given."""

from __future__ import annotations

import json
from pathlib import Path

from engine.record import results


def test_every_writer_under_a_guarded_directory_filters(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "windows").mkdir(parents=True)
    (tmp_path / "link").symlink_to(run)
    results.guard(run, lambda text: text.replace("s3cr3t-value", "<redacted:X>"))
    results.write_atomic(tmp_path / "link" / "windows" / "a.txt", "is s3cr3t-value\n")
    results.write_json(run / "b.json", {"s3cr3t-value": ["s3cr3t-value"]})
    results.write_jsonl(run / "c.jsonl", [{"e": "s3cr3t-value"}])
    results.write_atomic(tmp_path / "outside.txt", "s3cr3t-value")
    assert (run / "windows" / "a.txt").read_text() == "is <redacted:X>\n"
    assert json.loads((run / "b.json").read_text()) == {"<redacted:X>": ["<redacted:X>"]}
    assert json.loads((run / "c.jsonl").read_text()) == {"e": "<redacted:X>"}
    assert (tmp_path / "outside.txt").read_text() == "s3cr3t-value"
