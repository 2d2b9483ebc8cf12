"""Where ``bench --out`` writes the benchmark's tables: by the rules a run folder follows
(``storage.outputs``).

Scope: the benchmark's folder, checked before the benchmark runs (:func:`check_bench_output`: a
new folder, or with ``--overwrite`` one of this tool's benchmark folders holding nothing else,
unchanged since it was written), then written through a staging folder beside it, its manifest
last, and renamed into place (:func:`write_bench_tables`). A file, a device, a link, a run folder
or a folder of the user's at that path is refused and left as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from profiler_core.spec.errors import SaveError
from profiler_core.storage import outputs
from profiler_core.storage.outputs import (
    MANIFEST_FILE,
    NotOwned,
    Owned,
    make_parents,
    owned_folder,
    remove_made,
    replace_folder,
    write_manifest,
)

BENCH_KIND = "bench"  # a benchmark folder's manifest kind
UNSAVED_PREFIX = "profiler_core_unsaved_bench_"  # where the tables go when --out cannot be written
_TABLE_FILE = re.compile(r"bench_[a-z][a-z0-9_]{0,39}\.csv")


def table_file(name: str) -> str:
    """The file one benchmark table is written to: ``bench_<table>.csv``."""
    return f"bench_{name}.csv"


def bench_files(path: Path) -> Owned:
    """What ``--overwrite`` removes from the benchmark folder ``path``; ``NotOwned`` (naming the
    entry) when it is not wholly one benchmark of this tool: a real folder holding its manifest
    and nothing but the tables it lists, each unchanged (size and content hash), no links, no
    subfolders. A folder without that manifest is not the tool's, whatever its files are named."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir() or not os.path.lexists(path / MANIFEST_FILE):
        raise NotOwned("", "is not a benchmark folder of this tool")
    return owned_folder(path, BENCH_KIND, lambda name: _TABLE_FILE.fullmatch(name) is not None)


BENCH_FOLDER = outputs.FolderKind("benchmark", "the benchmark's tables", "runs/bench",
                                  "the benchmark was not run", "tables")


def check_bench_output(directory: str | os.PathLike, overwrite: bool = False) -> Path:
    """The benchmark folder to write, checked before the benchmark runs: a new folder whose
    parent can be written, or (``overwrite``) one of this tool's benchmark folders holding
    nothing else (:func:`bench_files`). Anything else is refused with ``ConfigError`` on ``out``
    and left untouched; nothing is created."""
    return outputs.check_output_folder(directory, overwrite, BENCH_FOLDER, bench_files)


def _write_into(folder: Path, tables: Mapping[str, pd.DataFrame]) -> None:
    names = []
    for name, frame in tables.items():
        names.append(table_file(name))
        with open(folder / names[-1], "w", encoding="utf-8", newline="") as handle:
            frame.to_csv(handle, index=False)
    write_manifest(folder, BENCH_KIND, names)


def write_bench_tables(tables: Mapping[str, pd.DataFrame], directory: str | os.PathLike,
                       overwrite: bool = False) -> Path:
    """Write ``tables`` (name -> table, each as ``bench_<name>.csv``) into the benchmark folder
    ``directory``, checked again first (:func:`check_bench_output`): into a staging folder beside
    it, then renamed into place, replacing an earlier benchmark of this tool only with
    ``overwrite`` (exactly its own files are removed). When the folder cannot be written (a full
    disk...), the tables are written under the system's temporary folder and ``SaveError`` says
    where, or that they could not be saved and why."""
    target = check_bench_output(directory, overwrite)
    made = make_parents(target)
    staging = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        _write_into(staging, tables)
        if os.path.lexists(target):
            try:
                replace_folder(target, bench_files, new=staging)  # checked again once aside
            except NotOwned as why:
                raise outputs.not_replaced(BENCH_FOLDER, repr(str(target)), why) from None
        else:
            os.replace(staging, target)
    except OSError as error:
        _discard(staging, made)
        raise _kept_elsewhere(tables, repr(os.fspath(directory)), error) from None
    except BaseException:
        _discard(staging, made)
        raise
    return target


def _discard(staging: Path | None, made: list[Path]) -> None:
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)  # our own staging folder only
    remove_made(made)


def _kept_elsewhere(tables: Mapping[str, pd.DataFrame], shown: str, error: OSError) -> SaveError:
    reason = error.strerror or str(error) or type(error).__name__
    folder = None
    try:
        folder = Path(tempfile.mkdtemp(prefix=UNSAVED_PREFIX))
        _write_into(folder, tables)
    except OSError as second:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)  # our own, just made
        return SaveError(f"the benchmark's tables could not be saved in {shown} ({reason}) nor "
                         f"under {tempfile.gettempdir()!r} ({second.strerror or second}); the "
                         "figures printed above are all that is left",
                         "free some disk space, or choose a folder on another disk with --out")
    return SaveError(f"the benchmark's tables could not be saved in {shown} ({reason}); they were "
                     f"saved in {str(folder)!r} instead",
                     "free some disk space, then move that folder where you want it")
