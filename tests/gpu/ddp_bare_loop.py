"""A hand-written DDP training loop under torchrun, for comparison with the tool's per-rank step
times (issue 21, acceptance c): the same model, batch and optimizer, eager then the whole step
captured as PyTorch's CUDA notes say, timed with CUDA events around N back-to-back steps. Each
rank prints one JSON line: {"rank", "mode", "ms_per_step"}.

Usage: torchrun --nproc-per-node 2 tests/gpu/ddp_bare_loop.py [--steps 400] [--batch 64 ...]
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def mlp(d_in: int, hidden: int, d_out: int, layers: int) -> nn.Module:
    """The article's MLP: Linear, Dropout(0.2), (Linear, ReLU) x (layers - 1), Linear, Dropout(0.1)."""
    parts: list[nn.Module] = [nn.Linear(d_in, hidden), nn.Dropout(0.2)]
    for _ in range(layers - 1):
        parts += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*parts, nn.Linear(hidden, d_out), nn.Dropout(0.1))


def main() -> None:
    parser = argparse.ArgumentParser()
    for name, default in (("batch", 64), ("d-in", 512), ("hidden", 512), ("d-out", 256),
                          ("hidden-layers", 4), ("steps", 400), ("trials", 10)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.d_in, device=device)
    y = torch.randn(args.batch, args.d_out, device=device)
    loss_fn = nn.MSELoss()

    def build():
        torch.manual_seed(0)
        model = mlp(args.d_in, args.hidden, args.d_out, args.hidden_layers).to(device)
        return model

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        eager = DistributedDataParallel(build(), device_ids=[local])
        eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
        graphed = DistributedDataParallel(build(), device_ids=[local])
        graphed_opt = torch.optim.SGD(graphed.parameters(), lr=0.1)
        static_x, static_y = x.clone(), y.clone()
        for model, opt in ((eager, eager_opt), (graphed, graphed_opt)):
            for _ in range(11):  # DDP's first 10 iterations are timed for its logging
                opt.zero_grad(set_to_none=True)
                loss_fn(model(static_x), static_y).backward()
                opt.step()
    torch.cuda.current_stream(device).wait_stream(side)
    graphed_opt.zero_grad(set_to_none=True)
    dist.barrier(device_ids=[local])
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        loss_fn(graphed(static_x), static_y).backward()
        graphed_opt.step()
    torch.cuda.synchronize(device)
    dist.barrier(device_ids=[local])

    def eager_step() -> None:
        eager_opt.zero_grad(set_to_none=True)
        loss_fn(eager(x), y).backward()
        eager_opt.step()

    def replay() -> None:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_trial = max(2, args.steps // args.trials)
    results: dict[str, list[float]] = {"eager": [], "graph": []}
    for trial in range(args.trials):  # ABBA, as the tool
        order = [("eager", eager_step), ("graph", replay)]
        for name, step in order if trial % 2 == 0 else order[::-1]:
            step()  # the first iteration of a block starts from an idle device: not kept
            torch.cuda.synchronize(device)
            start.record()
            for _ in range(per_trial):
                step()
            end.record()
            torch.cuda.synchronize(device)
            results[name].append(start.elapsed_time(end) / per_trial)
    rank = dist.get_rank()
    for name, values in results.items():
        values.sort()
        print(json.dumps({"rank": rank, "mode": name, "ms_per_step": values[len(values) // 2]}),
              flush=True)
    graph.reset()  # graphs holding collectives go before destroy_process_group (NCCL 2.26+)
    torch.cuda.synchronize(device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
