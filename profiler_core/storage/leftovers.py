"""What the tool's own processes leave beside a user's files when they are killed outright
(SIGKILL, a power cut) before they can clean up, and its removal by a later run.

Scope: the owner tag in the names of the tool's temporary folders and files (:func:`tagged`:
this host, the process id and its start time), and :func:`remove_stale`: in one folder, the
leftovers named so whose owner has provably ended on this host and that are at least
``LEFTOVER_MIN_AGE_S`` old, and in them only what is recognisably the tool's. Three kinds: a
``--repeats`` staging folder (``.<name>.r<tag>.XXXXXXXX``: the repeats' run folders in it), a
run index's temporary file (``.profiler_index.sqlite.<tag>.XXXXXXXX.tmp`` and SQLite's journal
beside it), and the log folder a data-parallel launcher gives torchrun in the temporary folder
(``profiler_core_torchrun_<tag>.XXXXXXXX``, made private: all of it torchrun's). A name without a
tag (an earlier version's), another host's, a live process's or a fresh one is never touched.
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from profiler_core.spec.schema import INDEX_FILE
from profiler_core.storage.outputs import NotOwned, Owned, remove_owned

LEFTOVER_MIN_AGE_S = 60.0  # a leftover younger than this is left (its owner's children may write)
REPEATS_STAGING = "r"  # the kind letter of a --repeats staging folder: .<name>.r<tag>.XXXXXXXX
TORCHRUN_LOGS = "profiler_core_torchrun_"  # torchrun's log folder: profiler_core_torchrun_<tag>.X
_TAG = r"(?P<host>[0-9a-f]{8})-(?P<pid>[1-9][0-9]{0,9})-(?P<start>[0-9]{1,20})"
_RANDOM = r"[a-z0-9_]{8}"  # what tempfile adds to a prefix
_REPEATS = re.compile(rf"\..+\.{REPEATS_STAGING}{_TAG}\.{_RANDOM}")
_INDEX_TEMPORARY = re.compile(rf"{re.escape(INDEX_FILE)}\.{_TAG}\.{_RANDOM}\.tmp(-journal|-wal|-shm)?")
_TORCHRUN_LOGS = re.compile(rf"{TORCHRUN_LOGS}{_TAG}\.{_RANDOM}")
# What a repeats staging folder holds: each repeat's run folder, and a repeat's own staging
# folder when it was killed while saving.
_REPEAT_FOLDER = re.compile(rf"\.?repeat-[1-9][0-9]{{0,2}}(\.{_RANDOM})?")


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def _start_time(pid: int) -> str:
    """A process's start time (field 22 of /proc/PID/stat, clock ticks since boot), to tell it
    from a later one with the same id; "0" where it cannot be read (not Linux, or ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            field = handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"
    return field if field.isascii() and field.isdigit() else "0"


def owner_tag(pid: int | None = None) -> str:
    """The tag naming process ``pid`` (default: this one) of this host: host-pid-start."""
    pid = os.getpid() if pid is None else pid
    return f"{_host()}-{pid}-{_start_time(pid)}"


def tagged(stem: str) -> str:
    """A temporary name's prefix for ``stem`` that names this process as its owner (``stem`` then
    the tag then a dot: tempfile adds its random part after it)."""
    return f"{stem}{owner_tag()}."


def _owner_ended(match: re.Match[str]) -> bool:
    """Whether the process a tag names has provably ended: of this host, and no process with
    its id runs, or one with another start time (its id reused)."""
    if match["host"] != _host():
        return False
    pid = int(match["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it runs, as another user
        return False
    started = _start_time(pid)
    return started != "0" and started != match["start"]


def remove_stale(folder: Path, run_files: Callable[[Path], Owned] | None = None) -> None:
    """Remove the tool's stale leftovers in ``folder`` (see the module docstring): an index's
    temporary file, torchrun's log folder, and with ``run_files`` (``results.run_files``) a
    repeats staging folder's run folders, each only where ``run_files`` finds it wholly the
    tool's, then the folder if that emptied it. Never raises; anything else is left as it is."""
    now = time.time()
    try:
        with os.scandir(folder) as scan:
            entries = list(scan)
    except OSError:
        return
    for entry in entries:
        try:
            is_folder = entry.is_dir(follow_symlinks=False)
            logs = _TORCHRUN_LOGS.fullmatch(entry.name) if is_folder else None
            match = logs or (_REPEATS if is_folder else _INDEX_TEMPORARY).fullmatch(entry.name)
            if match is None or (is_folder and logs is None and run_files is None) or not (
                    is_folder or entry.is_file(follow_symlinks=False)):
                continue
            if now - entry.stat(follow_symlinks=False).st_mtime < LEFTOVER_MIN_AGE_S or \
                    not _owner_ended(match):
                continue
            if logs is not None:  # made private by the tool: everything in it is torchrun's
                shutil.rmtree(entry.path)
            elif is_folder and run_files is not None:
                _remove_staging(Path(entry.path), run_files)
            else:
                os.unlink(entry.path)
        except OSError:
            continue


def _remove_staging(staging: Path, run_files: Callable[[Path], Owned]) -> None:
    with os.scandir(staging) as scan:
        entries = list(scan)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and _REPEAT_FOLDER.fullmatch(entry.name):
            try:
                remove_owned(run_files(Path(entry.path)))
            except NotOwned:
                continue
    os.rmdir(staging)  # fails, leaving it, when anything else is in it
