"""The verdict section: boots added until decided need a budget that ends them."""

from engine.campaign.checks.draft import Draft
from engine.campaign.yamlmarks import Issue


def budget(d: Draft) -> list[Issue]:
    v = d.campaign.verdict
    if not v.until_decided:
        return []
    if not (d.present(("verdict", "max_boots"), v.max_boots)
            or d.present(("verdict", "max_minutes"), v.max_minutes)):
        return [(("verdict", "until_decided"), False,
                 "verdict.until_decided adds boots until each window is decided: it needs a budget, "
                 "verdict.max_boots and/or verdict.max_minutes")]
    return []
