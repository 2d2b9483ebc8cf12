"""The run folder on disk: safe writing and ownership, table limits, the one reader and writer of
a run, and the runs index."""
