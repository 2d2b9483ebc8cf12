"""Processes around the engine: the launcher (fresh and warm workers, ``command`` the one place a
run's argv is built), background jobs (a run, a sweep) behind the per-device lock, repeats in
fresh processes, the tool-vs-bare benchmark and the parent-death watchdog."""
