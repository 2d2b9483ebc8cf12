"""Processes around the engine: the launcher for fresh and warm workers, repeats in fresh
processes, the tool-vs-bare benchmark and the parent-death watchdog."""
