"""Worked examples of ``--workload package.module:function`` (see ``profiler_core.engine.user_workload``)."""
