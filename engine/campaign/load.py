"""Loading a campaign file, parsed once: bytes -> text -> YAML with its marks -> its sweeps expanded
-> the frozen model, then the checks that span keys (engine.campaign.checks) on that model.
Loading never stops at the first problem: YAML duplicates, every schema error and every check's
error are collected into one SpecError, each at file:line:col, so a user fixes a file in one pass.
The campaign keeps its text and its marks: its warnings are placed by them, and nothing reads the
file again. docs/campaign.md is the reference."""

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from engine.campaign import checks, frozen, sweep
from engine.campaign.checks.draft import Draft
from engine.campaign.prompts import DataFileError, NotUtf8, decode_text
from engine.campaign.spec import Campaign
from engine.campaign.yamlmarks import (
    Issue,
    MarkedDoc,
    Problem,
    duplicate_issues,
    load_marked,
    place,
    schema_issue,
    yaml_problem,
)
from engine.files import Unreadable, read_bounded

MAX_CAMPAIGN_BYTES = 1 << 20  # a campaign is a few kilobytes; prompts belong in prompt files
# A tune file's own keys (engine.tune.spec): a file with both and no server of its own is one.
TUNE_KEYS = ("space", "objective")


class SpecError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))


class NotACampaign(SpecError):
    """A file that holds no campaign at all: unreadable, not UTF-8, not YAML, empty, or a tune file
    (``tune_file``: `ruler validate` checks it as one)."""

    def __init__(self, problem: Problem, tune_file: bool = False) -> None:
        super().__init__([problem])
        self.tune_file = tune_file


@dataclass(frozen=True)
class Parsed:
    """A campaign file as text and YAML: its marks, its sweeps expanded, what its schema says."""

    path: Path
    text: str
    doc: MarkedDoc  # the file's data and marks, as written
    expansion: sweep.Expansion  # its sweeps expanded, each path back to where it was written
    written: list[Issue]  # the file's own problems: a key twice, a sweep that expands to nothing
    schema: list[Issue]  # the schema's, at the file's paths
    campaign: Campaign | None  # None: the schema refused it

    @property
    def file(self) -> str:
        return str(self.path)

    @property
    def marks(self) -> MarkedDoc:
        """The marks of the data as expanded, each path placed where it was written."""
        return self.expansion.doc(self.doc)

    def problems(self, issues: list[Issue]) -> list[Problem]:
        return sorted({place(self.file, self.doc, i) for i in self.written + self.schema}
                      | {place(self.file, self.marks, i) for i in issues})


def load_campaign(path: str | Path) -> Campaign:
    """The campaign in ``path``, every check passed; else a SpecError with every problem."""
    parsed = parse(Path(path))
    run = frozen.run_of(parsed.path)
    try:  # a run's own campaign: its classes' items and quality prompts are what the run froze
        kept = frozen.read(run) if run is not None else None
    except DataFileError as exc:
        raise SpecError([Problem(parsed.file, 1, 1, f"this run's frozen {exc}")]) from None
    draft = Draft.of(parsed.expansion.data, parsed.campaign, parsed.marks, parsed.path.parent, kept)
    unplaced = {f"window {n!r} is in no session" for n in parsed.expansion.unplaced}
    issues = [i for i in checks.issues(draft) if i[2] not in unplaced] if draft is not None else []
    if parsed.written or parsed.schema or issues or parsed.campaign is None:
        raise SpecError(parsed.problems(issues))
    parsed.campaign._frozen = kept
    return parsed.campaign


def parse(path: Path) -> Parsed:
    """Read, decode and parse ``path``, expand its sweeps and validate the result; a file that is
    no campaign at all is NotACampaign."""
    file = str(path)
    try:
        data = read_bounded(path, MAX_CAMPAIGN_BYTES)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise NotACampaign(Problem(file, 1, 1, f"cannot read campaign file ({reason})")) from None
    except Unreadable as exc:
        problem = (f"campaign file is {exc}" if exc.size is None else
                   f"campaign file is larger than {MAX_CAMPAIGN_BYTES // 1024} KiB; a campaign is a few "
                   "(prompts belong in prompt files)")
        raise NotACampaign(Problem(file, 1, 1, problem)) from None
    try:
        text = decode_text(data)
    except NotUtf8 as exc:
        message = f"not UTF-8 text (byte 0x{exc.byte:02x}); save the file as UTF-8"
        raise NotACampaign(Problem(file, exc.line, exc.col, message)) from None
    try:
        doc = load_marked(text)
    except yaml.YAMLError as exc:
        raise NotACampaign(yaml_problem(file, exc)) from None
    if doc.data is None:
        raise NotACampaign(Problem(file, 1, 1, "campaign file is empty"))
    if is_tune_file(doc.data):  # one line that says so, not every campaign key it lacks
        raise NotACampaign(Problem(file, 1, 1, "a tune file (space, objective), not a campaign: "
                                           "`ruler tune FILE` runs it, `ruler validate FILE` checks it"),
                           tune_file=True)
    # The file's own issues (duplicates, sweep entries) and the schema's of the data as expanded,
    # each at the path it was written at.
    expansion = sweep.expand(doc.data)
    campaign: Campaign | None = None
    schema: list[Issue] = []
    try:
        campaign = Campaign.model_validate(expansion.data)
    except ValidationError as exc:
        schema = [schema_issue({**err, "loc": expansion.source(tuple(err["loc"]))}, Campaign)
                  for err in exc.errors()]
    parsed = Parsed(path, text, doc, expansion, duplicate_issues(doc) + expansion.issues, schema, campaign)
    if campaign is not None:
        campaign._source_path = path.resolve()
        campaign._source_text = text
        campaign._marks = parsed.marks
    return parsed


def is_tune_file(data: object) -> bool:
    """Whether ``data`` is a tune file: its own keys, or its base campaign (a key no campaign has),
    so that one of its keys misspelt is reported as the tune file's, not as 13 campaign keys."""
    return isinstance(data, dict) and "server" not in data and (
        all(k in data for k in TUNE_KEYS) or "campaign" in data)
