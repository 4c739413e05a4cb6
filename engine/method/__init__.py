"""The method's statistics, pure functions of a rep's records: spread, leak rules, rep and row
figures, SLOs, percentiles."""
