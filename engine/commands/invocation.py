"""How to name ruler in a command printed for the operator to type: ``ruler`` when that is this
ruler on the PATH, else the path of this environment's script (``make demo`` leaves ruler in
``.venv/bin``, not on the PATH): a printed command works as printed."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def ruler_command() -> str:
    import shutil  # here, not at the top: `ruler status` imports this module and rarely asks it

    mine = Path(sys.executable).parent / "ruler"
    found = shutil.which("ruler")
    if not mine.exists() or (found and Path(found).resolve() == mine.resolve()):
        return "ruler"
    rel = os.path.relpath(mine)
    if rel.startswith(".."):
        return str(mine)
    # A bare name is looked up on the PATH, where this ruler is not: from its own directory, ./ruler.
    return rel if os.sep in rel else os.path.join(os.curdir, rel)
