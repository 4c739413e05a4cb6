"""The campaign as written: the spec (YAML -> frozen model, file:line:col), launch planning, the dry run."""
