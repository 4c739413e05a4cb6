"""The quality checks' prompts: inline or from a file (not both), each file there and readable,
and a stored oracle receipt there and readable."""

from engine.campaign.checks.draft import Draft
from engine.campaign.checks.files import check_file
from engine.campaign.prompts import read_prompts, read_receipt
from engine.campaign.spec import KLSpec, OracleReceipt
from engine.campaign.yamlmarks import Issue


def quality(d: Draft) -> list[Issue]:
    """A run's own campaign reads its quality prompts from what the run froze (``d.kept``)."""
    kept = d.kept.quality if d.kept is not None else None
    q = d.campaign.quality
    issues: list[Issue] = []
    for section, inline, part in (("greedy", "prompts", q.greedy), ("kl", "texts", q.kl)):
        where = ("quality", section)
        if not d.stands(where):
            continue
        if (d.present((*where, inline), getattr(part, inline))
                and d.present((*where, "file"), part.file)):
            issues.append((where, True, f"quality.{section} has both {inline!r} and 'file'; give one"))
        if kept is None or section not in kept:
            # A run an older ruler made froze no quality prompts: its copy names a file beside it.
            what = "prompt file" if kept is None else "prompt file (the run froze none of them)"
            issues += check_file((*where, "file"), part.file, d.base_dir, what, read_prompts)
        if isinstance(part, KLSpec) and isinstance(part.oracle, OracleReceipt):
            issues += check_file((*where, "oracle", "receipt"), part.oracle.receipt, d.base_dir,
                                 "oracle receipt", read_receipt)
    return issues
