"""What a CUDA graph adds per node, by kernel kind (issue 17, item 4), for the record.

Usage: python3 tests/gpu/node_gaps.py
For chains of k dependent kernels of one kind captured in a graph (k in 1, 16, 64), replays are
timed back to back behind a held GPU (CUDA events) and the kernels' busy time is taken from
torch.profiler; the slope of (replay - busy) over k is that kind's cost per node. Kinds: a
one-element add (the prediction's calibration today), an add over 8M elements (fills the GPU),
a bf16 1024x1024 matmul, and alternating matmul and add (a layer's shape).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiler_core.engine.profiling import profile_window
from profiler_core.timing.trials import CudaClock, Mode

device = torch.device("cuda")
clock = CudaClock(device)
COUNTS = (1, 16, 64)


def kinds():
    small = torch.zeros(1, device=device)
    big = torch.zeros(8 * 2**20, device=device)
    a = torch.randn(1024, 1024, device=device, dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    act = torch.randn(2048, 4096, device=device, dtype=torch.bfloat16)
    w = torch.randn(4096, 2048, device=device, dtype=torch.bfloat16)
    h = torch.empty(2048, 2048, device=device, dtype=torch.bfloat16)

    def mm_add():
        torch.mm(act, w, out=h)
        h.add_(1.0)
    return {
        "add_1": lambda: small.add_(1.0),
        "add_8M": lambda: big.add_(1.0),
        "mm_1024_bf16": lambda: torch.mm(a, b, out=out),
        "mm_add_layer": mm_add,
    }


def graph_of(body, k):
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(k):
            body()
    return graph


def held_us(graph, replays=40):
    for _ in range(3):
        graph.replay()
    start, end = clock.marks(2)
    clock.synchronize()
    torch.cuda._sleep(20_000_000)
    clock.record(start)
    for _ in range(replays):
        graph.replay()
    clock.record(end)
    clock.synchronize()
    return clock.elapsed_ms(start, end) * 1e3 / replays


for name, body in kinds().items():
    rows = []
    for k in COUNTS:
        nodes_per_body = 2 if name == "mm_add_layer" else 1
        graph = graph_of(body, k)
        replay = held_us(graph)
        with tempfile.TemporaryDirectory() as folder:
            window = profile_window(Mode(name, 1, lambda i, graph=graph: graph.replay()), 3, device,
                                    Path(folder) / "t.json")
        busy = float(window.analysis.launch_split["gpu_busy_us"].median())
        kernels = float(window.analysis.launch_split["kernels"].median())
        rows.append((k * nodes_per_body, kernels, replay, busy))
        del graph
    nodes = np.array([r[1] for r in rows])
    over = np.array([r[2] - r[3] for r in rows])
    slope, intercept = np.polyfit(nodes, over, 1)
    print(f"{name:14s} per node {slope:6.3f} us, per replay {intercept:6.2f} us; "
          + "; ".join(f"k={int(r[1])}: replay {r[2]:.1f} busy {r[3]:.1f}" for r in rows), flush=True)
