"""Tables and words derived from a run, one module per concern:

- ``frames``: finite numbers, float columns, modes in run order (shared by the others);
- ``run_kind``: whether a run ran on the CPU, and why it has no profiled window;
- ``timing``: the timing methods in words, per-step latency, the timing comparison;
- ``launch_split``: the launch-split medians and the speedup decomposed per timeline;
- ``saving``: the attribution of the headline's saving, the saving table, the kernel floor;
- ``overheads``: how much slower the profiled window ran than the headline;
- ``payback``: the break-even, the one-time costs, modes.csv for people;
- ``classification``: the verdict's kind, from the step's account (no words);
- ``verdict_text``: the verdict in words.

Scope: pure functions of DataFrames and a run's ``Figures`` (no Streamlit, no Plotly); every
function returns its documented columns also when the input is empty. This package re-exports
each module's public names (the dashboard's views import the module they use). Siblings:
``percentiles``, ``kernel_tables``, ``compare`` (runs side by side), ``run_facts`` (counters,
config, phases).
"""

from dashboard.analysis.classification import (
    GPU_BOUND_IDLE,
    KERNEL_CHANGE_SHARE,
    KERNEL_CHANGE_US,
    LAUNCH_BOUND_IDLE,
)
from dashboard.analysis.frames import MODES, finite, float_column, number, ordered_modes
from dashboard.analysis.launch_split import (
    BREAKDOWN_TABLE_COLUMNS,
    RESIDUAL_COMPONENTS,
    SPLIT_MEDIAN_COLUMNS,
    SPLIT_PARTS,
    TIMELINE_OF_COMPONENT,
    TOTAL_COMPONENT,
    breakdown_against,
    breakdown_table,
    decomposable_modes,
    split_medians,
)
from dashboard.analysis.overheads import (
    PROFILER_OVERHEAD_COLUMNS,
    profiler_overhead_text,
    profiler_overheads,
)
from dashboard.analysis.payback import (
    BREAK_EVEN_DEFINITION,
    MODES_TABLE_COLUMNS,
    PayBack,
    modes_table,
    one_time_costs,
    pay_back,
)
from dashboard.analysis.run_kind import is_cpu_run, no_profile_reason
from dashboard.analysis.saving import (
    ATTRIBUTION_LABELS,
    ATTRIBUTION_ROLES,
    NEGATIVE_SHARE_TEXT,
    SAVING_TABLE_COLUMNS,
    attribution_block,
    attribution_modes,
    attribution_parts,
    kernel_floor,
    saving_table,
)
from dashboard.analysis.timing import (
    CPU_METHOD_LABELS,
    METHOD_LABELS,
    METHOD_MEANING,
    METHOD_VERDICT,
    PER_STEP_COLUMNS,
    SERIES,
    TIMING_COLUMNS,
    headline_method,
    method_caption,
    method_label,
    per_step_latency,
    series_available,
    series_steps,
    timing_comparison,
)
from dashboard.analysis.verdict_text import Verdict, verdict

# A run's preset in words: one rule, in the config (read by the views through this package too).
from profiler_core.spec.config import preset_label, preset_text

__all__ = [
    "ATTRIBUTION_LABELS", "ATTRIBUTION_ROLES", "BREAKDOWN_TABLE_COLUMNS", "BREAK_EVEN_DEFINITION",
    "CPU_METHOD_LABELS", "GPU_BOUND_IDLE", "KERNEL_CHANGE_SHARE", "KERNEL_CHANGE_US",
    "LAUNCH_BOUND_IDLE", "METHOD_LABELS", "METHOD_MEANING", "METHOD_VERDICT", "MODES",
    "MODES_TABLE_COLUMNS", "NEGATIVE_SHARE_TEXT", "PER_STEP_COLUMNS", "PROFILER_OVERHEAD_COLUMNS",
    "RESIDUAL_COMPONENTS", "SAVING_TABLE_COLUMNS", "SERIES", "SPLIT_MEDIAN_COLUMNS", "SPLIT_PARTS",
    "TIMELINE_OF_COMPONENT", "TIMING_COLUMNS", "TOTAL_COMPONENT", "PayBack", "Verdict",
    "attribution_block", "attribution_modes", "attribution_parts", "breakdown_against",
    "breakdown_table", "decomposable_modes", "finite", "float_column", "headline_method",
    "is_cpu_run", "kernel_floor", "method_caption", "method_label", "modes_table",
    "no_profile_reason", "number", "one_time_costs", "ordered_modes", "pay_back",
    "per_step_latency", "preset_label", "preset_text", "profiler_overhead_text",
    "profiler_overheads", "saving_table", "series_available", "series_steps", "split_medians",
    "timing_comparison", "verdict",
]
