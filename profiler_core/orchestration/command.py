"""The command lines and environment of the launcher's processes: the one place a ``RunConfig``
becomes argv.

Scope: :func:`run_argv` (``python -m profiler_core run <options> --timeout 0 --out ... --progress
jsonl``), :func:`config_to_argv` (the options that ``run`` parses back into exactly the config),
:func:`run_options_argv` (``run`` with options given as text: the benchmark's, which the bare
loop reads too), :func:`serve_argv` (a warm worker) and :func:`run_env`. A warm worker is then handed the config
itself (``profiler_core.engine.serve.RunRequest``), never a command line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from profiler_core.spec import fields
from profiler_core.spec.config import RunConfig

REPO_ROOT = Path(__file__).resolve().parents[2]


def config_to_argv(config: RunConfig) -> list[str]:
    """Options that ``run`` turns back into exactly ``config``."""
    argv: list[str] = []
    for option, specs in fields.options().items():
        values = [getattr(config, s.name) for s in specs]
        if specs[0].kind == fields.BOOL:
            argv.append(option if values[0] else "--no-" + option[2:])
        elif specs[0].kind == fields.SETTINGS:  # given once per setting
            for name, value in values[0]:
                argv += [option, f"{name}={value}"]
        elif None not in values:  # an automatic field left out stays automatic
            argv += [option, *(fields.format_value(s.name, v) for s, v in zip(specs, values))]
    return argv


def run_argv(config: RunConfig, out_dir: Path | str, *, python: str = sys.executable,
             overwrite: bool = False) -> list[str]:
    """The command line of one run of ``config`` writing into ``out_dir``, JSON-lines progress.
    ``--timeout 0``: the run sets itself no time limit, its launcher's caller does (``timeout_s``)."""
    return run_options_argv([*config_to_argv(config), "--timeout", "0"], out_dir, python=python,
                            progress="jsonl", overwrite=overwrite)


def run_options_argv(options: Sequence[str], out_dir: Path | str, *, progress: str,
                     python: str = sys.executable, overwrite: bool = False) -> list[str]:
    """The command line of one ``run`` with ``options`` as they are (``run`` parses and checks
    them), writing into ``out_dir``, with ``progress`` (bar, jsonl or none)."""
    return [python, "-m", "profiler_core", "run", *options, "--out", str(out_dir),
            "--progress", progress, *(["--overwrite"] if overwrite else [])]


def serve_argv(device: str, *, python: str = sys.executable) -> list[str]:
    """The command line of a warm worker for ``device`` (``profiler_core.engine.serve``)."""
    return [python, "-m", "profiler_core", "serve", "--device", device]


def run_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A run's environment: unbuffered, this package importable, CUDA numbered like NVML."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    # NVML (and the dashboard's GPU selector) count GPUs in PCI bus order; make CUDA do the same.
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env
