"""``python -m profiler_core``: the command line (see profiler_core.cli.main)."""

from profiler_core.cli.main import run_from_command_line

run_from_command_line()
