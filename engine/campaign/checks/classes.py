"""The classes: each has exactly one source of requests, and the file it names is there and reads."""

import functools

from engine.campaign.checks.draft import Draft
from engine.campaign.checks.files import check_file
from engine.campaign.sources import SOURCES
from engine.campaign.yamlmarks import Issue


def classes(d: Draft) -> list[Issue]:
    kept = d.kept.items if d.kept else {}
    issues: list[Issue] = []
    for name, cls in d.campaign.workload.classes.items():
        where = ("workload", "classes", name)
        if not d.stands(where):
            continue
        given = [key for key in SOURCES if d.present((*where, key), getattr(cls, key))]
        if len(given) != 1:
            keys = ", ".join(repr(k) for k in SOURCES)
            state = f"has both {' and '.join(repr(k) for k in given)}" if given else f"has none of {keys}"
            issues.append((where, True, f"class {name!r} {state}; give exactly one"))
            continue
        source = SOURCES[given[0]]
        if not d.whole((*where, source.key)):  # its shape is the schema's to report
            continue
        spec = getattr(cls, source.key)
        file = source.file(spec)
        if file is not None and name not in kept:
            issues += check_file((*where, source.key, *source.file_at), file, d.base_dir, source.what,
                                 functools.partial(source.check, spec))
    return issues
