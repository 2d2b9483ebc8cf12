"""A bare training loop, written out by hand as a user would, for the benchmark to compare with.

It imports nothing from this tool (run it as a file: ``python profiler_core/timing/bare_loop.py
--batch 640 ...``), times the article's MLP step eagerly and as a captured CUDA graph in
alternating blocks (ABBA), and prints one JSON object: the median time per step, per mode.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=640)
    parser.add_argument("--d-in", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--d-out", type=int, default=1024)
    parser.add_argument("--hidden-layers", type=int, default=1)
    parser.add_argument("--dropout", type=float, nargs=2, default=(0.2, 0.1))
    parser.add_argument("--dtype", choices=("fp32", "tf32", "bf16"), default="fp32")
    parser.add_argument("--warmup-iters", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=200, help="timed iterations per mode")
    parser.add_argument("--blocks", type=int, default=10, help="blocks per mode, alternating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda:0")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"
    autocast = args.dtype == "bf16"

    def build():
        torch.manual_seed(args.seed)
        layers = [torch.nn.Linear(args.d_in, args.hidden), torch.nn.Dropout(args.dropout[0])]
        for _ in range(args.hidden_layers - 1):
            layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
        layers += [torch.nn.Linear(args.hidden, args.d_out), torch.nn.Dropout(args.dropout[1])]
        model = torch.nn.Sequential(*layers).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    loss_fn = torch.nn.MSELoss()
    generator = torch.Generator(device=device).manual_seed(args.seed)
    data = [(torch.randn(args.batch, args.d_in, device=device, generator=generator),
             torch.randn(args.batch, args.d_out, device=device, generator=generator))
            for _ in range(8)]

    def train_step(model, optimizer, counter, x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast, cache_enabled=False):
            loss = loss_fn(model(x).float(), y)
        loss.backward()
        optimizer.step()
        counter[0] += 1.0  # the article's static_counter

    # Eager.
    eager_model, eager_optimizer = build()
    eager_counter = torch.zeros(1, device=device)

    def eager_iteration(i: int) -> None:
        eager_optimizer.zero_grad(set_to_none=True)
        train_step(eager_model, eager_optimizer, eager_counter, *data[i % 8])

    # Graph, as in the article: warm-up on a side stream, grads to None, capture.
    graph_model, graph_optimizer = build()
    graph_counter = torch.zeros(1, device=device)
    static_x, static_y = data[0][0].clone(), data[0][1].clone()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for i in range(args.warmup_iters):
            graph_optimizer.zero_grad(set_to_none=True)
            static_x.copy_(data[i % 8][0])
            static_y.copy_(data[i % 8][1])
            train_step(graph_model, graph_optimizer, graph_counter, static_x, static_y)
    torch.cuda.current_stream(device).wait_stream(side)
    graph_optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        train_step(graph_model, graph_optimizer, graph_counter, static_x, static_y)

    def graph_iteration(i: int) -> None:
        static_x.copy_(data[i % 8][0])
        static_y.copy_(data[i % 8][1])
        graph.replay()

    loops = {"eager": eager_iteration, "graph": graph_iteration}
    for iteration in loops.values():  # untimed warm-up, as any benchmark does
        for i in range(5):
            iteration(i)
    torch.cuda.synchronize(device)

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_block = max(1, args.iterations // args.blocks)
    ms_per_step: dict[str, list[float]] = {"eager": [], "graph": []}
    for block in range(args.blocks):
        order = ("eager", "graph") if block % 2 == 0 else ("graph", "eager")
        for mode in order:
            iteration = loops[mode]
            iteration(per_block)  # a loop runs long: time it past its start from an idle GPU
            start.record()
            for i in range(per_block):
                iteration(i)
            end.record()
            end.synchronize()
            ms_per_step[mode].append(start.elapsed_time(end) / per_block)
    result: dict[str, float | str] = {
        f"{mode}_ms": statistics.median(values) for mode, values in ms_per_step.items()}
    result.update({f"{mode}_mean_ms": statistics.fmean(values) for mode, values in ms_per_step.items()})
    result["torch_version"] = str(torch.__version__)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
