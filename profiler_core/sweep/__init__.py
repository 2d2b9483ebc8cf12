"""Sweeps over a grid of configurations: plan, folder, runner and analysis."""
