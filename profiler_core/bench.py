"""``python -m profiler_core bench``: does the tool measure what a bare hand-written loop measures?

Scope: the project's benchmark, on a GPU. For a few reference configs it times, in one process,
the tool's eager and graph medians and those of a bare loop written out by hand below (same step,
same method: CUDA events around each step or replay, synchronised), alternating tool and bare
rounds (ABBA) so drift hits both. It also reports the floor (graph replay median over the GPU
busy time per iteration from the profiler, and the same with replays queued back to back), the
NVML sampler's effect on the medians (sampler on vs off in alternating rounds of one process), and
the profiler's overhead. Nothing here is a test: it prints and writes figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from profiler_core.capture import GraphedStep
from profiler_core.config import RunConfig
from profiler_core.progress import ProgressCallback, ProgressCounter, ignore_progress
from profiler_core.runner import run_experiment
from profiler_core.telemetry import NvmlSampler
from profiler_core.workloads import TrainingStep, make_batches, matmul_precision

BENCH_CONFIGS = {
    "seed-fp32": dict(dtype="fp32"),
    "seed-bf16": dict(dtype="bf16"),
    "launch-bound-fp32": dict(batch=64, d_in=512, hidden=512, d_out=256),
}
ROUNDS = ("tool", "bare", "bare", "tool") * 3  # ABBA, three times: drift and noise hit both


@dataclass(frozen=True)
class BareTimes:
    eager_ms: np.ndarray  # per step, synchronised before each, CUDA events around it
    graph_ms: np.ndarray  # per replay, likewise
    graph_back_to_back_ms: float  # mean replay time with replays queued back to back


def bare_loop(config: RunConfig, iterations: int) -> BareTimes:
    """The same training step, written out by hand as a user would: no tool code at all."""
    device = torch.device(config.device)
    torch.backends.cuda.matmul.allow_tf32 = config.dtype == "tf32"
    autocast_dtype = {"bf16": torch.bfloat16}.get(config.dtype)

    def build():
        torch.manual_seed(config.seed)
        layers = [torch.nn.Linear(config.d_in, config.hidden), torch.nn.Dropout(config.dropout1)]
        for _ in range(config.hidden_layers - 1):
            layers += [torch.nn.Linear(config.hidden, config.hidden), torch.nn.ReLU()]
        layers += [torch.nn.Linear(config.hidden, config.d_out), torch.nn.Dropout(config.dropout2)]
        model = torch.nn.Sequential(*layers).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    loss_fn = torch.nn.MSELoss()
    inputs = [torch.randn(config.batch, config.d_in, device=device) for _ in range(8)]
    targets = [torch.randn(config.batch, config.d_out, device=device) for _ in range(8)]
    counter = torch.zeros(1, device=device)

    def body(model, optimizer, x, y):
        if autocast_dtype is None:
            loss = loss_fn(model(x), y)
        else:
            with torch.autocast("cuda", dtype=autocast_dtype, cache_enabled=False):
                loss = loss_fn(model(x).float(), y)
        loss.backward()
        optimizer.step()
        counter[0] += 1.0

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    # Eager.
    model, optimizer = build()
    eager_ms = []
    for i in range(iterations + 5):
        torch.cuda.synchronize()
        start.record()
        optimizer.zero_grad(set_to_none=True)
        body(model, optimizer, inputs[i % 8], targets[i % 8])
        end.record()
        end.synchronize()
        if i >= 5:
            eager_ms.append(start.elapsed_time(end))

    # Graph, as in the article.
    model, optimizer = build()
    static_x, static_y = inputs[0].clone(), targets[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(config.warmup_iters):
            optimizer.zero_grad(set_to_none=True)
            body(model, optimizer, static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        body(model, optimizer, static_x, static_y)
    graph_ms = []
    for i in range(iterations + 5):
        static_x.copy_(inputs[i % 8])
        static_y.copy_(targets[i % 8])
        torch.cuda.synchronize()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if i >= 5:
            graph_ms.append(start.elapsed_time(end))
    # Back to back: replays queued without a sync between them, events around the whole block.
    torch.cuda.synchronize()
    start.record()
    for _ in range(iterations):
        graph.replay()
    end.record()
    end.synchronize()
    back_to_back_ms = start.elapsed_time(end) / iterations
    torch.backends.cuda.matmul.allow_tf32 = False
    return BareTimes(np.array(eager_ms), np.array(graph_ms), back_to_back_ms)


def sampler_effect(config: RunConfig, rounds: int = 8, iterations: int = 50) -> dict[str, float]:
    """Median step time with the NVML sampler running vs stopped, in one process on the same
    replicas, rounds alternating (ABBA). ``*_noise_pct`` compares the sampler-off rounds among
    themselves (even vs odd), the noise floor against which the effect is read."""
    device = torch.device(config.device)
    samples: dict[tuple[str, bool, int], list[float]] = {}
    with matmul_precision(config.dtype):
        batches = make_batches(config, 8, device)
        eager = TrainingStep(config, device, graphed=False)
        graphed = GraphedStep(TrainingStep(config, device, graphed=True), *batches[0])
        graphed.capture(1, graphed.warm_up(batches[:3], count=True))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        runs = {"eager": lambda i: eager.eager_step(*batches[i % 8]),
                "graph": lambda i: (graphed.load(*batches[i % 8]), graphed.replay())}
        for round_index in range(rounds):
            order = (False, True) if round_index % 2 == 0 else (True, False)
            for sampling in order:
                sampler = NvmlSampler(device.index, interval_s=0.02) if sampling else None
                if sampler is not None:
                    sampler.start()
                for mode, run in runs.items():
                    for i in range(iterations):
                        torch.cuda.synchronize(device)
                        start.record()
                        run(i)
                        end.record()
                        end.synchronize()
                        samples.setdefault((mode, sampling, round_index % 2), []).append(
                            start.elapsed_time(end))
                if sampler is not None:
                    sampler.stop()
    effect = {}
    for mode in ("eager", "graph"):
        off_even = np.median(samples[(mode, False, 0)])
        off_odd = np.median(samples[(mode, False, 1)])
        off = np.median(samples[(mode, False, 0)] + samples[(mode, False, 1)])
        on = np.median(samples[(mode, True, 0)] + samples[(mode, True, 1)])
        effect[f"{mode}_sampler_effect_pct"] = float((on / off - 1.0) * 100.0)
        effect[f"{mode}_noise_pct"] = float(abs(off_even / off_odd - 1.0) * 100.0)
    return effect


def _round_spread_pct(rounds: list[np.ndarray]) -> float:
    medians = [float(np.median(r)) for r in rounds]
    return (max(medians) / min(medians) - 1.0) * 100.0


def run_benchmark(device: str = "cuda:0", replays: int = 400,
                  progress: ProgressCallback = ignore_progress) -> dict[str, pd.DataFrame]:
    """Tables ``fidelity`` (tool vs bare loop), ``floor`` and ``overheads``."""
    counter = ProgressCounter(len(BENCH_CONFIGS) * (len(ROUNDS) + 2), progress)
    fidelity, floor, overheads = [], [], []
    gpu_name = torch.cuda.get_device_name(torch.device(device))
    for name, overrides in BENCH_CONFIGS.items():
        base = RunConfig(device=device, replays=replays, trials=10, profile=False, nvml=False,
                         parity_steps=0, preset="seed", **overrides)
        samples: dict[tuple[str, str], list[np.ndarray]] = {}
        back_to_back = []
        for round_kind in ROUNDS:
            counter.start_phase(f"{name}: {round_kind} loop")
            if round_kind == "tool":
                latency = run_experiment(base).table("latency")
                for mode in ("eager", "graph"):
                    rows = latency[latency["mode"] == mode]
                    samples.setdefault((mode, "tool"), []).append(
                        (rows["gpu_ms"] / rows["steps"]).to_numpy(float))
            else:
                bare = bare_loop(base, replays)
                samples.setdefault(("eager", "bare"), []).append(bare.eager_ms)
                samples.setdefault(("graph", "bare"), []).append(bare.graph_ms)
                back_to_back.append(bare.graph_back_to_back_ms)
            counter.advance()
        for mode in ("eager", "graph"):
            tool_ms = float(np.median(np.concatenate(samples[(mode, "tool")])))
            bare_ms = float(np.median(np.concatenate(samples[(mode, "bare")])))
            fidelity.append({"config": name, "mode": mode, "tool_median_ms": tool_ms,
                             "bare_median_ms": bare_ms,
                             "difference_pct": (tool_ms / bare_ms - 1.0) * 100.0,
                             "tool_round_spread_pct": _round_spread_pct(samples[(mode, "tool")]),
                             "bare_round_spread_pct": _round_spread_pct(samples[(mode, "bare")]),
                             "gpu": gpu_name})

        counter.start_phase(f"{name}: profiled run (floor, profiler overhead)")
        profiled = run_experiment(base.replace(profile=True, nvml=False)).headline
        busy_ms = profiled["graph_gpu_busy_us"] / 1e3
        floor.append({"config": name,
                      "graph_busy_ms": busy_ms,
                      "graph_median_ms": profiled["graph_median_ms"],
                      "median_over_busy": profiled["graph_median_ms"] / busy_ms,
                      "back_to_back_ms": float(np.median(back_to_back)),
                      "back_to_back_over_busy": float(np.median(back_to_back)) / busy_ms,
                      "eager_median_ms": profiled["eager_median_ms"],
                      "eager_busy_ms": profiled["eager_gpu_busy_us"] / 1e3,
                      "eager_cpu_launch_ms": profiled["eager_cpu_launch_us"] / 1e3,
                      "graph_cpu_launch_ms": profiled["graph_cpu_launch_us"] / 1e3})
        counter.advance()

        counter.start_phase(f"{name}: NVML sampler on vs off")
        overheads.append({
            "config": name,
            "eager_profiler_overhead_pct": profiled["eager_profiler_overhead_pct"],
            "graph_profiler_overhead_pct": profiled["graph_profiler_overhead_pct"],
            **sampler_effect(base),
        })
        counter.advance()
    counter.finish()
    return {"fidelity": pd.DataFrame(fidelity), "floor": pd.DataFrame(floor),
            "overheads": pd.DataFrame(overheads)}


def format_benchmark(tables: dict[str, pd.DataFrame]) -> str:
    def show(frame: pd.DataFrame) -> str:
        return frame.to_string(index=False, float_format=lambda v: f"{v:.4f}" if math.isfinite(v) else "nan")
    return "\n\n".join(f"{name}\n{show(frame)}" for name, frame in tables.items())
