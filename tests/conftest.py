"""Shared fixtures: a complete synthetic run directory, written with RunResult.save like a real run.

Plausible numbers for a launch-bound step (eager ~1.2 ms, graph ~0.25 ms per step), clearly
labelled as synthetic: the GPU name says so.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dashboard.devices import DEVICE_COLUMNS

SYNTHETIC_GPU = "Synthetic GPU (test fixture)"


def write_synthetic_run(path: Path, per_mode: int = 200, seed: int = 0, trials: int = 10,
                        started_at: str = "2026-11-30T14:02:11") -> Path:
    from profiler_core.analysis import attribution
    from profiler_core.analysis.metrics import build as build_metrics
    from profiler_core.spec.config import PRESETS
    from profiler_core.storage.results import RunResult, coerce_table, empty_table

    rng = np.random.default_rng(seed)
    config = PRESETS["seed"].replace(replays=per_mode, trials=trials)
    modes = {"eager": (1.2, 0.75), "graph": (0.25, 0.25)}  # median gpu ms, article no-sync ms
    latency, stats = [], []
    for mode, (median, article) in modes.items():
        gpu = median * rng.lognormal(0, 0.04, per_mode) + (rng.random(per_mode) < 0.01) * median
        cold = gpu * 1.08 + 0.01
        wall = cold + rng.gamma(2, 0.01, per_mode)
        block = np.arange(per_mode)
        trial, iteration = block // (per_mode // trials), block % (per_mode // trials)
        latency.append(pd.DataFrame({"mode": mode, "method": "steady", "trial": trial,
                                     "iteration": iteration, "steps": 1, "gpu_ms": gpu,
                                     "wall_ms": np.nan}))
        latency.append(pd.DataFrame({"mode": mode, "method": "cold", "trial": trial,
                                     "iteration": iteration, "steps": 1, "gpu_ms": cold,
                                     "wall_ms": wall}))
        trial_means = pd.Series(gpu).groupby(trial).mean().to_numpy()
        methods = [("steady_trial", trial_means), ("steady_event", gpu), ("cold_event", cold),
                   ("cold_wall", wall),
                   ("block_sync", gpu * 1.01),
                   ("article_no_sync", article * rng.lognormal(0, 0.05, per_mode))]
        if mode == "graph":
            methods.insert(2, ("input_copy", np.full(32, 0.01)))
        for method, v in methods:
            q = np.percentile(v, [10, 25, 50, 75, 90, 99])
            stats.append([mode, method, v.size, v.mean(), q[2], q[0], q[4], q[5], q[3] - q[1],
                          v.min(), v.max()])
    split = {"eager": (1200, 700, 500, 220, 980, 45, 40, 15), "graph": (250, 22, 30, 225, 25, 1, 40, 9)}
    launch = pd.DataFrame([[m, i, *(x * (1 + 0.02 * rng.standard_normal()) for x in v[:5]), *v[5:]]
                           for m, v in split.items() for i in range(20)],
                          columns=["mode", "iteration", "span_us", "cpu_launch_us", "cpu_other_us",
                                   "gpu_busy_us", "gpu_idle_us", "launches", "kernels",
                                   "launch_delay_us"])
    breakdown = pd.DataFrame([["graph", "gpu_busy", 220, 225, -5, -0.5],
                              ["graph", "gpu_idle", 980, 25, 955, 100.5],
                              ["graph", "total_span", 1200, 250, 950, 100.0],
                              ["graph", "cpu_launch", 700, 22, 678, 71.4],
                              ["graph", "cpu_other", 500, 30, 470, 49.5]],
                             columns=["mode", "component", "eager_us", "mode_us", "saving_us",
                                      "share_of_saving_pct"])
    names = ["sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", "ampere_sgemm_64x32_sliced1x4_tn",
             "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
             "void at::native::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>",
             "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>",
             "void at::native::mse_backward_kernel", "void at::native::sgd_update_kernel",
             "void at::native::copy_kernel"]
    kernels = pd.DataFrame([[m, n.split("<")[0][:40], n, 1 + k % 3, t, t / 20 / (1 + k % 3),
                             t / 25, t / 15, 100 * t / 4400]
                            for m in modes for k, (n, t) in enumerate(zip(names, np.geomspace(1500, 40, 8)))],
                           columns=["mode", "kernel", "kernel_full", "calls_per_iter", "total_us",
                                    "mean_us", "min_us", "max_us", "share_of_gpu_pct"])
    phases = pd.DataFrame([["warm-up", 0.0, 0.5], ["capture", 0.5, 0.6], ["eager timed", 0.6, 2.0],
                           ["graph timed", 2.0, 2.3], ["eager cold start", 2.3, 3.3],
                           ["graph cold start", 3.3, 3.5],
                           ["profiled eager", 3.5, 4.2], ["profiled graph", 4.2, 4.8]],
                          columns=["phase", "start_s", "end_s"])
    t = np.arange(0, 5, 0.02)
    busy = (t > 0.6) & (t < 4.8)
    metrics = {"gpu_util_pct": np.where(busy, 96.0, 3.0), "mem_util_pct": np.where(busy, 40.0, 1.0),
               "mem_used_mib": np.where(t > 0.2, 2300.0, 600.0),
               "sm_clock_mhz": np.where(busy, 1980.0, 345.0),
               "mem_clock_mhz": np.full(t.size, 2619.0), "power_w": np.where(busy, 540.0, 110.0),
               "temperature_c": 35 + 10 * t / 5}
    nvml = pd.concat([pd.DataFrame({"t_s": t, "metric": k, "value": v, "source": "poll"})
                      for k, v in metrics.items()]
                     + [pd.DataFrame({"t_s": t[::8], "metric": "gpu_util_pct",
                                      "value": metrics["gpu_util_pct"][::8], "source": "driver"})])
    counters = pd.DataFrame([["initial", 0, 0, True, "starts at zero"],
                             ["after_warmup", 3, 3, True, "warm-up iters if counted, else 0"],
                             ["after_capture", 3, 3, True, "capture adds nothing"],
                             ["after_replay", per_mode, per_mode, True, "replays x captured iters"]],
                            columns=["phase", "observed", "predicted", "match", "rule"])
    tables = {"latency": pd.concat(latency), "stats": pd.DataFrame(stats, columns=[
        "mode", "method", "count", "mean_ms", "median_ms", "p10_ms", "p90_ms", "p99_ms", "iqr_ms",
        "min_ms", "max_ms"]), "launch_split": launch, "breakdown": breakdown, "kernels": kernels,
        "phases": phases, "nvml": nvml, "counters": counters}
    steady = tables["latency"][tables["latency"]["method"] == "steady"]
    eager_ms, graph_ms = (float(frame.groupby("trial")["gpu_ms"].mean().median())
                          for _, frame in steady.groupby("mode"))
    headline = {"timing_method": "steady_trial", "parity_max_abs_diff": 0.0,
                "parity_max_rel_diff": 0.0, "counters_match": True}
    cold_eager, cold_graph = eager_ms * 1.08 + 0.01, graph_ms * 1.08 + 0.01
    figures = {
        "eager": {"median_ms": eager_ms, "article_no_sync_median_ms": 0.75,
                  "cold_event_median_ms": cold_eager, "peak_bytes": 310 * 2**20,
                  "cpu_launch_us": 700.0, "gpu_busy_us": 220.0, "profiler_overhead_pct": 3.1},
        "graph": {"median_ms": graph_ms, "speedup": eager_ms / graph_ms,
                  "speedup_ci_low": eager_ms / graph_ms * 0.97,
                  "speedup_ci_high": eager_ms / graph_ms * 1.03,
                  "article_no_sync_median_ms": 0.25, "article_no_sync_speedup": 3.0,
                  "cold_event_median_ms": cold_graph, "cold_event_speedup": cold_eager / cold_graph,
                  "input_copy_median_ms": 0.01, "warmup_ms": 12.0, "capture_ms": 35.2,
                  "pool_bytes": 64 * 2**20, "peak_bytes": 380 * 2**20, "break_even_iters": 38.0,
                  "cpu_launch_us": 22.0, "gpu_busy_us": 225.0, "profiler_overhead_pct": 1.2}}
    environment = {"gpu_name": SYNTHETIC_GPU, "gpu_index": 0, "driver_version": "580.00",
                   "cuda_version": "13.0", "torch_version": "2.13.0", "python_version": "3.11",
                   "started_at": started_at, "finished_at": started_at, "device_type": "cuda"}
    # metrics.csv, every figure per mode: here from the figures above and stats.csv
    tables["metrics"] = build_metrics(empty_table("modes"), tables["stats"], figures)
    # attribution.csv, as the runner writes it: the headline's saving attributed to its parts
    tables["attribution"] = attribution.build(tables["stats"], launch, tables["latency"])
    with tempfile.TemporaryDirectory() as scratch:
        traces = {}
        for mode in modes:  # a small Chrome trace per mode, shaped as the profiler exports them
            traces[mode] = Path(scratch) / f"trace_{mode}.json"
            traces[mode].write_text(json.dumps(synthetic_trace(mode)))
        result = RunResult(config=config, environment=environment, headline=headline,
                           notes=["synthetic run"], trace_paths=traces,
                           tables={k: coerce_table(k, v) for k, v in tables.items()})
        return result.save(path)  # the traces in its manifest, as a real run's


def synthetic_trace(mode: str, iterations: int = 4, kernel_names: list[str] | None = None) -> dict:
    """A Chrome trace like torch.profiler's: ``ProfilerStep#N`` markers on the main thread, CPU
    ops (the backward on a second thread), a launch call per kernel (eager) or one graph launch
    per iteration (graph), and the kernels, linked by correlation ids. Iteration 2 is the
    slowest; the median-span one is iteration 1 (0-based)."""
    names = kernel_names or ["ampere_sgemm_64x32_sliced1x4_tn", "void at::native::copy_kernel",
                             "void at::native::sgd_update_kernel"]
    events, correlation = [], 0
    t0 = 1_000_000.0
    for step in range(iterations):
        start = t0 + step * 3000.0
        length = {2: 2400.0, 1: 1100.0}.get(step, 1000.0 + step * 10) if mode == "eager" else 300.0
        events.append({"name": f"ProfilerStep#{step}", "cat": "user_annotation", "ph": "X",
                       "ts": start, "dur": length, "pid": 7, "tid": 7})
        if mode == "eager":
            events.append({"name": "aten::linear", "cat": "cpu_op", "ph": "X", "ts": start + 5,
                           "dur": length * 0.4, "pid": 7, "tid": 7})
            events.append({"name": "aten::addmm", "cat": "cpu_op", "ph": "X", "ts": start + 8,
                           "dur": length * 0.2, "pid": 7, "tid": 7})  # nested: not a lane bar
            events.append({"name": "autograd::engine::evaluate_function: AddmmBackward0",
                           "cat": "cpu_op", "ph": "X", "ts": start + length * 0.5,
                           "dur": length * 0.3, "pid": 7, "tid": 8})
            for k, name in enumerate(names):
                correlation += 1
                call = start + 20 + k * length / (len(names) + 1)
                events.append({"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ph": "X",
                               "ts": call, "dur": 8.0, "pid": 7, "tid": 7,
                               "args": {"correlation": correlation}})
                events.append({"name": name, "cat": "kernel", "ph": "X", "ts": call + 15,
                               "dur": 40.0 + 10 * k, "pid": 0, "tid": 7,
                               "args": {"correlation": correlation}})
        else:
            correlation += 1
            events.append({"name": "cudaGraphLaunch", "cat": "cuda_runtime", "ph": "X",
                           "ts": start + 10, "dur": 20.0, "pid": 7, "tid": 7,
                           "args": {"correlation": correlation}})
            kernel_start = start + 40
            for k, name in enumerate(names):
                events.append({"name": name, "cat": "kernel", "ph": "X", "ts": kernel_start,
                               "dur": 40.0 + 10 * k, "pid": 0, "tid": 7,
                               "args": {"correlation": correlation}})
                kernel_start += 45.0 + 10 * k
    return {"traceEvents": events}


@pytest.fixture
def synthetic_run(tmp_path) -> Path:
    """A run folder ``<tmp>/runs/synthetic-seed`` (its parent is a runs folder)."""
    return write_synthetic_run(tmp_path / "runs" / "synthetic-seed")


FAKE_WORKER = r'''
import json, os, shutil, signal, subprocess, sys, time
mode, out = sys.argv[1], sys.argv[2]
def emit(**record):
    print(json.dumps(record), flush=True)
def keep_incomplete(phase, cause):  # what the real worker does when a run stops early
    shutil.copytree(sys.argv[3], out)
    summary = json.loads(open(os.path.join(out, "summary.json")).read())
    summary["complete"] = False
    summary["notes"] = list(summary.get("notes") or []) + [
        f"incomplete: the run stopped during {phase}: {cause}"]
    open(os.path.join(out, "summary.json"), "w").write(json.dumps(summary))
for done, phase in enumerate(["warm-up", "capture", "timed trials"]):
    emit(event="progress", phase=phase, done=done, total=3, fraction=done / 3, message=f"{phase} ...")
    time.sleep(0.05)
if mode == "done":
    shutil.copytree(sys.argv[3], out)
    emit(event="done", out=out)
elif mode == "error":
    emit(event="error", kind="ConfigError", field="replays", message="--replays: too many",
         hint="lower it")
    sys.exit(2)
elif mode == "oom":  # stops early, keeping what it measured
    keep_incomplete("capture", "out of memory during capture")
    emit(event="error", kind="GpuMemoryError", field=None, message="out of memory during capture",
         hint="shrink the batch")
    sys.exit(5)
elif mode == "capture":
    emit(event="error", kind="CaptureError", field=None,
         message="the step calls .item(), a host sync, inside the captured region",
         hint="keep .item() and .cpu() out of the training step")
    sys.exit(4)
elif mode == "cudafault":  # a sticky CUDA error: the engine reports it, keeps the partial run, exits 6
    print("RuntimeError: CUDA error: an illegal memory access was encountered", file=sys.stderr)
    keep_incomplete("timed trials", "CUDA error: an illegal memory access was encountered")
    emit(event="error", kind="CudaFaultError", field=None,
         message="CUDA error: an illegal memory access was encountered (during timed trials)",
         hint="the GPU context of that process is unusable: run again (a new worker process)")
    sys.exit(6)
elif mode == "silent6":  # exit 6 before any error record
    print("CUDA error: unspecified launch failure", file=sys.stderr)
    sys.exit(6)
elif mode == "crash":
    print("Traceback: CUDA error: an illegal memory access was encountered", file=sys.stderr)
    sys.exit(1)
elif mode == "segv":
    os.kill(os.getpid(), signal.SIGSEGV)
elif mode == "kill":  # killed from outside, e.g. by the kernel's out-of-memory killer
    os.kill(os.getpid(), signal.SIGKILL)
elif mode == "orphan":  # dies, leaving a child that holds stdout open
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(out + ".pids", "w") as handle:
        handle.write(f"{os.getpid()} {child.pid}")
    os.kill(os.getpid(), signal.SIGSEGV)
elif mode == "sleep":  # a hang, with a child process that must die with it
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(out + ".pids", "w") as handle:
        handle.write(f"{os.getpid()} {child.pid}")
    if sys.argv[3:4] == ["ignore-term"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(120)
'''


@pytest.fixture
def fake_worker(tmp_path):
    """argv(mode, out_dir, source_run=None): a stand-in for `python -m profiler_core run`."""
    import sys

    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)

    def argv(mode: str, out_dir: Path, *extra: str) -> list[str]:
        return [sys.executable, str(script), mode, str(out_dir), *map(str, extra)]

    return argv


NO_GPU = (pd.DataFrame(columns=DEVICE_COLUMNS), "no GPU in this test")


@pytest.fixture
def fresh_app_state(monkeypatch, tmp_path, tmp_path_factory):
    """Empty server caches, no bundled sample run, no GPU; runs folders allowed under pytest's
    temporary folder. Dashboard test modules use it for every test."""
    import streamlit as st

    from dashboard import devices, rundata

    st.cache_data.clear()
    st.cache_resource.clear()
    monkeypatch.setattr(rundata, "SAMPLE_RUN_DIR", tmp_path / "no-sample-here")
    monkeypatch.setattr(rundata, "SAMPLE_RUNS_DIR", tmp_path / "no-samples-here")
    monkeypatch.setattr(devices, "list_devices", lambda: NO_GPU)
    monkeypatch.setenv(rundata.RUNS_ROOT_ENV, str(tmp_path_factory.getbasetemp()))
    yield
    st.cache_resource.clear()


def process_alive(pid: int) -> bool:
    """Whether a process still runs (a zombie counts as dead)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def slow_release_lock(device: str = "cpu"):
    """A device lock whose release takes 0.3 s: it widens the window a job that said it finished
    before releasing its device would leave open."""
    import time

    from profiler_core.orchestration.gpulock import GpuLock

    lock = GpuLock(device)
    release = lock.release

    def slow_release(ticket):
        time.sleep(0.3)
        release(ticket)

    lock.release = slow_release
    return lock


def wait_for(predicate, timeout: float = 10.0) -> bool:
    """Poll ``predicate`` every 20 ms until it holds (True) or ``timeout`` seconds pass (False)."""
    import time

    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def figure_table(figures: dict[str, dict[str, float]]):
    """metrics.csv holding ``figures`` (mode -> metric -> value) and nothing else: where a run
    keeps its per-mode figures (summary.json's headline holds none from schema 4)."""
    from profiler_core.analysis import metrics
    from profiler_core.storage.results import coerce_table, empty_table

    return coerce_table("metrics", metrics.build(empty_table("modes"), empty_table("stats"),
                                                 figures))


def stored_figures(headline: dict):
    """The figures a summary headline of schema 1 to 3 held under its own names, as loading such
    a run reads them (``metrics.split_headline``)."""
    from profiler_core.analysis.figures import Figures, as_number
    from profiler_core.analysis.metrics import split_headline

    return Figures({mode: {metric: as_number(value) for metric, value in by_metric.items()}
                    for mode, by_metric in split_headline(headline)[1].items()})


def stored_pair(headline: dict):
    """The article's pair of a summary headline of schema 1 to 3 (:func:`stored_figures`)."""
    from profiler_core.analysis.figures import Headline

    return Headline.of(stored_figures(headline), headline)
