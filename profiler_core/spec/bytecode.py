"""The tool's cache folder, and a bytecode cache in it for a Python told not to write bytecode.

Scope: where the tool keeps what it may rebuild at any time (``tool_cache_folder``), used only
when no other user could have written there (``private_folder``: made with mode 0700, never
through a link, owned by this user and writable by no one else), and the start-up fix for one
slow setup (``keep_bytecode``): ``PYTHONDONTWRITEBYTECODE`` (or ``-B``) set and torch installed
without its compiled bytecode, so that every process compiles torch, sympy and pandas from source
again (seconds for ``import torch`` and more for ``torch._dynamo``, which the first optimizer
imports; measured in docs/how-it-measures.md, "Start-up: a fresh run's first seconds"). Compiled
modules run as the user: a cache another user could write to would run their code. Nothing here
imports torch.
"""

from __future__ import annotations

import _imp
import importlib.util
import os
import stat
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
PRIVATE_MODE = 0o700  # the tool's cache folders: this user's only
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def tool_cache_folder(environ: MutableMapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/cuda-graph-profiler``, else ``~/.cache/cuda-graph-profiler``."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME", "").strip()
    folder = Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache"
    return folder / CACHE_FOLDER_NAME


def private_folder(folder: Path, top: Path) -> str | None:
    """Make ``folder`` (``top``, the tool's cache folder, or a folder inside it) and check that
    no other user could have put anything in it: None when it may be used, else why not, in a
    few words.

    Each missing folder on the way is made with mode 0700, never through a link. From ``top``
    down to ``folder`` each must be a real folder (not a link), owned by this user and writable
    by nobody else; the folders above ``top`` must not let another user move it away and put
    their own in its place (writable by others only with the sticky bit, as /tmp)."""
    top, folder = Path(top), Path(folder)
    inside = folder.relative_to(top).parts
    owned = [top.joinpath(*inside[:depth]) for depth in range(len(inside) + 1)]
    try:
        for made in reversed(top.parents):
            if not os.path.lexists(made):
                os.mkdir(made, PRIVATE_MODE)
        real = Path(os.path.realpath(top.parent))
        for above in (real, *real.parents):
            mode = os.stat(above).st_mode
            if mode & _WRITABLE_BY_OTHERS and not mode & stat.S_ISVTX:
                return (f"other users may write to {above} (mode {stat.S_IMODE(mode):o}), so they "
                        f"could replace {top}; set XDG_CACHE_HOME to a folder of your own")
        for own in owned:  # each checked before anything is made inside it
            if not os.path.lexists(own):
                os.mkdir(own, PRIVATE_MODE)
            info = os.lstat(own)
            if stat.S_ISLNK(info.st_mode):
                return f"{own} is a link, which the tool never follows; remove the link"
            if not stat.S_ISDIR(info.st_mode):
                return f"{own} is not a folder"
            if info.st_uid != os.geteuid():
                return (f"{own} belongs to another user (uid {info.st_uid}), who may have put "
                        "files there; leave it, and set XDG_CACHE_HOME to a folder of your own")
            if info.st_mode & _WRITABLE_BY_OTHERS:
                return (f"{own} is writable by other users (mode {stat.S_IMODE(info.st_mode):o}), "
                        "who may have put files there; remove it (it is made again, private, on "
                        "the next command)")
    except (OSError, ValueError) as error:
        return f"it could not be made ({getattr(error, 'strerror', None) or error})"
    if not os.access(folder, os.W_OK):
        return "it is not writable"
    return None


@dataclass(frozen=True)
class BytecodeState:
    """How this process gets compiled modules: ``folder`` is the tool's bytecode cache when it
    was turned on (else None); ``reason`` says why, or why not, in one line; ``refused``: the
    cache was wanted but its folder may not be used (said once, on stderr, by the command line)."""

    folder: Path | None
    reason: str
    first_use: bool = False  # the folder was made now: this process compiles what it imports
    refused: bool = False


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
    where a ``PYTHONPYCACHEPREFIX`` is set, or with ``PROFILER_CORE_BYTECODE_CACHE=0``. The
    cache is used only in a folder of this user's alone (:func:`private_folder`); otherwise
    nothing changes, the state says why (``refused``) and the processes this one starts do not
    try again (``PROFILER_CORE_BYTECODE_CACHE=0`` in ``environ``). A hash-based pyc is always
    checked against its source (``--check-hash-based-pycs always``): one that says it needs no
    check is never loaded unchecked. Call it before importing torch. The folder holds only
    compiled copies of installed modules (Python checks each against its source), so it can be
    deleted at any time."""
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
    top = tool_cache_folder(environ)
    folder = top / BYTECODE_FOLDER_NAME
    first_use = not os.path.lexists(folder)
    problem = private_folder(folder, top)
    if problem is not None:
        environ[OPT_OUT_VARIABLE] = "0"
        return BytecodeState(None, f"the bytecode cache {folder} is not used: {problem}",
                             refused=True)
    _imp.check_hash_based_pycs = "always"  # as --check-hash-based-pycs always
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
