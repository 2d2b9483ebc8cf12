"""A bare training loop, written out by hand as a user would, for the benchmark to compare with.

It imports nothing from this tool (run it as a file: ``python profiler_core/timing/bare_loop.py
--batch 640 ...``), times a training step eagerly and as a captured CUDA graph in alternating
blocks (ABBA), and prints one JSON object: the median time per step, per mode. The step is the
article's MLP step, or the user's own (``--workload package.module:function`` with
``--workload-arg NAME=VALUE``): their whole ``step(batch)`` as it is, or their model, loss and
optimizer in the loop a user writes. It sets no numerics flag but what ``--dtype`` names for the
MLP (tf32: TF32 on; fp32-ieee: off): PyTorch's defaults, or whatever the user's module sets.

With ``--sequence FILE`` (one value a line) and ``--buckets 16,32,64`` it runs the user's step over
that sequence of shapes instead, as a user would pad it (:func:`shaped_main`): eager on each
exact shape, one graph at the largest bucket, and a graph per bucket in one shared memory pool.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import statistics
import sys
from typing import Any

import torch

BATCHES = 8  # distinct batches drawn once, cycled through (as the tool does)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=640)
    parser.add_argument("--d-in", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--d-out", type=int, default=1024)
    parser.add_argument("--hidden-layers", type=int, default=1)
    parser.add_argument("--dropout", type=float, nargs=2, default=(0.2, 0.1))
    parser.add_argument("--dtype", choices=("fp32", "fp32-ieee", "tf32", "bf16"), default="fp32")
    parser.add_argument("--workload", help="package.module:function, the user's own step")
    parser.add_argument("--workload-arg", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--warmup-iters", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=200, help="timed iterations per mode")
    parser.add_argument("--blocks", type=int, default=10, help="blocks per mode, alternating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--sequence", help="a file of the varying dimension's values, one a line")
    parser.add_argument("--dimension", default="seq_len",
                        help="with --sequence: the keyword of the user's batch function it sets")
    parser.add_argument("--buckets", help="with --sequence: the sizes a batch is padded up to")
    return parser.parse_args(argv)


def clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {key: clone(item) for key, item in value.items()}
    return type(value)(clone(item) for item in value)


def copy_into(static: Any, value: Any) -> None:
    if isinstance(static, torch.Tensor):
        static.copy_(value)
    elif isinstance(static, dict):
        for key in static:
            copy_into(static[key], value[key])
    else:
        for mine, new in zip(static, value):
            copy_into(mine, new)


def settings_of(build, texts: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` as the build function's keyword arguments, typed like their defaults."""
    defaults = {p.name: p.default for p in inspect.signature(build).parameters.values()}
    settings: dict[str, Any] = {}
    for text in texts:
        name, _, value = text.partition("=")
        kind = type(defaults[name])
        if kind is bool:
            settings[name] = value.strip().lower() in ("1", "true", "on", "yes")
        else:
            settings[name] = kind(value)
    return settings


def users_step(args: argparse.Namespace, device: torch.device):
    """(a function that builds one replica and returns its step(batch), the batches) for the
    user's own step: their whole step as it is, or the loop a user writes around their parts."""
    if "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # importable from the current folder, as for python -m
    module_name, function_name = args.workload.split(":")
    build = getattr(importlib.import_module(module_name), function_name)
    settings = settings_of(build, args.workload_arg)

    def replica():
        torch.manual_seed(args.seed)  # every replica from the same weights, as the tool does
        parts = build(device, **settings)
        if parts.get("step") is not None:
            return parts["step"], parts
        model, loss_fn = parts["model"], parts.get("loss") or torch.nn.MSELoss()
        optimizer = parts.get("optimizer") or torch.optim.SGD(model.parameters(), lr=0.01)

        def step(batch):
            x, y = batch
            loss_fn(model(x), y).backward()
            optimizer.step()
        return step, {**parts, "optimizer": optimizer, "zero_grad": True}

    generator = torch.Generator(device=device).manual_seed(args.seed)
    draw = replica()[1]["batch"]
    return replica, [draw(generator) for _ in range(BATCHES)]


def mlp_step(args: argparse.Namespace, device: torch.device):
    """(a replica builder, the batches) for the article's MLP step."""
    if args.dtype in ("tf32", "fp32-ieee"):
        torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"
    autocast = args.dtype == "bf16"
    loss_fn = torch.nn.MSELoss()

    def replica():
        torch.manual_seed(args.seed)
        layers = [torch.nn.Linear(args.d_in, args.hidden), torch.nn.Dropout(args.dropout[0])]
        for _ in range(args.hidden_layers - 1):
            layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
        layers += [torch.nn.Linear(args.hidden, args.d_out), torch.nn.Dropout(args.dropout[1])]
        model = torch.nn.Sequential(*layers).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        counter = torch.zeros(1, device=device)

        def step(batch):
            x, y = batch
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast, cache_enabled=False):
                loss = loss_fn(model(x).float(), y)
            loss.backward()
            optimizer.step()
            counter[0] += 1.0  # the article's static_counter
        return step, {"optimizer": optimizer, "zero_grad": True}

    generator = torch.Generator(device=device).manual_seed(args.seed)
    data = [(torch.randn(args.batch, args.d_in, device=device, generator=generator),
             torch.randn(args.batch, args.d_out, device=device, generator=generator))
            for _ in range(BATCHES)]
    return replica, data


def zero(parts) -> None:
    if parts.get("zero_grad") and parts.get("optimizer") is not None:
        parts["optimizer"].zero_grad(set_to_none=True)


def after(parts) -> None:
    if parts.get("after_step") is not None:
        parts["after_step"]()


def captured(step, parts, static, device: torch.device, warmup_iters: int, pool=None,
             load=None):
    """The article's capture: warm-up on a side stream (``load(i)``, where given, puts warm-up
    step ``i``'s batch into ``static`` first), grads to None, capture; the graph."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for i in range(warmup_iters):
            zero(parts)
            if load is not None:
                load(i)
            step(static)
            after(parts)
    torch.cuda.current_stream(device).wait_stream(side)
    if parts.get("optimizer") is not None:
        parts["optimizer"].zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        step(static)
    return graph


def shaped_main(args: argparse.Namespace) -> int:
    """The user's step over ``--sequence``, each step's batch drawn as the profiler draws it
    (``batch(generator, NAME=value)``, or ``pad_to=P`` for a padded one, with a generator seeded
    ``seed + value``, once per shape): ``eager`` on the exact shapes (its first ``--warmup-iters``
    steps run untimed first), ``pad_max`` one graph at the largest bucket, ``buckets`` a graph
    per bucket in one shared pool. The sequence is split into ``--blocks`` blocks; in each, every
    strategy runs the block's steps back to back from an idle GPU, in an order reversed every
    block; prints each strategy's mean time per step over the whole sequence."""
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    replica, _ = users_step(args, device)
    with open(args.sequence, encoding="utf-8") as handle:
        sequence = [int(line) for line in handle if line.strip()]
    edges = sorted(int(edge) for edge in args.buckets.split(","))
    draw = replica()[1]["batch"]
    drawn_batches: dict[tuple[int, int | None], Any] = {}

    def drawn(value: int, pad_to: int | None = None):
        if (value, pad_to) not in drawn_batches:
            generator = torch.Generator(device=device).manual_seed(args.seed + value)
            extra = {} if pad_to is None else {"pad_to": pad_to}
            drawn_batches[(value, pad_to)] = draw(generator, **{args.dimension: value}, **extra)
        return drawn_batches[(value, pad_to)]

    eager_step, eager_parts = replica()

    def eager(i: int) -> None:
        zero(eager_parts)
        eager_step(drawn(sequence[i]))
        after(eager_parts)

    for i in range(min(args.warmup_iters, len(sequence))):
        eager(i)

    def padded(chosen: list[int]):
        step, parts = replica()
        pool = torch.cuda.graph_pool_handle()
        graphs = {}
        for edge in chosen:
            static = clone(drawn(min(sequence), edge))
            graphs[edge] = (captured(step, parts, static, device, args.warmup_iters, pool), static)

        def run(i: int) -> None:
            size = next(edge for edge in chosen if edge >= sequence[i])
            graph, static = graphs[size]
            copy_into(static, drawn(sequence[i], size))
            graph.replay()
            after(parts)
        return run

    loops = {"eager": eager, "pad_max": padded([edges[-1]]), "buckets": padded(edges)}
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    bounds = [round(len(sequence) * b / args.blocks) for b in range(args.blocks + 1)]
    total_ms = dict.fromkeys(loops, 0.0)
    for block in range(args.blocks):
        names = list(loops) if block % 2 == 0 else list(loops)[::-1]
        for name in names:
            start.record()
            for i in range(bounds[block], bounds[block + 1]):
                loops[name](i)
            end.record()
            end.synchronize()
            total_ms[name] += start.elapsed_time(end)
    result: dict[str, float | str] = {f"{name}_ms": ms / len(sequence)
                                      for name, ms in total_ms.items()}
    result["torch_version"] = str(torch.__version__)
    print(json.dumps(result))
    return 0


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.sequence:
        return shaped_main(args)
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    replica, data = users_step(args, device) if args.workload else mlp_step(args, device)

    # Eager.
    eager_step, eager_parts = replica()

    def eager_iteration(i: int) -> None:
        zero(eager_parts)
        eager_step(data[i % BATCHES])
        after(eager_parts)

    # Graph, as in the article: warm-up on a side stream, grads to None, capture, replay.
    graph_step, graph_parts = replica()
    static = clone(data[0])
    graph = captured(graph_step, graph_parts, static, device, args.warmup_iters,
                     load=lambda i: copy_into(static, data[i % BATCHES]))

    def graph_iteration(i: int) -> None:
        copy_into(static, data[i % BATCHES])
        graph.replay()
        after(graph_parts)

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
    result["cudnn_allow_tf32"] = str(torch.backends.cudnn.allow_tf32)
    result["matmul_allow_tf32"] = str(torch.backends.cuda.matmul.allow_tf32)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
