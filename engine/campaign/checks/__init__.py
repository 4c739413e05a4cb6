"""The checks that span a campaign's keys, which its schema cannot say (a session naming a window
the campaign has, one axis a window, a prompt file there): one module per concern, each on the
campaign as the schema accepted it (:class:`~engine.campaign.checks.draft.Draft`), each problem an
Issue at a path its marks place at file:line:col. :func:`issues` runs them all."""

from engine.campaign.checks import classes, knobs, loads, places, quality, runtime, sessions, verdict, windows
from engine.campaign.checks.draft import Draft
from engine.campaign.yamlmarks import Issue

CHECKS = (windows.names, windows.axes, windows.sweeps, windows.stacks, sessions.listed, places.places,
          classes.classes, loads.loads, runtime.runtime, quality.quality, knobs.finite, verdict.budget)


def issues(draft: Draft) -> list[Issue]:
    """Every check's issues, at the paths of the data as written."""
    return draft.placed([issue for check in CHECKS for issue in check(draft)])
