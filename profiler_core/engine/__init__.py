"""Running a training step: workloads, capture, modes, the runner, the profiler window, NVML
telemetry, memory checks and the warm-worker server."""
