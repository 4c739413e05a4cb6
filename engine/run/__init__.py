"""Running a campaign: the runner, its phases (measurement), the load generator, boot watching,
operator commands and the control socket."""
