"""The Textual console: a client of a run directory's journal and control socket (see tui.app)."""
