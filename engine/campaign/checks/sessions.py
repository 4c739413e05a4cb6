"""The sessions: each lists windows the campaign has, each once, and never the control (every
session boots it already)."""

from engine.campaign.checks.draft import Draft
from engine.campaign.yamlmarks import Issue, suggest
from engine.words import is_control


def listed(d: Draft) -> list[Issue]:
    names = [w.name for w in d.campaign.windows]
    # A window the schema dropped (its name refused) may be the one a session names.
    dropped = d.dropped(("windows",))
    issues: list[Issue] = []
    for session, items in d.campaign.sessions.items():
        seen: set[str] = set()
        for j, name in enumerate(items):
            if is_control(name):
                message = (f"session {session!r} lists {name!r}; every session boots the control "
                           "already (control_position says where)")
            elif name not in names:
                if dropped:
                    continue
                message = f"session {session!r} names unknown window {name!r}" + suggest(name, names)
            elif name in seen:
                message = f"window {name!r} is listed twice in session {session!r}"
            else:
                seen.add(name)
                continue
            issues.append((("sessions", session, j), False, message))
    return issues
