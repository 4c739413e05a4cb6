"""The `ruler` commands: the only code that starts processes for the operator (engine, console)."""
