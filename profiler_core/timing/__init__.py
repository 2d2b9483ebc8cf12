"""Timing without a profiler: the timed trials, the held-device timer, summary statistics and the
stability checks, plus the bare hand-written loop that the tool is measured against."""
