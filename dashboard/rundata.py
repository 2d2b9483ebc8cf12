"""Run directories for the dashboard: open, list, zip, and validate uploaded zips.

Scope: files only, no Streamlit. A run is opened with ``profiler_core.results.RunResult.load``;
listing reads only each run's summary.json. Uploads are checked before anything is written:
size, member names (no path traversal, no links), the expected files, and every table's columns.
Only known file names are ever written, so a name inside a zip never becomes a path.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd

from profiler_core.config import RunConfig
from profiler_core.errors import ConfigError, ProfilerError, RunFormatError
from profiler_core.results import RunResult
from profiler_core.schema import SCHEMA_VERSION, SUMMARY_FILE, TABLE_FILES, TRACE_FILES

SAMPLE_RUN_DIR = Path(__file__).resolve().parent / "sample_run"
RUNS_DIR_ENV = "PROFILER_RUNS_DIR"
DEFAULT_RUNS_DIR = "runs"

MAX_UPLOAD_MB = 200
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 2**20
MAX_UNCOMPRESSED_BYTES = 2 * 2**30
MAX_ZIP_MEMBERS = 500

# Files every run written by the tool has; the other tables are checked when present.
REQUIRED_FILES = (SUMMARY_FILE, "counters.csv", "latency.csv", "stats.csv")
_TABLE_OF_FILE = {file: (name, columns) for name, (file, columns) in TABLE_FILES.items()}
_TRACE_NAMES = {f"{stem}{ext}" for stem in TRACE_FILES.values() for ext in ("", ".gz")}
_KNOWN_FILES = {SUMMARY_FILE, *_TABLE_OF_FILE, *_TRACE_NAMES}


def default_runs_dir() -> str:
    """The runs folder: ``$PROFILER_RUNS_DIR`` if set, else ``runs`` under the working directory."""
    return os.environ.get(RUNS_DIR_ENV) or DEFAULT_RUNS_DIR


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / SUMMARY_FILE).is_file()


def sample_run_available(path: Path | None = None) -> bool:
    return is_run_dir(path or SAMPLE_RUN_DIR)


# ----------------------------------------------------------------------------- loading


def read_summary(path: Path) -> dict[str, Any]:
    """summary.json as a dict, with its config checked (``_config`` holds the RunConfig)."""
    file = path / SUMMARY_FILE
    if not file.is_file():
        raise RunFormatError(f"{path} has no {SUMMARY_FILE}", "pick a folder written by the tool")
    try:
        summary = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunFormatError(f"{SUMMARY_FILE} is not valid JSON: {exc}",
                             "the file is damaged; record the run again") from None
    if not isinstance(summary, dict):
        raise RunFormatError(f"{SUMMARY_FILE} does not hold a JSON object", "")
    version = summary.get("schema_version")
    if version != SCHEMA_VERSION:
        raise RunFormatError(f"{SUMMARY_FILE} has schema_version {version!r}; "
                             f"this dashboard reads version {SCHEMA_VERSION}",
                             "open it with the version of the tool that wrote it")
    if not isinstance(summary.get("config"), dict):
        raise RunFormatError(f"{SUMMARY_FILE} has no config", "")
    try:
        summary["_config"] = RunConfig.from_dict(summary["config"])
    except (ConfigError, TypeError) as exc:
        raise RunFormatError(f"{SUMMARY_FILE} holds an invalid config: {exc}", "") from None
    return summary


def load_result(path: Path) -> RunResult:
    """The run at ``path`` (``RunResult.load``: checks version, files and columns)."""
    return RunResult.load(Path(path))


@dataclass
class OpenedRun:
    """A loaded run plus where it came from; the views read this."""

    path: Path
    source: str  # "sample", "folder", "upload"
    result: RunResult
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or self.path.name

    @property
    def config(self) -> RunConfig:
        return self.result.config

    @property
    def environment(self) -> dict[str, Any]:
        return self.result.environment or {}

    @property
    def headline(self) -> dict[str, Any]:
        return self.result.headline or {}

    @property
    def notes(self) -> list[str]:
        return list(self.result.notes or [])

    @property
    def complete(self) -> bool:
        return bool(self.result.complete)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        return self.result.tables

    def table(self, name: str) -> pd.DataFrame:
        """A table of the run (empty with its columns when not measured)."""
        return self.result.table(name)

    @property
    def trace_paths(self) -> dict[str, Path | None]:
        return dict(self.result.trace_paths or {})

    @property
    def label(self) -> str:
        return run_label(self.name, self.environment, self.config)


def open_run(path: Path, source: str, name: str = "") -> OpenedRun:
    """Load a run; raises ``ProfilerError`` (RunFormatError...) with a message and hint."""
    path = Path(path)
    if not is_run_dir(path):
        raise RunFormatError(f"{path} is not a run folder (no {SUMMARY_FILE})",
                             "pick a folder written by `python -m profiler_core run`")
    try:
        result = load_result(path)
    except ProfilerError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunFormatError(f"{path.name} cannot be opened: {exc}", "the run files are damaged") from None
    return OpenedRun(path=path, source=source, result=result, name=name)


def _when(text: Any) -> str:
    if not text:
        return ""
    try:
        return datetime.fromisoformat(str(text)).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return str(text)


def run_label(name: str, environment: dict[str, Any], config: RunConfig | None) -> str:
    gpu = environment.get("gpu_name") or environment.get("device_type") or "?"
    parts = [name, str(gpu), _when(environment.get("started_at"))]
    if config is not None:
        parts.append(f"{config.preset} {config.dtype}")
    return " · ".join(p for p in parts if p)


RUN_LIST_COLUMNS = ["name", "started", "gpu", "preset", "dtype", "speedup", "complete", "problem",
                    "path"]


def list_runs(folder: Path) -> pd.DataFrame:
    """Run folders directly under ``folder``, newest first (reads only each summary.json).

    A folder whose summary cannot be read is listed with ``problem`` saying why.
    """
    rows = []
    folder = Path(folder)
    try:
        children = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:  # unreadable folder: nothing to list
        children = []
    if children:
        for child in children:
            if not is_run_dir(child):
                continue
            row = {"name": child.name, "path": str(child), "started": "", "gpu": "",
                   "preset": "", "dtype": "", "speedup": math.nan, "complete": False, "problem": ""}
            try:
                summary = read_summary(child)
                env = summary.get("environment") or {}
                config = summary["_config"]
                speedup = (summary.get("headline") or {}).get("speedup")
                row.update(started=_when(env.get("started_at")), gpu=env.get("gpu_name") or "",
                           preset=config.preset, dtype=config.dtype,
                           speedup=float(speedup) if isinstance(speedup, (int, float)) else math.nan,
                           complete=bool(summary.get("complete", False)))
            except (ProfilerError, OSError) as exc:
                row["problem"] = str(exc)
            row["_mtime"] = (child / SUMMARY_FILE).stat().st_mtime
            rows.append(row)
    frame = pd.DataFrame(rows, columns=RUN_LIST_COLUMNS + ["_mtime"])
    frame = frame.sort_values("_mtime", ascending=False, kind="stable").drop(columns="_mtime")
    return frame.reset_index(drop=True)


# ----------------------------------------------------------------------------- exporting


def table_csv_bytes(frame: pd.DataFrame) -> bytes:
    """A table as CSV (UTF-8, header row, no index) - what every download button serves."""
    return frame.to_csv(index=False).encode("utf-8")


def run_files(path: Path) -> list[Path]:
    """The regular files of a run folder (no links, no subfolders), sorted by name."""
    files = []
    for child in sorted(Path(path).iterdir()):
        mode = child.lstat().st_mode
        if stat.S_ISREG(mode):
            files.append(child)
    return files


def run_zip_bytes(path: Path, root: str | None = None) -> bytes:
    """The whole run folder as one zip (files under ``root/``, the folder's name by default)."""
    path = Path(path)
    root = root or path.name
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for file in run_files(path):
            zf.write(file, f"{root}/{file.name}")
    return buffer.getvalue()


# ----------------------------------------------------------------------------- uploads


def _is_link(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _unsafe_name(name: str) -> bool:
    if name.startswith(("/", "\\")) or "\\" in name or ":" in name or "\x00" in name:
        return True
    return any(part in ("..", "") for part in name.rstrip("/").split("/"))


def _check_csv_header(file: str, data: bytes) -> None:
    _, columns = _TABLE_OF_FILE[file]
    try:
        first_line = data.split(b"\n", 1)[0].decode("utf-8-sig").strip("\r")
    except UnicodeDecodeError:
        raise RunFormatError(f"{file} is not UTF-8 text", "upload a zip written by this tool") from None
    header = next(csv.reader([first_line]), [])
    missing = [c for c in columns if c not in header]
    if missing:
        raise RunFormatError(f"{file} lacks the columns {', '.join(missing)}",
                             f"expected the columns: {', '.join(columns)}")


def validate_run_zip(data: bytes) -> dict[str, zipfile.ZipInfo]:
    """Check an uploaded zip without extracting it; returns file name -> member to extract.

    Raises ``RunFormatError`` with a message saying what is wrong and what was expected.
    """
    if len(data) > MAX_UPLOAD_BYTES:
        raise RunFormatError(f"the upload is {len(data) / 2**20:.0f} MB, over the "
                             f"{MAX_UPLOAD_MB} MB limit", "zip the run without its traces")
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError):
        raise RunFormatError("the upload is not a zip file",
                             "upload the zip that the dashboard's 'Download run (zip)' gives") from None
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        if len(infos) > MAX_ZIP_MEMBERS:
            raise RunFormatError(f"the zip holds {len(infos)} files (at most {MAX_ZIP_MEMBERS})",
                                 "upload one run")
        for info in zf.infolist():
            if _unsafe_name(info.filename):
                raise RunFormatError(f"the zip holds an unsafe path: {info.filename!r}",
                                     "names must be relative, without '..'")
            if _is_link(info):
                raise RunFormatError(f"the zip holds a link: {info.filename!r}",
                                     "links are not accepted")
        summaries = [i for i in infos if PurePosixPath(i.filename).name == SUMMARY_FILE
                     and len(PurePosixPath(i.filename).parts) <= 2]
        if not summaries:
            raise RunFormatError(
                f"this zip is not a run from this tool: {SUMMARY_FILE} is missing",
                f"expected {', '.join(REQUIRED_FILES)} (at the top or in one folder)")
        if len(summaries) > 1:
            raise RunFormatError("the zip holds more than one run", "upload one run per zip")
        prefix = PurePosixPath(summaries[0].filename).parent
        members = {
            PurePosixPath(i.filename).name: i for i in infos
            if PurePosixPath(i.filename).parent == prefix
            and PurePosixPath(i.filename).name in _KNOWN_FILES
        }
        missing = [f for f in REQUIRED_FILES if f not in members]
        if missing:
            raise RunFormatError(f"the run in this zip lacks {', '.join(missing)}",
                                 f"expected {', '.join(REQUIRED_FILES)}")
        total = sum(i.file_size for i in members.values())
        if total > MAX_UNCOMPRESSED_BYTES:
            raise RunFormatError(f"the run unpacks to {total / 2**30:.1f} GiB "
                                 f"(at most {MAX_UNCOMPRESSED_BYTES / 2**30:.0f} GiB)", "")
        try:
            for file, info in members.items():
                if file in _TABLE_OF_FILE:
                    with zf.open(info) as handle:
                        _check_csv_header(file, handle.read(64 * 1024))
            summary_bytes = zf.read(members[SUMMARY_FILE])
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as exc:
            raise RunFormatError(f"the zip cannot be read: {exc}", "the zip is damaged") from None
        try:
            summary = json.loads(summary_bytes.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise RunFormatError(f"{SUMMARY_FILE} is not valid JSON: {exc}", "") from None
    if not isinstance(summary, dict) or summary.get("schema_version") != SCHEMA_VERSION:
        raise RunFormatError(f"{SUMMARY_FILE} is not a version-{SCHEMA_VERSION} run summary",
                             "upload a zip written by this version of the tool")
    try:
        RunConfig.from_dict(summary.get("config") or {})
    except (ConfigError, TypeError) as exc:
        raise RunFormatError(f"{SUMMARY_FILE} holds an invalid config: {exc}", "") from None
    return members


def extract_run_zip(data: bytes, dest: Path) -> Path:
    """Validate ``data`` and write its run files into the new folder ``dest``.

    Only the known file names are written, in chunks, stopping at the size limit (a zip's
    declared sizes can lie). ``dest`` must not exist; on any error it is removed again.
    """
    members = validate_run_zip(data)
    dest = Path(dest)
    dest.mkdir(parents=True)
    written = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for file, info in members.items():
                with zf.open(info) as source, open(dest / file, "wb") as target:
                    while chunk := source.read(1 << 20):
                        written += len(chunk)
                        if written > MAX_UNCOMPRESSED_BYTES:
                            raise RunFormatError("the run unpacks to more than its declared size",
                                                 "the zip is damaged or crafted")
                        target.write(chunk)
    except (RunFormatError, zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, RunFormatError):
            raise
        raise RunFormatError(f"the zip cannot be unpacked: {exc}", "the zip is damaged") from None
    return dest
