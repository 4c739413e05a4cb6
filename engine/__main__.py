"""``python -m engine ...`` is ``ruler ...`` (the detached engine is started this way)."""

import sys

from engine.commands.cli import main

sys.exit(main())
