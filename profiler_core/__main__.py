"""``python -m profiler_core``: the command line (see profiler_core.cli.main)."""

import sys

# Before the heavy imports: a launcher's child ends with its parent, and a Python told not to
# write bytecode keeps torch's compiled modules in the tool's cache (spec.bytecode).
from profiler_core.orchestration.parent import end_with_parent
from profiler_core.spec.bytecode import keep_bytecode

end_with_parent()
bytecode = keep_bytecode()
if bytecode.refused:
    print(f"note: {bytecode.reason}. Modules without installed bytecode are compiled from source "
          "in every process (PROFILER_CORE_BYTECODE_CACHE=0 turns the cache and this note off)",
          file=sys.stderr)
elif bytecode.first_use:
    print(f"note: Python here writes no bytecode and torch ships none, so this first command "
          f"compiles torch's modules once into {bytecode.folder} (10-20 s on the H200 VM where "
          "this was measured); later commands reuse them", file=sys.stderr)

from profiler_core.cli.main import run_from_command_line  # noqa: E402  (after the parent hook)

run_from_command_line()
