"""A data-parallel run's result, built on rank 0 from what every rank measured
(``ddp_step.measure_rank``'s payloads).

Scope: tables and headline only (pure pandas over the payloads, plus the traces written into a
scratch folder). The per-rank tables are ``rank_latency`` and ``ranks`` (``schema``); the
single-run tables (latency, stats, modes, metrics, launch_split, kernels) hold the job's view,
each mode's slowest rank, so every other page of the dashboard reads a data-parallel run as it
reads any run.
"""

from __future__ import annotations

import math
import platform
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from profiler_core.analysis import metrics
from profiler_core.analysis import ranks as rank_analysis
from profiler_core.spec import hostinfo, schema
from profiler_core.spec.config import RunConfig
from profiler_core.spec.headline import written_facts
from profiler_core.storage.results import SCRATCH_PREFIX, RunResult, coerce_table
from profiler_core.timing import stats


def _rank_latency(payloads: list[dict]) -> pd.DataFrame:
    rows = [(payload["rank"], *row) for payload in payloads for row in payload["rows"]]
    return coerce_table("rank_latency", pd.DataFrame(rows, columns=schema.RANK_LATENCY_COLUMNS))


def _host_issue(payloads: list[dict]) -> pd.DataFrame:
    rows = [(payload["rank"], *row) for payload in payloads for row in payload["host_issue"]]
    return pd.DataFrame(rows, columns=["rank", "mode", "trial", "ms"])


def _check_rows(payload: dict) -> list[tuple]:
    rank, checks = payload["rank"], payload["checks"]
    rows = [(rank, mode, "one_time_ms", value) for mode, value in payload["one_time_ms"].items()]
    rows += [(rank, mode, "params_max_abs_diff_to_rank0", value)
             for mode, value in checks["params_to_rank0"].items()]
    rows += [(rank, mode, "parity_max_abs_diff", value)
             for mode, value in checks.get("parity", {}).items()]
    rows += [(rank, mode, "all_reduce_captured", value) for mode, value in checks["captured"].items()]
    rows += [(rank, mode, "graph_all_reduce_nodes", value)
             for mode, value in checks["graph_nodes"].items()]
    return rows


def ranks_table(payloads: list[dict], rank_latency: pd.DataFrame) -> pd.DataFrame:
    """ranks.csv: every rank's figures per mode (``analysis.ranks.RANK_METRICS``)."""
    parts = [rank_analysis.step_figures(rank_latency, _host_issue(payloads))]
    rows: list[tuple] = []
    instances: dict[str, dict[int, pd.DataFrame]] = {}
    for payload in payloads:
        for mode, window in payload["windows"].items():
            rows += rank_analysis.window_summary(payload["rank"], mode,
                                                 pd.DataFrame(window["figures"]))
            instances.setdefault(mode, {})[payload["rank"]] = pd.DataFrame(
                window["instances"], columns=rank_analysis.INSTANCE_COLUMNS)
        rows += _check_rows(payload)
    for mode, per_rank in instances.items():
        if len(per_rank) == len(payloads):
            rows += rank_analysis.wait_summary(mode, rank_analysis.arrival_waits(per_rank))
    parts.append(pd.DataFrame(rows, columns=schema.RANK_COLUMNS))
    table = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(
        len(p) for p in parts) else pd.DataFrame(columns=schema.RANK_COLUMNS)
    return coerce_table("ranks", rank_analysis.with_speedups_and_straggler(table))


def _slowest_latency(rank_latency: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """latency.csv of the job: each mode's rows from its slowest rank."""
    parts = []
    for mode in rank_latency["mode"].drop_duplicates():
        _, rank = rank_analysis.job_step_ms(table, mode)
        rows = rank_latency[(rank_latency["mode"] == mode) & (rank_latency["rank"] == rank)]
        parts.append(rows.drop(columns="rank"))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=schema.LATENCY_COLUMNS)
    return coerce_table("latency", frame)


def _slowest_window_table(name: str, payloads: list[dict], table: pd.DataFrame) -> pd.DataFrame:
    """launch_split.csv or kernels.csv of the job: each mode's profiled window on its slowest
    rank (``trace.analyse_trace``'s tables, as that rank recorded them)."""
    parts = []
    for payload in payloads:
        for mode, window in payload["windows"].items():
            if rank_analysis.job_step_ms(table, mode)[1] == payload["rank"] and name in window:
                parts.append(pd.DataFrame(window[name]))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=schema.TABLE_FILES[name][1])
    return coerce_table(name, frame)


def _per_step(rows: pd.DataFrame) -> pd.Series:
    column = "gpu_ms" if rows["gpu_ms"].notna().any() else "wall_ms"
    return rows[column].astype(float) / rows["steps"].astype(float)


def _stats_and_modes(config: RunConfig, latency: pd.DataFrame, table: pd.DataFrame,
                     payloads: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """stats.csv and modes.csv of the job (each mode's slowest rank)."""
    stat_rows, mode_rows = [], []
    trial_means = {}
    for mode in latency["mode"].drop_duplicates():
        rows = latency[latency["mode"] == mode]
        per_step = _per_step(rows)
        trial_means[mode] = per_step.groupby(rows["trial"]).mean().to_numpy()
        method = "steady_event" if rows["gpu_ms"].notna().any() else "steady_wall"
        stat_rows.append({"mode": mode, "method": "steady_trial", **stats.summarize(trial_means[mode])})
        stat_rows.append({"mode": mode, "method": method, **stats.summarize(per_step)})
        _, rank = rank_analysis.job_step_ms(table, mode)
        issue = _host_issue(payloads)
        issued = issue[(issue["mode"] == mode) & (issue["rank"] == rank)]["ms"]
        summary = stats.summarize(issued.astype(float))
        if summary["count"]:
            stat_rows.append({"mode": mode, "method": "host_issue", **summary})
    eager = trial_means.get("eager", [])
    for mode, means in trial_means.items():
        speedup, low, high = stats.median_ratio_ci(eager, means, seed=config.seed)
        one_time = max((p["one_time_ms"].get(mode, math.nan) for p in payloads), default=math.nan)
        mode_rows.append({"mode": mode, "median_ms": stats.summarize(means)["median_ms"],
                          "speedup": speedup, "speedup_ci_low": low, "speedup_ci_high": high,
                          "one_time_ms": one_time, "memory_bytes": math.nan,
                          "graphs_recorded": 1.0 if mode == "graph" else math.nan})
    return (coerce_table("stats", pd.DataFrame(stat_rows, columns=schema.STATS_COLUMNS)),
            coerce_table("modes", pd.DataFrame(mode_rows, columns=schema.MODES_COLUMNS)))


def _traces(payloads: list[dict]) -> tuple[dict[str, Path | None], Path | None]:
    """Every rank's traces written into a scratch folder: trace key -> path."""
    if not any(payload["windows"] for payload in payloads):
        return {}, None
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    paths: dict[str, Path | None] = {}
    for payload in payloads:
        for mode, window in payload["windows"].items():
            path = scratch / window["trace_name"]
            path.write_bytes(window["trace"])
            paths[schema.rank_trace_key(mode, payload["rank"])] = path
    return paths, scratch


def build_result(config: RunConfig, payloads: list[dict], started_at: str,
                 stopped: str = "") -> RunResult:
    """The run folder's content from every rank's payload (rank order); ``stopped`` (where and
    why the ranks stopped early, in words) marks it incomplete."""
    payloads = sorted(payloads, key=lambda payload: payload["rank"])
    rank_latency = _rank_latency(payloads)
    table = ranks_table(payloads, rank_latency)
    latency = _slowest_latency(rank_latency, table)
    stats_table, modes_table = _stats_and_modes(config, latency, table, payloads)
    headline: dict[str, Any] = {"timing_method": "steady_trial", "world_size": len(payloads),
                                **rank_analysis.job_headline(table)}
    headline.update({f"injected_delay_ms_rank{p['rank']}": p["delay_ms"]
                     for p in payloads if p["delay_ms"] > 0})
    first = payloads[0]["environment"]
    environment = {
        "device_type": "cuda" if config.is_cuda else "cpu", "world_size": len(payloads),
        "backend": "nccl" if config.is_cuda else "gloo", "torch_version": first["torch_version"],
        "python_version": platform.python_version(), "platform": platform.platform(),
        "gpu_name": first.get("gpu_name"), "nccl_version": first.get("nccl_version"),
        "nccl_settings": first.get("nccl_settings"),
        "hosts": sorted({p["environment"]["host"] for p in payloads}),
        # rank 0's threads (torchrun sets OMP_NUM_THREADS=1 for each rank) and its host's figures
        "torch_num_threads": first.get("torch_num_threads"),
        **{key: value for key, value in hostinfo.host_environment().items()
           if key != "load_avg_start"},
        "load_avg_end": hostinfo.load_average(),
        "ranks": [p["environment"] for p in payloads],
        "started_at": started_at,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    notes = list(dict.fromkeys(note for p in payloads for note in p["notes"]))
    if config.nvml:
        notes.append("NVML is not sampled in a data-parallel run (every rank's step is timed, "
                     "with no sampler beside it)")
    if payloads[0]["capture_log"]:  # an empty log (a CPU run captures nothing) says nothing
        notes.append("rank 0, capture and teardown: " + "; ".join(payloads[0]["capture_log"]))
    if stopped:
        notes.append(f"incomplete: the run stopped during {stopped}; every rank's timed steps "
                     "until then are kept")
    if not math.isnan(headline["straggler_rank"]):
        notes.append(f"straggler: rank {int(headline['straggler_rank'])} arrives last at the "
                     "all-reduce (the other ranks wait for it)")
    traces, scratch = _traces(payloads)
    tables = {"latency": latency, "stats": stats_table, "modes": modes_table,
              "launch_split": _slowest_window_table("launch_split", payloads, table),
              "kernels": _slowest_window_table("kernels", payloads, table),
              "metrics": coerce_table("metrics", metrics.build(modes_table, stats_table,
                                                               rank_analysis.job_figures(table))),
              "rank_latency": rank_latency, "ranks": table}
    return RunResult(config=config, environment=environment, headline=written_facts(headline),
                     tables=tables,
                     notes=notes, complete=not stopped, trace_paths=traces, scratch_dir=scratch)


def started_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
