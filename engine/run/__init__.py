"""Running a campaign: the runner, its measurement phase, the load generator, boot watching, GPU
hygiene and the operator's commands (the socket they arrive on is engine.control; what a phase is
given is engine.context)."""
