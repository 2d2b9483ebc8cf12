"""Sweeps over a grid of configurations: ``plan`` (the value grammar and the plan), ``store`` (the
sweep folder, claims and reading it back), ``runner`` (measuring the points) and ``analysis``
(speedup, crossover, break-even and amortisation tables)."""
