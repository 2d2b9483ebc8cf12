"""The verdict in plain words: a title and a paragraph saying how much a mode saves per step and
why, worded from the step's account and its kind (``classification``).

Scope: text only, from a run's figures, attribution.csv and break-even (no Streamlit, no Plotly);
every figure quoted is per training step of the headline, never the profiled window's totals.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from dashboard.analysis.classification import (
    CPU_RUN,
    GPU_BOUND,
    KERNEL_CHANGE_SAID_US,
    LAUNCH_BOUND,
    MIXED,
    NO_TIMING,
    UNKNOWN,
    StepAccount,
    classify,
    step_account,
)
from dashboard.analysis.frames import finite
from dashboard.analysis.payback import PayBack
from dashboard.analysis.run_kind import CPU_REASON_START
from profiler_core.analysis.attribution import stretched_kernel_notes
from profiler_core.analysis.figures import Figures


@dataclass(frozen=True)
class Verdict:
    kind: str  # "launch-bound", "gpu-bound", "mixed", "unknown"
    title: str
    text: str


def _us(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:,.1f}"


def _share(part: float, saving: float) -> str:
    """' (101% of the saving)'; nothing when there is no saving to share (a mode not faster)."""
    if not finite(saving) or saving <= 0:
        return ""
    pct = part / saving * 100
    return f" ({pct:.0f}% of the saving)" if abs(pct) >= 100 else f" ({pct:.1f}% of the saving)"


def verdict(figures: Figures, attribution: pd.DataFrame,
            no_split_reason: str | None = None, mode: str = "graph",
            pay: PayBack | None = None) -> Verdict:
    """Plain words: how much ``mode`` saves per step (the headline, timed with no profiler) and
    why, from the attribution of that saving (``profiler_core.analysis.attribution``): how long the eager
    GPU sat idle, how much idle the mode removed, and what it added (its batch copy, a change in
    kernel time). Every figure is per training step of the headline; the profiled window's totals
    (slower: the profiler slows every launch) are never quoted as the step. ``pay``: the mode's
    break-even, said when the mode is not faster."""
    account = step_account(figures, attribution, mode)
    cpu = bool(no_split_reason and no_split_reason.startswith(CPU_REASON_START))
    kind = classify(account, cpu)
    speedup_text = f"{account.speedup:.2f}x" if finite(account.speedup) else "unknown"
    eager, other, saving = account.eager_us, account.mode_us, account.saving_us
    net = (f"a saving of {_us(saving)} us per step" if saving > 0 else
           f"the {mode} step is {_us(-saving)} us slower")
    timed = (f"Timed in a training loop with no profiler, an eager step took {_us(eager)} us and a "
             f"{mode} step {_us(other)} us: {speedup_text}, {net}. " if account.timed else "")
    if kind.kind == UNKNOWN:
        return _unknown(kind.missing, figures, mode, timed, no_split_reason)
    e_kernels, m_kernels = account.eager_kernels_us, account.mode_kernels_us
    m_copy, e_idle = account.mode_copy_us, account.eager_idle_us
    idle_share, idle_removed = account.idle_share, account.idle_removed_us
    if account.host_paced:
        host = (f"; the host needed {_us(account.eager_host_us)} us to issue the step, so it set "
                "the pace and the GPU waited for it")
    elif finite(account.eager_host_us):
        host = f"; the host needed only {_us(account.eager_host_us)} us to issue the step"
    else:
        host = ""
    added_text = _added(account)
    kernels_differ = ""
    if account.kernels_differ:
        kernels_differ = (f" The {mode} step runs other GPU work than eager's ({_us(m_kernels)} vs "
                          f"{_us(e_kernels)} us of kernels per step): a capturable optimizer, for "
                          "one, adds kernels (see Kernels).")
    work = m_kernels + m_copy
    floor = (f" The {mode} step is {other / work:.2f}x its GPU work ({_us(m_kernels)} us of kernels"
             + (f" + {_us(m_copy)} us of batch copy" if m_copy else "")
             + "), the floor no launch strategy can beat." if work > 0 else "")
    removed = (f"The {mode} removed {_us(idle_removed)} us of idle{_share(idle_removed, saving)}"
               f"{added_text}.")
    never = ""
    if saving <= 0:
        cost = f" ({pay.cost_text})" if pay is not None and finite(pay.one_time_ms) else ""
        never = f" Its one-time cost{cost} is never paid back."
    stretched = ""
    notes = [] if attribution.empty else stretched_kernel_notes(
        attribution[attribution["mode"].astype(str) == mode])
    if notes:
        stretched = " Note: " + "; ".join(notes) + "."
    if kind.kind == LAUNCH_BOUND:
        title = f"Launch-bound: eager mode kept the GPU waiting ({speedup_text} speedup)"
        text = (f"{timed}The GPU sat idle {_us(e_idle)} of the eager step's {_us(eager)} us "
                f"({idle_share:.0%}): its kernels ran {_us(e_kernels)} us{host}. A CUDA graph "
                f"replays the whole step with one launch. {removed}{kernels_differ}{floor}")
    elif kind.kind == GPU_BOUND:
        title = f"GPU-bound: the kernels set the pace ({speedup_text} speedup)"
        text = (f"{timed}The GPU was busy {1 - idle_share:.0%} of the eager step "
                f"({_us(eager - e_idle)} of {_us(eager)} us){host}, so a graph can save at most "
                f"the {_us(e_idle)} us of idle. {removed}{kernels_differ}")
        if saving > 0:
            text += (" A speedup near 1x is the expected result. To go faster, shrink the GPU work "
                     "first (TF32, bf16, smaller layers).")
    else:
        title = f"Partly launch-bound ({speedup_text} speedup)"
        text = (f"{timed}The GPU sat idle {_us(e_idle)} of the eager step's {_us(eager)} us "
                f"({idle_share:.0%}) and ran kernels for {_us(e_kernels)} us{host}. {removed} A "
                f"graph removes the launch gaps but not the kernel time.{kernels_differ}{floor}")
    if saving <= 0:
        title = (f"{title.split(':')[0]}: the {mode} is not faster ({speedup_text}), so it never "
                 "pays back" if kind.kind != MIXED else
                 f"Partly launch-bound, but the {mode} is not faster ({speedup_text}): it never "
                 "pays back")
    return Verdict(kind.kind, title, text + never + stretched)


def _added(account: StepAccount) -> str:
    """What the mode added beside the idle it removed: longer kernels, a batch copy ('' for
    neither)."""
    added = []
    saving, kernel_change = account.saving_us, account.kernel_change_us
    if abs(kernel_change) >= KERNEL_CHANGE_SAID_US:
        added.append(f"its kernels took {_us(abs(kernel_change))} us "
                     f"{'longer' if kernel_change > 0 else 'less'}{_share(-kernel_change, saving)}")
    copy_added = account.mode_copy_us - account.eager_copy_us
    if copy_added > 0:
        added.append(f"its batch copy added {_us(copy_added)} us{_share(-copy_added, saving)}")
    return ((", but " if saving <= 0 else "; ") + " and ".join(added)) if added else ""


def _unknown(missing: str, figures: Figures, mode: str, timed: str,
             no_split_reason: str | None) -> Verdict:
    """The verdict of a run that cannot say why: a CPU run, one without both steps timed, or one
    without a launch split."""
    if missing == CPU_RUN:
        eager_ms = figures.get("eager", "median_ms")
        eager_text = (f"Timed in a training loop on the CPU, an eager step took {eager_ms:.3f} "
                      "ms (wall clock). " if finite(eager_ms) else "")
        return Verdict(
            UNKNOWN, "A CPU run: eager only, no graph and no launch split",
            f"{eager_text}CUDA graphs, the graph timing and the profiler's launch split need "
            "a CUDA GPU, so a CPU run times the eager step only and cannot say what a graph "
            "would save. Run on a GPU (or open the bundled H200 sample) to see why.")
    if missing == NO_TIMING:
        return Verdict(
            UNKNOWN, f"No {mode} timing in this run",
            f"This run has no steady-state timing of both eager and {mode} "
            f"({no_split_reason or 'not recorded'}), so it cannot say what the {mode} saves.")
    reason = no_split_reason or "profiler off or not recorded"
    return Verdict(
        UNKNOWN, "No launch split in this run",
        f"{timed}This run has no profiled window ({reason}), so it cannot say how much of the "
        "saving was GPU idle time removed and how much a change in kernel time. Turn the "
        "profiler on to see why.")
