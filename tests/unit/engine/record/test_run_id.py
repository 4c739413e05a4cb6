"""A run's id, as the runner labels its servers and prune finds them: one reading of the run."""

from __future__ import annotations

import json
from pathlib import Path

from engine.record import results


def test_engine_json_names_it_else_the_journal_else_none(tmp_path: Path) -> None:
    assert results.run_id(tmp_path) is None
    (tmp_path / results.JOURNAL).write_text(json.dumps(
        {"seq": 1, "ts": 1.0, "kind": "run_started", "run": "from-journal"}) + "\n")
    assert results.run_id(tmp_path) == "from-journal"
    (tmp_path / results.ENGINE_JSON).write_text("{not json")
    assert results.run_id(tmp_path) == "from-journal"
    (tmp_path / results.ENGINE_JSON).write_text(json.dumps({"run_id": "run.1a2b3c4d"}))
    assert results.run_id(tmp_path) == "run.1a2b3c4d"
