"""The method's statistics, pure functions of a rep's records: spread, leak rules, rep and row
figures, SLOs, percentiles, the delta of a window against its control with its interval, reps to
a precision. A slow rep's GPU cause is engine.gpu's pure summary of the samples the rep holds."""
