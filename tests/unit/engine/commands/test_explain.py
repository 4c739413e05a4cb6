"""What a campaign author reads: ``ruler --help``, ``ruler validate --explain`` and ``ruler schema``.

The schema is checked the way an editor uses it: it must itself be a valid draft 2020-12 schema,
every campaign shipped in campaigns/ must validate against it (jsonschema, the reference
implementation), and a file ruler refuses for its shape must be refused by it too.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from engine.campaign.load import load_campaign
from engine.campaign.spec import campaign_schema
from engine.commands.cli import build_parser, main
from engine.commands.validate import resolved_yaml
from tests.paths import REPO

ROOT = REPO
CAMPAIGNS = sorted((ROOT / "campaigns").glob("*.yaml"))
GLM = ROOT / "campaigns" / "glm53-flash-round3.yaml"
SHIPPED = ROOT / "docs" / "campaign.schema.json"


def test_help_lists_no_hidden_command() -> None:
    """`engine` (the detached engine's entry point) was listed as "engine    ==SUPPRESS==": argparse
    lists every subcommand given a help text, SUPPRESS included."""
    text = build_parser().format_help()
    assert "SUPPRESS" not in text
    assert "engine" not in [line.split()[0] for line in text.splitlines() if line.startswith("    ")]
    for command in ("validate", "schema", "run", "attach"):
        assert f"\n    {command} " in text, command


# ------------------------------------------------------------------ ruler schema


def validator() -> jsonschema.Draft202012Validator:
    schema = campaign_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", CAMPAIGNS, ids=[p.name for p in CAMPAIGNS])
def test_every_shipped_campaign_validates_against_the_schema(path: Path) -> None:
    errors = [e.message for e in validator().iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


def _errors(doc: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(doc)]


def test_the_schema_refuses_what_ruler_refuses_for_its_shape() -> None:
    base = yaml.safe_load(GLM.read_text())
    cases: list[tuple[str, Any, str]] = [
        ("workload.clases", {"prose": {"file": "x"}}, "Additional properties"),  # a typo'd key
        ("name", "GLM Round 3", "does not match"),  # a name that becomes a directory
        ("workload.reps", "3", "is not of type 'integer'"),
        ("leak.spread", 1.5, "greater than or equal to the maximum of 1"),
        ("sessions.s-1", ["w"], "does not match any of the regexes"),  # '-' splits session-window
        ("control.args.--x", {"nested": 1}, "is not valid under any of the given schemas"),
        ("docker.gpus", "some", "is not valid under any of the given schemas"),
        ("quality.kl.oracle", "teacher", "is not valid under any of the given schemas"),
    ]
    for where, value, said in cases:
        doc = copy.deepcopy(base)
        *parents, key = where.split(".")
        node = doc
        for p in parents:
            node = node[p]
        node[key] = value
        errors = _errors(doc)
        assert any(said in e for e in errors), (where, errors)


def test_ruler_schema_prints_the_shipped_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/campaign.schema.json is what editors point at: it must be `ruler schema`'s output."""
    assert main(["schema"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed) == campaign_schema()
    assert printed == SHIPPED.read_text(), "regenerate: ruler schema > docs/campaign.schema.json"


# ------------------------------------------------------------------ ruler validate --explain


def test_explain_prints_the_resolved_campaign_and_every_window_s_plan(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--explain", str(GLM)]) == 0
    out = capsys.readouterr().out
    head, _, plan = out.partition("# what `ruler run` would start")
    assert head.startswith("OK: glm53-flash-round3: 8 windows in 2 sessions")
    resolved = yaml.safe_load(head.split("\n", 1)[1])
    # Defaults the file leaves out are filled in...
    written = yaml.safe_load(GLM.read_text())
    assert "knobs_check" not in written["quality"] and "positions" not in written["quality"]["kl"]
    assert resolved["quality"]["knobs_check"] is True
    assert resolved["quality"]["kl"] == {"texts": None, "file": None, "top_k": 10, "positions": 4,
                                         "oracle": {"receipt": "${GLM53_FP8_ORACLE}"}}
    # ...and each window's full argv and the request body (knobs included) follow, once per window.
    campaign = load_campaign(GLM)
    for session in campaign.sessions:
        for i, window in enumerate(campaign.windows_in(session), 1):
            assert f"  [{i}] {window}: " in plan, (session, window)
    assert plan.count("docker run -d") == sum(len(campaign.windows_in(s)) for s in campaign.sessions)
    assert '"reasoning_effort": "low"}' in plan.split("\n")[4]  # the requests line, knobs and all


def test_the_resolved_campaign_is_the_same_campaign(tmp_path: Path) -> None:
    """What --explain prints can be saved and run: it loads back to an equal campaign."""
    for path in CAMPAIGNS:
        campaign = load_campaign(path)
        copy_ = tmp_path / path.name
        copy_.write_text(resolved_yaml(campaign))
        for files in ("prompts", "data"):
            (tmp_path / files).unlink(missing_ok=True)
            (tmp_path / files).symlink_to(ROOT / "campaigns" / files)
        assert load_campaign(copy_).model_dump() == campaign.model_dump(), path.name


def test_explain_of_a_bad_campaign_is_its_problems_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GLM.read_text().replace("reps: 3", "reps: three"))
    assert main(["validate", "--explain", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"{bad}:" in err and "reps" in err
