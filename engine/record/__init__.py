"""What a run records: typed events and their vocabulary, the journal, its fold, the results files."""
