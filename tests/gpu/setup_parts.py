"""Where a fresh process's first seconds go before the seed run's first timed step (issue 17,
item 5): each part of the runner's setup timed on its own, in the order a default run does it.

Usage: python3 tests/gpu/setup_parts.py [preset]   (prints one JSON object: part -> seconds)
Run it in several fresh processes; ``-X importtime`` on the same command splits the imports.
"""

import json
import sys
import time

from profiler_core.cli.timings import process_start_s

started = process_start_s()
parts: dict[str, float] = {}
last = time.time()
if started is not None:
    parts["interpreter to script"] = last - started


def mark(name: str) -> None:
    global last
    now = time.time()
    parts[name] = round(now - last, 4)
    last = now


import torch  # noqa: E402

mark("import torch")
import profiler_core.engine.runner as runner  # noqa: E402

mark("import the runner (after torch)")
from profiler_core.engine import modes, workloads  # noqa: E402
from profiler_core.engine.telemetry import driver_version  # noqa: E402
from profiler_core.spec.config import preset  # noqa: E402
from profiler_core.spec.workload_kinds import BATCH_POOL_SIZE  # noqa: E402

config = preset(sys.argv[1] if len(sys.argv) > 1 else "seed")
mark("import the rest")
available = torch.cuda.is_available()
mark("torch.cuda.is_available")
device = runner.resolve_device(config)
mark("resolve_device (the device check's first part)")
runner.check_fits(config, device)
mark("check_fits")
version = driver_version()
mark("driver_version (NVML in this process)")
runner.describe_environment(device, version)
mark("describe_environment")
torch.zeros(1, device=device)
torch.cuda.synchronize(device)
mark("first tensor on the GPU (CUDA context)")
batches = workloads.make_batches(config, BATCH_POOL_SIZE, device)
torch.cuda.synchronize(device)
mark("make_batches")
torch.manual_seed(config.seed)
model = workloads.build_model(config).to(device)
mark("build_model + to(device)")
import torch._dynamo  # noqa: E402

mark("import torch._dynamo (what the first optimizer imports)")
optimizer = workloads.build_optimizer(config, model.parameters(), capturable=False)
mark("build_optimizer")
step = workloads.TrainingStep(config, device, graphed=False)
mark("TrainingStep (eager replica, whole)")
with workloads.matmul_precision(config.dtype):
    step.eager_step(*batches[0])
    torch.cuda.synchronize(device)
    mark("first eager step (cuBLAS, kernels loaded)")
    for i in range(1, 4):
        step.eager_step(*batches[i])
    torch.cuda.synchronize(device)
    mark("three more eager steps")
    graphed = modes.new_graphed_step(config, device, batches)
    mark("graphed replica (capturable optimizer)")
    costs = modes.capture_graph(graphed, config, batches)
    torch.cuda.synchronize(device)
    mark("side-stream warm-up and capture")
    for _ in range(3):
        graphed.replay()
    torch.cuda.synchronize(device)
    mark("three replays")
print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__,
                  "available": available, "dont_write_bytecode": sys.flags.dont_write_bytecode,
                  "parts": parts}))
