"""profiler_core: measure how much CUDA Graphs speed up a PyTorch training step, and why.

Scope: the measuring engine. It runs a training step eagerly and as a captured
``torch.cuda.CUDAGraph``, times both correctly, splits launch / kernel / idle time with
``torch.profiler``, samples NVML, and writes a run directory. It never imports a UI library.
"""

from profiler_core.errors import ProfilerError

__all__ = ["ProfilerError"]
