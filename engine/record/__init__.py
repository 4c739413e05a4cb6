"""What a run records: typed events, the journal and its writer, its fold, the results files and
the receipts (the words the events carry: engine.words)."""
