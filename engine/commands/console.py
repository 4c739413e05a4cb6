"""Opening the console: its own program (``python -m tui.app RUN_DIR``), so the engine never
imports the UI. It replaces this process: the terminal, its signals and the exit code are its own."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn


def open_console(run_dir: Path) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "tui.app", str(run_dir)])
