"""Run directories for the dashboard: open, list, zip, and validate uploaded zips.

Scope: files only, no Streamlit. Runs are read through ``profiler_core.storage.runfolder`` and
``RunResult.load`` (nothing from a run is ever executed); an uploaded zip is checked before
anything is written (:func:`validate_run_zip`); downloads are safe to open in a spreadsheet.
Every failure is a ``ProfilerError`` with a message and a hint.
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

import pandas as pd

from profiler_core.analysis.figures import Figures, Headline
from profiler_core.spec.config import RunConfig, preset_label
from profiler_core.spec.errors import ProfilerError, RunFormatError
from profiler_core.spec.headline import FACT_TYPES
from profiler_core.spec.schema import (
    LATER_COLUMNS,
    SUMMARY_FILE,
    TABLE_FILES,
    clean_text,
)
from profiler_core.storage import index as run_index
from profiler_core.storage import runfolder, tablelimits
from profiler_core.storage.csvsafe import csv_bytes, neutralise_formulas
from profiler_core.storage.outputs import MANIFEST_FILE
from profiler_core.storage.results import RunResult, write_run_folder
from profiler_core.storage.runfolder import is_run_dir
from profiler_core.sweep.store import list_sweeps

SAMPLE_RUN_DIR = Path(__file__).resolve().parent / "sample_run"
# Further runs measured on an H200 and bundled, each showing a page the sample run cannot (the
# Shapes page: a run whose shapes change).
SAMPLE_RUNS_DIR = Path(__file__).resolve().parent / "sample_runs"
# Sweeps measured on an H200 and bundled, so the Sweep page has something to show without a GPU.
SAMPLE_SWEEPS_DIR = Path(__file__).resolve().parent / "sample_sweeps"
SAMPLE_SWEEP_PREFIX = "sample: "
RUNS_DIR_ENV = "PROFILER_RUNS_DIR"
DEFAULT_RUNS_DIR = "runs"

RUNS_ROOT_ENV = "PROFILER_RUNS_ROOT"  # where the runs folder may be (os.pathsep-separated)

MAX_UPLOAD_MB = 200
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 2**20
MAX_UNCOMPRESSED_BYTES = 2**30  # a whole run, unpacked
MAX_ZIP_MEMBERS = 500  # entries of a zip, folders included
# An uploaded run's tables are parsed into memory when it opens, so they are bounded together and
# line by line, not only each file: 100,000 timed steps per mode make a latency.csv of 400,000
# lines of about 60 bytes; an NVML table of 2,000,000 lines is 90 minutes of polling every 20 ms.
MAX_UPLOAD_TABLES_BYTES = 256 * 2**20  # all the CSV tables of an upload together, unpacked
MAX_TABLE_ROWS = 2_000_000  # lines of one CSV table, after its header
MAX_CSV_LINE_BYTES = 2**20  # one line of a CSV table (a kernel's full name is a few kB at most)
MAX_FOLDER_CHARS = 1024

# Files every run written by the tool has; the other tables are checked when present.
REQUIRED_FILES = (SUMMARY_FILE, "counters.csv", "latency.csv", "stats.csv")
_TABLE_OF_FILE = {file: (name, columns) for name, (file, columns) in TABLE_FILES.items()}
# The columns of a table that runs of an older schema wrote otherwise (``RunResult.load`` upgrades
# them): file -> (the first schema version with today's columns, the columns before it).
_OLDER_COLUMNS = {
    "breakdown.csv": (3, ["component", "eager_us", "graph_us", "saving_us", "share_of_saving_pct"]),
}


def default_runs_dir() -> str:
    """The runs folder: ``$PROFILER_RUNS_DIR`` if set, else ``runs`` under the working directory."""
    return os.environ.get(RUNS_DIR_ENV) or DEFAULT_RUNS_DIR


class FolderRefused(ProfilerError):
    """A runs folder typed in the sidebar that the dashboard will not use."""

    exit_code = 2


def allowed_roots() -> list[Path]:
    """Where a runs folder may be: ``$PROFILER_RUNS_ROOT`` (folders separated by the OS's path
    separator) or, when unset, the server's working directory; the default runs folder always."""
    env = os.environ.get(RUNS_ROOT_ENV, "")
    roots = [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()] or [Path.cwd()]
    roots.append(Path(default_runs_dir()).expanduser())
    resolved: list[Path] = []
    for root in roots:
        try:
            path = root.resolve()
        except (OSError, ValueError, RuntimeError):
            continue
        if path not in resolved:
            resolved.append(path)
    return resolved


def resolve_runs_folder(text: Any, roots: list[Path] | None = None) -> Path:
    """The runs folder typed in the sidebar as an absolute path, checked.

    Refused (``FolderRefused``, saying why and what is allowed): control characters, over
    ``MAX_FOLDER_CHARS``, a path that does not resolve, a file, or a folder outside every allowed
    root (``..``, links and ``~`` are resolved first, so none of them can step outside).
    """
    raw = str(text if text is not None else "").strip() or default_runs_dir()
    roots = allowed_roots() if roots is None else roots
    where = ", ".join(str(r) for r in roots)
    hint = (f"use a folder under {where}; to allow another place, start the server with "
            f"{RUNS_ROOT_ENV} set to it")
    if len(raw) > MAX_FOLDER_CHARS:
        raise FolderRefused(f"the runs folder name is {len(raw):,} characters long "
                            f"(at most {MAX_FOLDER_CHARS:,})", hint)
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
        raise FolderRefused("the runs folder name holds control characters", hint)
    try:
        path = Path(raw).expanduser().resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise FolderRefused(f"the runs folder {raw!r} cannot be used: {exc}", hint) from None
    if not any(path == root or path.is_relative_to(root) for root in roots):
        raise FolderRefused(f"the runs folder {path} is outside the allowed folders", hint)
    try:
        if path.exists() and not path.is_dir():
            raise FolderRefused(f"{path} is a file, not a folder", "pick a folder")
    except OSError as exc:
        raise FolderRefused(f"the runs folder {path} cannot be read: {exc}", hint) from None
    return path


def sample_run_available(path: Path | None = None) -> bool:
    return is_run_dir(path or SAMPLE_RUN_DIR)


def sample_runs(folder: Path | None = None) -> list[Path]:
    """The further bundled runs (``SAMPLE_RUNS_DIR``), by name."""
    folder = folder or SAMPLE_RUNS_DIR
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.iterdir() if is_run_dir(path))


# ----------------------------------------------------------------------------- loading


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
        self._tables = {name: _plain_table(_first_rows(name, frame))
                        for name, frame in self.result.tables.items()}

    @property
    def config(self) -> RunConfig:
        return self.result.config

    @property
    def environment(self) -> dict[str, Any]:
        return self.result.environment or {}

    @property
    def headline(self) -> dict[str, Any]:
        """The summary's headline without the values no figure or label can be (a JSON object, a
        list other than the engine's own short lists, a whole number too large for a float):
        those are not measured."""
        return {key: value for key, value in (self.result.headline or {}).items()
                if _headline_value(value, key)}

    @property
    def figures(self) -> Figures:
        """Every per-mode figure of the run, once (``RunResult.figures``)."""
        return self.result.figures

    @property
    def pair(self) -> Headline:
        """The article's pair, eager against the graph (``RunResult.pair``)."""
        return self.result.pair

    @property
    def notes(self) -> list[str]:
        return list(self.result.notes or [])

    @property
    def complete(self) -> bool:
        return bool(self.result.complete)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        return dict(self._tables)

    def table(self, name: str) -> pd.DataFrame:
        """A table of the run (empty with its columns when not measured), missing values plain:
        an empty cell of a text column is '', of an integer column NaN (see ``_plain_table``)."""
        frame = self._tables.get(name)
        return frame if frame is not None else self.result.table(name)

    @property
    def trace_paths(self) -> dict[str, Path | None]:
        return dict(self.result.trace_paths or {})

    @property
    def label(self) -> str:
        return run_label(self.name, self.environment, self.config)


# Headline keys the engine writes as lists (the modes timed; the prediction's calibration
# timings), as ``spec.headline`` declares them: kept when they are short lists of plain values.
_LIST_KEYS = tuple(name for name, kind in FACT_TYPES.items()
                   if getattr(kind, "__origin__", None) is list)
_MAX_LIST_ITEMS = 64


def _headline_value(value: Any, key: str = "") -> bool:
    if isinstance(value, list) and key in _LIST_KEYS:
        return len(value) <= _MAX_LIST_ITEMS and all(
            isinstance(item, (str, int, float)) and not isinstance(item, bool) and
            _headline_value(item) for item in value)
    if isinstance(value, (dict, list)):
        return False
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            return False
    return True


def _first_rows(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """stats.csv holds one row per mode and method; of rows repeating one (an edited file), the
    first is kept, as the views look each one up."""
    if name == "stats" and frame.duplicated(["mode", "method"]).any():
        return frame.drop_duplicates(["mode", "method"]).reset_index(drop=True)
    return frame


def _plain_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A loaded table whose missing cells cannot trip the views: pandas' NA in a text column
    becomes '' (so ``astype(str)`` and comparisons work) and an integer column holding NA becomes
    float with NaN (so ``float()`` works). Tables without missing cells are returned as they are."""
    if not frame.isna().to_numpy().any():
        return frame
    frame = frame.copy()
    for column in frame.columns:
        series = frame[column]
        if not series.isna().any():
            continue
        if pd.api.types.is_string_dtype(series) or series.dtype == object:
            frame[column] = series.astype("object").where(series.notna(), "").astype(series.dtype)
        elif pd.api.types.is_integer_dtype(series) and not pd.api.types.is_bool_dtype(series):
            frame[column] = pd.to_numeric(series, errors="coerce").astype(float)
    return frame


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
    except Exception as exc:  # whatever a damaged file raises, say so, never crash
        raise RunFormatError(f"{path.name} cannot be opened: {type(exc).__name__}: {str(exc)[:300]}",
                             "the run files are damaged or were edited by hand") from None
    return OpenedRun(path=path, source=source, result=result, name=name)


INCOMPLETE_NOTE = "incomplete:"  # how the engine's note on an interrupted run starts


def where_it_stopped(notes: list[str]) -> str:
    """From an incomplete run's notes: 'it stopped during timed trials: interrupted (...)'."""
    for note in notes:
        text = str(note).strip()
        if text.lower().startswith(INCOMPLETE_NOTE):
            text = text[len(INCOMPLETE_NOTE):].strip()
            return ("it " + text[len("the run "):]) if text.lower().startswith("the run ") else text
    return ""


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
        parts.append(f"{preset_label(config)} {config.dtype}")
    return " · ".join(p for p in parts if p)


RUN_LIST_COLUMNS = ["name", "started", "gpu", "preset", "dtype", "eager_ms", "graph_ms", "speedup",
                    "speedup_ci_low", "speedup_ci_high", "complete", "problem", "path"]


def run_list_row(item: dict[str, Any]) -> dict[str, Any]:
    """A run of ``profiler_core.storage.index.RunIndex.runs`` as a row of the runs list
    (``RUN_LIST_COLUMNS``); a point of a sweep is named ``sweep/point``. A folder whose name is
    not valid UTF-8 is listed (its bytes as U+FFFD) as one that cannot be opened here: neither
    pandas' text columns nor Streamlit take such a name."""
    row = {"name": item["folder"], "path": item["path"], "started": _when(item["started_at"]),
           "gpu": item["gpu"] or "", "preset": item["preset"] or "", "dtype": item["dtype"] or "",
           "eager_ms": item["eager_median_ms"], "graph_ms": item["graph_median_ms"],
           "speedup": item["speedup"], "speedup_ci_low": item["speedup_ci_low"],
           "speedup_ci_high": item["speedup_ci_high"], "complete": item["complete"],
           "problem": clean_text(item["problem"] or "")}
    if not_utf8(item["path"]):
        row.update(path=clean_text(item["path"]), complete=False,
                   problem=NOT_UTF8_PROBLEM)
    return row


NOT_UTF8_PROBLEM = ("the folder name is not valid UTF-8 (shown with U+FFFD); rename the folder "
                    "to open it in the dashboard")


def not_utf8(path: str) -> bool:
    """Whether ``path`` holds bytes that are not UTF-8 (``os.fsdecode``'s surrogate escapes)."""
    return clean_text(path) != path


def list_runs(folder: Path) -> pd.DataFrame:
    """Run folders directly under ``folder``, newest first, from the folder's run index
    (``profiler_core.storage.index``: rebuilt from the folders when missing, damaged or out of date, so
    only new or changed summaries are read). Every run's files are still checked here (links,
    sizes), and a run that cannot be read is listed with ``problem`` saying why, in
    :func:`runfolder.read_summary`'s words."""
    with run_index.open_index(Path(folder)) as index:
        indexed = index.runs(sweep_points=False)
    rows = []
    for item in indexed:
        child = Path(item["path"])
        row = run_list_row(item)
        if not_utf8(item["path"]):
            rows.append(row)
            continue
        try:
            runfolder.check_files(child)
            if item["problem"]:
                runfolder.read_summary(child)  # says what is wrong in the dashboard's words
        except ProfilerError as exc:
            row.update(problem=str(exc), started="", gpu="", preset="", dtype="", complete=False,
                       **{c: math.nan for c in ("eager_ms", "graph_ms", "speedup",
                                                "speedup_ci_low", "speedup_ci_high")})
        except Exception as exc:  # a damaged summary is listed, never a crash
            row["problem"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        row["problem"] = clean_text(row["problem"])
        rows.append(row)
    return pd.DataFrame(rows, columns=RUN_LIST_COLUMNS).reset_index(drop=True)


# ----------------------------------------------------------------------------- exporting


def table_csv_bytes(frame: pd.DataFrame) -> bytes:
    """A table as CSV (UTF-8, header row, no index) - what every download button serves.

    Written by ``profiler_core.storage.csvsafe``: a text cell that a spreadsheet would run as a formula
    (a kernel named ``=cmd|...``) gets a leading quote; numbers are untouched.
    """
    return csv_bytes(frame)


def run_files(path: Path) -> list[Path]:
    """The regular files of a run folder (no links, no subfolders), sorted by name."""
    files = []
    for child in sorted(Path(path).iterdir()):
        mode = child.lstat().st_mode
        if stat.S_ISREG(mode):
            files.append(child)
    return files


_ZIP_TIME = (2026, 1, 1, 0, 0, 0)


def run_zip_bytes(path: Path, root: str | None = None) -> bytes:
    """The whole run folder as one zip (files under ``root/``, the folder's name by default).

    Its tables are made safe to open in a spreadsheet like every CSV download
    (:func:`inert_table_bytes`); the zip still uploads again, with the same numbers.
    summary.json and the traces are copied as they are. The folder's manifest.json stays out:
    it lists that folder's files with their sizes, and a table made safe changes size.
    """
    path = Path(path)
    root = root or path.name
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for file in run_files(path):
            if file.name == MANIFEST_FILE:
                continue
            data = file.read_bytes()
            if file.name in _TABLE_OF_FILE:
                data = inert_table_bytes(data)
            # one fixed timestamp: the same run always zips to the same bytes
            info = zipfile.ZipInfo(f"{root}/{file.name}", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=6)
    return buffer.getvalue()


def inert_table_bytes(data: bytes) -> bytes:
    """A run's CSV table with no cell a spreadsheet would run as a formula: ``data`` itself when
    no cell needs it, else rewritten through ``profiler_core.storage.csvsafe``. Every cell is read as
    text, so numbers (a negative one too) are written back exactly as they were."""
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:  # an empty file: no cell at all
        return data
    return data if neutralise_formulas(frame).equals(frame) else csv_bytes(frame)


# ----------------------------------------------------------------------------- uploads


def _is_link(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _unsafe_name(name: str) -> bool:
    if name.startswith(("/", "\\")) or "\\" in name or ":" in name or "\x00" in name:
        return True
    return any(part in ("..", "") for part in name.rstrip("/").split("/"))


def _check_csv_table(file: str, stream: IO[bytes], version: int) -> None:
    """Read an uploaded table once, in chunks, and stop at the first problem
    (``tablelimits.check_table_stream``): its header must have the columns of schema ``version``,
    no line may pass MAX_CSV_LINE_BYTES, at most MAX_TABLE_ROWS lines may follow the header, and
    it holds no NUL byte. Said in an upload's words (the limits are an upload's, not a config's)."""
    try:
        tablelimits.check_table_stream(stream, file, MAX_TABLE_ROWS, MAX_CSV_LINE_BYTES,
                                       on_header=lambda header: _check_csv_header(file, header,
                                                                                  version))
    except tablelimits.LineTooLong:
        raise RunFormatError(f"{file} has a line longer than {MAX_CSV_LINE_BYTES // 1024:,} KiB, "
                             "the limit for a line of a table",
                             "a run's tables have short lines: the file is damaged or crafted") from None
    except tablelimits.TooManyRows:
        raise RunFormatError(f"{file} has more than {MAX_TABLE_ROWS:,} rows, the limit for a "
                             "table", "upload a run written by this tool; a longer run is "
                                      "opened from the runs folder") from None
    except tablelimits.TableNotText as refused:
        raise RunFormatError(refused.message, "upload a zip written by this tool") from None


def _columns_of(file: str, version: int) -> list[str]:
    """The columns ``file`` has in a run of schema ``version``."""
    since, older = _OLDER_COLUMNS.get(file, (0, []))
    return older if version < since else _TABLE_OF_FILE[file][1]


def _check_csv_header(file: str, data: bytes, version: int) -> None:
    columns = _columns_of(file, version)
    try:
        first_line = data.split(b"\n", 1)[0].decode("utf-8-sig").strip("\r")
    except UnicodeDecodeError:
        raise RunFormatError(f"{file} is not UTF-8 text", "upload a zip written by this tool") from None
    header = next(csv.reader([first_line]), [])
    later = set(LATER_COLUMNS.get(_TABLE_OF_FILE[file][0], ()))  # older runs lack these: empty
    missing = [c for c in columns if c not in header and c not in later]
    if missing:
        raise RunFormatError(f"{file} lacks the columns {', '.join(missing)}",
                             f"expected the columns: {', '.join(columns)}")


def validate_run_zip(data: bytes) -> dict[str, zipfile.ZipInfo]:
    """Check an uploaded zip without extracting it; returns file name -> member to extract.

    Checked: its size, member names (no path traversal, no links, no encryption, no
    duplicates), declared sizes (each file, the tables together, the whole run), the expected
    files, its summary (``runfolder.parse_summary``) and every table read once in chunks (its
    columns, its number of rows, the length of each line). Only known file names are ever
    extracted, so a name inside a zip never becomes a path. Raises ``RunFormatError`` with a
    message saying what is wrong and what was expected.
    """
    if len(data) > MAX_UPLOAD_BYTES:
        raise RunFormatError(f"the upload is {len(data) / 2**20:.0f} MB, over the "
                             f"{MAX_UPLOAD_MB} MB limit", "zip the run without its traces")
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError):
        raise RunFormatError("the upload is not a zip file",
                             "upload the zip that the dashboard's 'Download run (zip)' gives") from None
    with zf:
        entries = zf.infolist()
        if len(entries) > MAX_ZIP_MEMBERS:
            raise RunFormatError(f"the zip holds {len(entries):,} entries (at most {MAX_ZIP_MEMBERS})",
                                 "upload one run")
        for info in entries:
            if _unsafe_name(info.filename):
                raise RunFormatError(f"the zip holds an unsafe path: {info.filename!r}",
                                     "names must be relative, without '..'")
            if _is_link(info):
                raise RunFormatError(f"the zip holds a link: {info.filename!r}",
                                     "links are not accepted")
        infos = [i for i in entries if not i.is_dir()]
        summaries = [i for i in infos if PurePosixPath(i.filename).name == SUMMARY_FILE
                     and len(PurePosixPath(i.filename).parts) <= 2]
        if not summaries:
            raise RunFormatError(
                f"this zip is not a run from this tool: {SUMMARY_FILE} is missing",
                f"expected {', '.join(REQUIRED_FILES)} (at the top or in one folder)")
        if len(summaries) > 1:
            raise RunFormatError("the zip holds more than one run", "upload one run per zip")
        prefix = PurePosixPath(summaries[0].filename).parent
        members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            path = PurePosixPath(info.filename)
            if path.parent != prefix or path.name not in runfolder.KNOWN_FILES:
                continue
            if path.name in members:
                raise RunFormatError(f"the zip holds {path.name} twice", "upload one run per zip")
            if info.flag_bits & 0x1:
                raise RunFormatError(f"{path.name} in the zip is encrypted",
                                     "upload a zip without a password")
            limit = runfolder.size_limit(path.name)
            if info.file_size > limit:
                raise RunFormatError(f"{path.name} unpacks to {info.file_size / 2**20:,.0f} MiB "
                                     f"(at most {limit / 2**20:,.0f} MiB)",
                                     "the zip is damaged or crafted (a zip bomb?)")
            members[path.name] = info
        missing = [f for f in REQUIRED_FILES if f not in members]
        if missing:
            raise RunFormatError(f"the run in this zip lacks {', '.join(missing)}",
                                 f"expected {', '.join(REQUIRED_FILES)}")
        total = sum(i.file_size for i in members.values())
        if total > MAX_UNCOMPRESSED_BYTES:
            raise RunFormatError(f"the run unpacks to {total / 2**30:.1f} GiB "
                                 f"(at most {MAX_UNCOMPRESSED_BYTES / 2**30:.0f} GiB)",
                                 "the zip is damaged or crafted (a zip bomb?)")
        tables = sum(i.file_size for f, i in members.items() if f in _TABLE_OF_FILE)
        if tables > MAX_UPLOAD_TABLES_BYTES:
            raise RunFormatError(f"the run's tables unpack to {tables / 2**20:,.0f} MiB together "
                                 f"(at most {MAX_UPLOAD_TABLES_BYTES / 2**20:,.0f} MiB)",
                                 "the zip is damaged or crafted (a zip bomb?)")
        try:
            summary = runfolder.parse_summary(zf.read(members[SUMMARY_FILE]))
            for file, info in members.items():
                if file in _TABLE_OF_FILE:
                    with zf.open(info) as handle:
                        _check_csv_table(file, handle, summary.version)
        except RunFormatError:
            raise
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError,
                RuntimeError, ValueError) as exc:
            raise RunFormatError(f"the zip cannot be read: {exc}", "the zip is damaged") from None
    return members


def extract_run_zip(data: bytes, dest: Path) -> Path:
    """Validate ``data`` and write its run files into the new folder ``dest``, through the run
    writer (``results.write_run_folder``): a staging folder, the manifest (sizes and content
    hashes), then a rename, so an uploaded run is this tool's own by the rule any run is.

    Only the known file names are written, in chunks, stopping at each file's declared size and
    at the total limit (a zip's declared sizes can lie). ``dest`` must not exist; on any error
    nothing of it is left.
    """
    members = validate_run_zip(data)
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(dest):
            raise FileExistsError(f"{dest} already exists")
    except OSError as exc:
        raise RunFormatError(f"cannot unpack the upload into {dest}: {exc}", "") from None
    try:
        return write_run_folder(dest, lambda folder: _unpack_members(data, members, folder))
    except RunFormatError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, RuntimeError, NotImplementedError,
            ValueError) as exc:
        raise RunFormatError(f"the zip cannot be unpacked: {exc}", "the zip is damaged") from None


def _unpack_members(data: bytes, members: dict[str, zipfile.ZipInfo], folder: Path) -> list[str]:
    """Write each validated member of the zip into ``folder`` under its own name, in chunks,
    refusing more bytes than the member declared or than a run may unpack to; returns the
    names written."""
    written = 0
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for file, info in members.items():
            file_written = 0
            with zf.open(info) as source, open(folder / file, "xb") as target:
                while chunk := source.read(1 << 20):
                    written += len(chunk)
                    file_written += len(chunk)
                    if written > MAX_UNCOMPRESSED_BYTES or file_written > info.file_size:
                        raise RunFormatError("the run unpacks to more than its declared size",
                                             "the zip is damaged or crafted (a zip bomb?)")
                    target.write(chunk)
    return list(members)


def unpack_run(data: bytes, dest: Path, name: str = "") -> OpenedRun:
    """Validate, unpack into ``dest`` and open an uploaded run; ``dest`` is removed on any error,
    so a refused upload leaves nothing behind."""
    dest = extract_run_zip(data, dest)
    try:
        return open_run(dest, "upload", name=name)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def sweeps_with_samples(listed: pd.DataFrame, samples_dir: Path | None = None) -> pd.DataFrame:
    """The runs folder's sweeps (``store.list_sweeps``), then the bundled sample sweeps, each
    named ``sample: <name>`` (so it cannot clash with a folder of the user's)."""
    samples = list_sweeps(samples_dir or SAMPLE_SWEEPS_DIR)
    if samples.empty:
        return listed
    samples = samples.assign(name=SAMPLE_SWEEP_PREFIX + samples["name"].astype(str))
    return pd.concat([listed, samples], ignore_index=True) if len(listed) else samples
