"""Uploads on disk, and how they are cleaned up.

Scope: where an uploaded zip is unpacked and where an uploaded lengths file (the sidebar's
``--vary NAME=file:PATH``) is kept (:class:`UploadStore`, one folder per server process, one
subfolder per browser session), how a lengths file is checked (as the command line reads it,
``profiler_core.spec.shapes``), and when each is deleted; no Streamlit.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

from dashboard import rundata
from profiler_core.spec import shapes
from profiler_core.spec.errors import ConfigError, shown

ROOT_PREFIX = "cgp-uploads-"
KEEP_PER_SESSION = 3
LENGTHS_PREFIX = "lengths-"  # a session's lengths files: lengths-<n>/<name>.txt
LENGTHS_HINT = (f"one whole number from 1 to {shapes.MAX_LENGTH:,} a line (blank lines and lines "
                "starting with # are skipped)")
_ROOT_NAME = re.compile(re.escape(ROOT_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")


def safe_stem(name: str) -> str:
    """A plain folder name from an uploaded file's name ('../../x y.zip' -> 'x-y')."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(str(name or "upload").replace("\\", "/")).stem)
    stem = stem.strip(".-")[:60].strip(".-")
    return stem or "upload"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's), or cannot tell: leave it alone
    return True


def sweep_stale(base: Path) -> list[Path]:
    """Remove upload folders under ``base`` left by server processes that no longer exist."""
    removed: list[Path] = []
    try:
        children = list(Path(base).iterdir())
    except OSError:
        return removed
    for child in children:
        match = _ROOT_NAME.fullmatch(child.name)
        if not match:
            continue
        try:
            info = child.lstat()
        except OSError:
            continue
        if child.is_symlink() or not child.is_dir() or info.st_uid != os.getuid():
            continue
        if not _pid_alive(int(match.group(1))):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


class UploadStore:
    """The server's folder of uploads (one per process): ``<tmp>/cgp-uploads-<pid>-<random>/``,
    with one ``session-<random>/`` per browser session (a :class:`SessionUploads`), each upload in
    its own numbered folder ``<n>/<name>/``. Removed: a refused upload at once; a session's
    uploads beyond the newest ``keep`` (3) when it uploads another; a session's folder when the
    session ends; the whole folder when the server process exits (``weakref.finalize``); after a
    crash or a SIGKILL, by the next server: folders of server processes that are gone."""

    def __init__(self, base: Path | None = None, keep: int = KEEP_PER_SESSION) -> None:
        self.base = Path(base) if base is not None else Path(tempfile.gettempdir())
        self.base.mkdir(parents=True, exist_ok=True)
        sweep_stale(self.base)
        self.root = Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-", dir=self.base))
        self.keep = keep
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.root), True)

    def session(self) -> SessionUploads:
        """A new session's uploads (keeps this store, hence its folder, alive while it lives)."""
        return SessionUploads(self)

    def close(self) -> None:
        self._finalizer()


@dataclass(frozen=True)
class SavedLengths:
    """An uploaded lengths file as kept for the run: where (``file:<path>`` is what the run is
    given), the name it was uploaded under, and what it holds."""

    path: Path
    name: str
    distribution: shapes.Distribution

    @property
    def summary(self) -> str:
        d = self.distribution
        return (f"{int(sum(d.weights)):,} lengths, {len(d.values):,} distinct, from {d.minimum:,} "
                f"to {d.maximum:,}")


class SessionUploads:
    """One browser session's uploads; its folder is removed when this object is collected."""

    def __init__(self, store: UploadStore) -> None:
        self.store = store
        self.dir = Path(tempfile.mkdtemp(prefix="session-", dir=store.root))
        self._runs: list[Path] = []
        self._lengths: list[Path] = []
        self._count = 0
        self._guard = threading.Lock()
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.dir), True)

    def add(self, data: bytes, file_name: str) -> tuple[rundata.OpenedRun, list[Path]]:
        """Validate, unpack and open an upload; returns the run and the older uploads removed to
        keep the newest ``store.keep``. A refused upload raises ``ProfilerError`` and leaves
        nothing on disk."""
        with self._guard:
            self._count += 1
            slot = self.dir / str(self._count)
        try:
            slot.mkdir(parents=True)
            run = rundata.unpack_run(data, slot / safe_stem(file_name))
        except BaseException:
            shutil.rmtree(slot, ignore_errors=True)
            raise
        removed: list[Path] = []
        with self._guard:
            self._runs.append(run.path)
            while len(self._runs) > self.store.keep:
                old = self._runs.pop(0)
                shutil.rmtree(old.parent, ignore_errors=True)
                removed.append(old)
        return run, removed

    def add_lengths(self, data: bytes, file_name: str) -> SavedLengths:
        """Keep an uploaded lengths file (one length a line) in a new folder of this session and
        read it as ``run --vary NAME=file:PATH`` does (``shapes.parse_distribution``). A refused
        file raises ``ConfigError`` (field ``vary``, naming the file as uploaded) and leaves
        nothing on disk; the newest ``store.keep`` files are kept (a queued run reads its file
        when it starts)."""
        name = safe_stem(file_name) + ".txt"
        if len(data) > shapes.MAX_FILE_BYTES:
            raise ConfigError("vary", f"the lengths file {shown(file_name)} is "
                                      f"{len(data) / 2**20:.1f} MiB, over "
                                      f"{shapes.MAX_FILE_BYTES // 2**20} MiB",
                              "upload a sample of the lengths")
        with self._guard:
            self._count += 1
            slot = self.dir / f"{LENGTHS_PREFIX}{self._count}"
        path = slot / name
        try:
            slot.mkdir(parents=True)  # a new folder of this session: never an existing file
            with open(path, "xb") as out:
                out.write(data)
            distribution = shapes.parse_distribution(f"file:{path}")
        except ConfigError as error:  # said of the file as the user named it, not of our copy
            shutil.rmtree(slot, ignore_errors=True)
            hint = LENGTHS_HINT if error.hint == shapes.DIST_EXAMPLES else error.hint
            raise ConfigError("vary", error.message.replace(shown(str(path)), shown(file_name)),
                              hint) from None
        except BaseException:
            shutil.rmtree(slot, ignore_errors=True)
            raise
        with self._guard:
            self._lengths.append(slot)
            while len(self._lengths) > self.store.keep:
                shutil.rmtree(self._lengths.pop(0), ignore_errors=True)
        return SavedLengths(path, str(file_name), distribution)

    def paths(self) -> list[Path]:
        """The uploads still kept, oldest first."""
        with self._guard:
            return list(self._runs)

    def close(self) -> None:
        self._finalizer()
