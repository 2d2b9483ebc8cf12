"""Worked examples of ``--workload package.module:function`` (see ``profiler_core.user_workload``)."""
