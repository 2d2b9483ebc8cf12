"""Processes around the engine: the launcher (fresh and warm workers, ``command`` the one place a
config becomes argv), background jobs behind a device lock, repeats in fresh processes, the
tool-vs-bare benchmark and the parent-death watchdog."""
