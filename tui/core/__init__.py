"""The console's Textual-free part: what it reads (the journal and a log, in batches, from a thread),
what it derives from the folded state (the windows list, the reps, the deltas, the header, the
facts, the ETA) as plain text segments, and which columns fit. An import-linter contract keeps
Textual and Rich out of it, so each module here is tested without a screen."""
