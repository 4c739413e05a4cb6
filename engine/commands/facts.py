"""``ruler facts``: boot facts from any saved server log, ruler's own or not.

Operators diff old boots against new ones, so the output is the same BootFacts record a run
writes (``boot-facts.json``), plus the periodic lines (acceptance, throughput) in log order,
which a boot record drops because they describe served requests rather than the boot.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from engine.campaign.prompts import MAX_DATA_BYTES
from engine.files import Unreadable, read_bounded
from engine.sanitize import terminal
from engine.servers import BootFacts, ServerAdapter, get_adapter, known_adapters

MAX_PERIODIC = 1000  # a day-long log prints tens of thousands; the first ones are enough
SHOWN_LINES = 10  # errors and warnings quoted in the human table


def read_facts(adapter: ServerAdapter, text: str) -> tuple[BootFacts, list[dict[str, Any]]]:
    """(boot facts of the whole log, periodic facts per line in log order, capped)."""
    facts = BootFacts()
    periodic: list[dict[str, Any]] = []
    for line in text.splitlines():
        found = facts.feed(adapter, line)
        row = {f.key.removeprefix("periodic."): f.value for f in found if f.key.startswith("periodic.")}
        if row and len(periodic) < MAX_PERIODIC:
            periodic.append(row)
    return facts, periodic


def facts_json(server: str, path: str, facts: BootFacts, periodic: list[dict[str, Any]]) -> dict[str, Any]:
    boot = {k: v for k, v in facts.as_json()["facts"].items() if not k.startswith("periodic.")}
    out = facts.as_json()
    out["facts"] = boot
    out["lines"] = {k: v for k, v in out["lines"].items() if k in boot}
    out["unparsed"] = [v for k, v in boot.items() if k.startswith("unparsed.")]
    return {"server": server, "file": path, "ready": bool(boot.get("ready")), **out,
            "periodic": periodic}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def render_table(data: dict[str, Any]) -> str:
    """A compact two-column table, grouped by the key's first part."""
    facts: dict[str, Any] = data["facts"]
    width = max((len(k) for k in facts), default=10)
    out = [f"{data['file']} ({data['server']}): {len(facts)} facts, "
           f"{'ready' if data['ready'] else 'never ready'}, {len(data['errors'])} errors, "
           f"{len(data['warnings'])} warnings"]
    group = None
    for key in sorted(facts, key=lambda k: (k.startswith("unparsed."), k)):
        head = key.split(".", 1)[0]
        if head != group:
            out.append("")
            group = head
        value = _cell(facts[key])
        out.append(f"  {key:<{width}}  {value if len(value) <= 100 else value[:97] + '...'}")
    if data["periodic"]:
        rows = data["periodic"]
        out += ["", f"periodic lines: {len(rows)}"]
        for key in ("accept_len", "accept_rate", "gen_tps"):
            values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
            if values:
                out.append(f"  {key:<12} last {_cell(values[-1])}  min {_cell(min(values))}  "
                           f"max {_cell(max(values))}  (windowed by the server; not a rep figure)")
    for what in ("errors", "warnings"):
        if data[what]:
            out += ["", f"{what} (verbatim, first {min(SHOWN_LINES, len(data[what]))}):"]
            out += [f"  {line}" for line in data[what][:SHOWN_LINES]]
    # Every line quotes the log: shown on a terminal, never acted on.
    return "\n".join(map(terminal, out))


def cmd_facts(server: str, logfile: str, as_json: bool) -> int:
    """``ruler facts --server S LOGFILE [--json]``: 0, or 2 with a message for bad input."""
    try:
        adapter = get_adapter(server)
    except ValueError:
        print(terminal(f"ruler facts: unknown server {server!r}; known: {', '.join(known_adapters())}"),
              file=sys.stderr)
        return 2
    path = Path(logfile)
    try:  # the checked opener: a FIFO or a device named as the log is refused, never waited on
        text = read_bounded(path, MAX_DATA_BYTES).decode("utf-8", errors="replace")
    except OSError as e:
        print(terminal(f"ruler facts: cannot read {logfile}: {e.strerror or e}"), file=sys.stderr)
        return 2
    except Unreadable as e:
        print(terminal(f"ruler facts: cannot read {logfile}: {e}"), file=sys.stderr)
        return 2
    facts, periodic = read_facts(adapter, text)
    data = facts_json(server, logfile, facts, periodic)
    print(json.dumps(data, indent=2) if as_json else render_table(data))
    return 0
