"""The tool's cache folder, and a bytecode cache in it for a Python told not to write bytecode.

Scope: where the tool keeps what it may rebuild at any time (``tool_cache_folder``), and the
start-up fix for one slow setup (``keep_bytecode``): ``PYTHONDONTWRITEBYTECODE`` (or ``-B``) set
and torch installed without its compiled bytecode, so that every process compiles torch, sympy
and pandas from source again (on the lent H200 VM: ``import torch`` 4.6 s, ``torch._dynamo``,
which the first optimizer imports, 6.0 s more). Nothing here imports torch.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

CACHE_FOLDER_NAME = "cuda-graph-profiler"
BYTECODE_FOLDER_NAME = "bytecode"
# "0" leaves Python as it was started: no bytecode written anywhere.
OPT_OUT_VARIABLE = "PROFILER_CORE_BYTECODE_CACHE"
# The package whose missing bytecode makes a start slow (checked without importing it).
HEAVIEST_PACKAGE = "torch"


def tool_cache_folder(environ: MutableMapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/cuda-graph-profiler``, else ``~/.cache/cuda-graph-profiler``."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME", "").strip()
    folder = Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache"
    return folder / CACHE_FOLDER_NAME


@dataclass(frozen=True)
class BytecodeState:
    """How this process gets compiled modules: ``folder`` is the tool's bytecode cache when it
    was turned on (else None); ``reason`` says why, or why not, in one line."""

    folder: Path | None
    reason: str
    first_use: bool = False  # the folder was made now: this process compiles what it imports


def _has_bytecode(package: str) -> bool | None:
    """Whether ``package``'s ``__init__`` has compiled bytecode beside its source (None: the
    package is not installed, or has no source to compile)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        return Path(importlib.util.cache_from_source(spec.origin)).is_file()
    except (NotImplementedError, ValueError):
        return None


def keep_bytecode(environ: MutableMapping[str, str] | None = None) -> BytecodeState:
    """When Python may not write bytecode and torch has none, let this process and the ones it
    starts (warm workers, ranks, the NVML sampler, bare loops) keep what they compile in the
    tool's cache folder (``sys.pycache_prefix``), so only the first run pays for compiling.

    Nothing changes where bytecode is already found beside the sources (a normal pip install),
    where a ``PYTHONPYCACHEPREFIX`` is set, or with ``PROFILER_CORE_BYTECODE_CACHE=0``. Call it
    before importing torch. The folder holds only compiled copies of installed modules (Python
    checks each against its source), so it can be deleted at any time."""
    environ = os.environ if environ is None else environ
    if not sys.dont_write_bytecode:
        return BytecodeState(None, "Python writes bytecode beside the sources")
    if sys.pycache_prefix:
        return BytecodeState(None, f"bytecode is kept in {sys.pycache_prefix} (PYTHONPYCACHEPREFIX)")
    if environ.get(OPT_OUT_VARIABLE, "").strip() == "0":
        return BytecodeState(None, f"{OPT_OUT_VARIABLE}=0: every module is compiled from source "
                                   "in every process")
    if _has_bytecode(HEAVIEST_PACKAGE) is not False:
        return BytecodeState(None, f"{HEAVIEST_PACKAGE}'s bytecode is installed")
    folder = tool_cache_folder(environ) / BYTECODE_FOLDER_NAME
    first_use = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return BytecodeState(None, f"the bytecode cache {folder} could not be made ({error.strerror})")
    if not os.access(folder, os.W_OK):
        return BytecodeState(None, f"the bytecode cache {folder} is not writable")
    sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    environ["PYTHONPYCACHEPREFIX"] = str(folder)  # the processes this one starts
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return BytecodeState(folder, "Python was told not to write bytecode and torch has none, so "
                                 f"compiled modules are kept in {folder} ({OPT_OUT_VARIABLE}=0 "
                                 "turns this off)", first_use=first_use)


def bytecode_source() -> str:
    """Where this process's compiled modules come from, for a run's environment."""
    if sys.pycache_prefix:
        return f"kept in {sys.pycache_prefix}"
    if sys.dont_write_bytecode:
        return "not written: modules without installed bytecode are compiled in every process"
    return "beside the sources"
