"""The ``trace-stats --out`` tables: launch_split.csv and kernels.csv of one analysed trace,
written for a user into a folder that holds nothing else (checked before any work)."""

from __future__ import annotations

import os
from pathlib import Path

from profiler_core.analysis.trace import TraceAnalysis
from profiler_core.spec.errors import ConfigError
from profiler_core.spec.schema import TABLE_FILES
from profiler_core.storage.csvsafe import csv_bytes
from profiler_core.storage.outputs import replace_file, shown_name

TRACE_TABLES = ("launch_split", "kernels")


def check_table_folder(folder: Path, overwrite: bool) -> None:
    """A new or empty folder, or one holding nothing but the two tables an earlier trace-stats
    wrote (plain files starting with our header), which are replaced only when asked
    (``overwrite``). Anything else in the folder refuses it (``ConfigError`` on ``out``), and it
    is left as it was."""
    if not os.path.lexists(folder):
        return
    if folder.is_symlink() or not folder.is_dir():
        raise ConfigError("out", f"{str(folder)!r} exists and is not a folder",
                          "choose a folder for the tables")
    headers = {TABLE_FILES[table][0]: ",".join(TABLE_FILES[table][1]) for table in TRACE_TABLES}
    try:
        with os.scandir(folder) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
    except OSError as error:
        raise ConfigError("out", f"{str(folder)!r} cannot be read ({error.strerror})",
                          "choose another folder") from None
    for entry in entries:
        path = folder / entry.name
        if entry.name not in headers:
            raise ConfigError("out", f"{str(folder)!r} holds {shown_name(entry.name)}, which "
                                     "trace-stats did not write, so nothing was written",
                              "choose a new or empty folder for the tables")
        if not entry.is_file(follow_symlinks=False) or _first_line(path) != headers[entry.name]:
            raise ConfigError("out", f"{str(path)!r} exists and is not a table written by this "
                                     "tool, so nothing was written", "choose another folder")
    if entries and not overwrite:
        raise ConfigError("out", f"{str(folder / entries[0].name)!r} already holds a table",
                          "choose another folder, or pass --overwrite to replace it")


def _first_line(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def write_tables(analysis: TraceAnalysis, out_dir: str | Path) -> list[Path]:
    """Write launch_split.csv and kernels.csv into ``out_dir`` (created if needed), as CSV for a
    user: text that a spreadsheet would run as a formula is made inert (``csvsafe``). Each file
    is written beside its name and renamed over it, so a file hard-linked there from elsewhere is
    replaced, never written through."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for table_key, frame in (("launch_split", analysis.launch_split),
                             ("kernels", analysis.kernels)):
        file_name, columns = TABLE_FILES[table_key]
        path = out_dir / file_name
        replace_file(path, csv_bytes(frame[columns]))
        written.append(path)
    return written
