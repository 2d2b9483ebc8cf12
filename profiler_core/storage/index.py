"""The run index: an embedded SQLite database in a runs folder listing every run and sweep in it.

Scope: ``<runs folder>/.profiler_index.sqlite`` records, per run folder (``name`` or
``sweep/point-000``), its config (one row per field, so any field can be filtered), environment
(GPU, torch, CUDA, driver), headline figures (eager and graph medians, speedup and its CI, every
other numeric headline key, and metrics.csv's figures of the other modes as ``<mode>_<metric>``),
when it started, whether it is complete or unreadable and which
tables it holds; per sweep, its ``sweep.json`` and the rows of ``points.csv``. The folders stay the
truth: on every open the folder is scanned cheaply (folder names and the ``stat`` of each
summary.json, sweep.json and points.csv) and the index is brought up to date. A missing or damaged
index of ours (not readable as SQLite, another schema version, truncated) is rebuilt into a
temporary file of the same folder and renamed over it; nothing else is ever written or removed. A
file at the index's path that is not recognisably ours (no SQLite header carrying our application
id) is left exactly as it is, and the runs are read into an index in memory, with a note saying
why; so are read-only folders and an index another process holds locked. Writers use SQLite
transactions with a busy timeout. Standard library only (sqlite3); never imports the dashboard.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import io
import json
import logging
import math
import os
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from profiler_core.spec import schema
from profiler_core.spec.config import RunConfig, preset_label
from profiler_core.spec.errors import ConfigError, quoted, shown
from profiler_core.spec.modes import ALWAYS_MEASURED, MODE_NAMES
from profiler_core.spec.schema import clean_text

INDEX_FILE = ".profiler_index.sqlite"
INDEX_SCHEMA_VERSION = 4  # PRAGMA user_version of an index this code reads (4: preset is the
#                           run's label, custom when its values differ from the preset it names)
APPLICATION_ID = 0x43475049  # "CGPI": PRAGMA application_id, how a file is recognised as ours
INDEX_MARKER = "profiler_core run index"  # meta.tool
SWEEP_FILE, POINTS_FILE = "sweep.json", "points.csv"
BUSY_TIMEOUT_S = 2.0  # how long a reader or writer waits for another writer
RECORD_TIMEOUT_S = 0.5  # a save waits at most this long to record its run (then leaves it)
MAX_SUMMARY_BYTES = 16 * 2**20  # the dashboard's limit too
MAX_SWEEP_FILE_BYTES = 16 * 2**20
MAX_METRICS_BYTES = 4 * 2**20  # metrics.csv of a run (ours are a few kilobytes)
_SQLITE_HEADER = b"SQLite format 3\x00"
_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
HEADLINE_COLUMNS = ("eager_median_ms", "graph_median_ms", "speedup", "speedup_ci_low",
                    "speedup_ci_high")
# Headline figures a filter may name even when no run in the folder has a value for them (a
# folder of CPU runs has no speedup; one whose graphs never pay back has no break-even): the
# filter then matches nothing instead of being refused.
ALWAYS_FILTERABLE = (*HEADLINE_COLUMNS, "break_even_iters", "graph_pays_back")
# Columns of a run that can be filtered besides its config fields and headline keys.
RUN_COLUMNS = {"gpu": "gpu", "gpu_name": "gpu_name", "device_type": "device_type",
               "torch_version": "torch_version", "cuda_version": "cuda_version",
               "driver_version": "driver_version", "sweep": "sweep", "name": "name",
               "complete": "complete"}
DATE_FIELD = "date"
# Headline figures a run of this tool may hold besides HEADLINE_COLUMNS (a CUDA run holds most; a
# CPU run, which times the eager step only, holds no graph figure and no speedup). A filter on one
# that no run here has matches no run; it is not an error. A name that is neither one of these,
# nor a setting, a run column or a key some indexed run has, is refused with the closest names.
FIGURE_NAMES = ("cold_eager_median_ms", "cold_graph_median_ms", "cold_speedup", "article_eager_ms",
                "article_graph_ms", "article_speedup", "block_eager_ms", "block_graph_ms",
                "block_speedup", "warmup_ms", "capture_ms", "break_even_iters", "counters_match",
                "nvml_available", "parity_max_abs_diff", "parity_max_rel_diff", "parity_steps",
                "between_coverage_pct", "graph_pays_back")
# ... and every per-mode figure (``<mode>_...``), the prediction's and the repeats' figures.
FIGURE_PREFIXES = (*(f"{mode}_" for mode in MODE_NAMES), "prediction_", "predicted_",
                   "capture_twin_")
MAX_FILTERS = 32  # --where options in one query
MAX_FILTER_VALUES = 1000  # values one --where may list (field=V1,V2,...)
MAX_PLAN_CHARS = 100_000  # a sweep's plan as JSON; a longer one is not kept in the index

log = logging.getLogger(__name__)

_SCHEMA_SQL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE runs (
    path TEXT PRIMARY KEY,  -- relative to the runs folder: 'seed' or 'sweep-a/point-000'
    name TEXT NOT NULL, sweep TEXT NOT NULL, stamp TEXT NOT NULL, mtime_ns INTEGER,
    problem TEXT NOT NULL, complete INTEGER NOT NULL,
    started_at TEXT, finished_at TEXT, gpu TEXT, gpu_name TEXT, device_type TEXT,
    torch_version TEXT, cuda_version TEXT, driver_version TEXT,
    eager_median_ms REAL, graph_median_ms REAL, speedup REAL, speedup_ci_low REAL,
    speedup_ci_high REAL, tables TEXT NOT NULL,
    config_json TEXT NOT NULL, headline_json TEXT NOT NULL);  -- the whole config and headline
CREATE TABLE run_config (path TEXT NOT NULL, field TEXT NOT NULL, text_value TEXT,
                         num_value REAL, json_value TEXT NOT NULL, PRIMARY KEY (path, field));
CREATE TABLE run_headline (path TEXT NOT NULL, key TEXT NOT NULL, value REAL NOT NULL,
                           PRIMARY KEY (path, key));
CREATE TABLE sweeps (name TEXT PRIMARY KEY, stamp TEXT NOT NULL, problem TEXT NOT NULL,
                     status TEXT, plan TEXT, points INTEGER, measured INTEGER);
CREATE TABLE sweep_points (sweep TEXT NOT NULL, idx INTEGER NOT NULL, status TEXT, run TEXT,
                           row_json TEXT NOT NULL, PRIMARY KEY (sweep, idx));
CREATE INDEX run_config_by_field ON run_config (field, num_value, text_value);
"""


@dataclass(frozen=True)
class FieldFilter:
    """Runs whose ``field`` is one of ``values`` (any of them) and within ``low``..``high``
    (numbers, inclusive; either end open). ``field`` is a RunConfig field, a headline key, one of
    ``RUN_COLUMNS`` or ``date`` (``low``/``high`` as ISO dates, compared by day)."""

    field: str
    values: tuple[Any, ...] = ()
    low: Any = None
    high: Any = None


class IndexUnavailable(Exception):
    """The index file cannot be used this time (locked, damaged, not ours, not writable)."""


# ----------------------------------------------------------------------------- reading folders


def _stamp(*files: Path) -> str:
    """What changes when a file is replaced or rewritten: inode, size and mtime of each."""
    parts = []
    for file in files:
        try:
            info = os.stat(file)
            parts.append(f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}")
        except OSError:
            parts.append("-")
    return "|".join(parts)


def _is_run_dir(path: Path) -> bool:
    try:
        return path.is_dir() and (path / schema.SUMMARY_FILE).is_file()
    except OSError:
        return False


def _is_sweep_dir(path: Path) -> bool:
    try:
        return (not path.is_symlink() and path.is_dir() and not (path / schema.SUMMARY_FILE).exists()
                and (path / SWEEP_FILE).is_file())
    except OSError:
        return False


def _folders(folder: Path) -> list[tuple[str, bool]]:
    """(name, is a link) of the folders in ``folder`` (links to folders too), by name; names
    starting with '.' (the index, a run being saved) are left out."""
    try:
        with os.scandir(folder) as entries:
            found = []
            for entry in entries:
                try:
                    if not entry.name.startswith(".") and entry.is_dir():
                        found.append((entry.name, entry.is_symlink()))
                except OSError:
                    continue
    except OSError:
        return []
    return sorted(found)


def _summary_stamp(path: Path) -> str | None:
    """The stamp of ``path``'s summary.json when it is a regular file (following links, as the
    dashboard's listing does), else None: not a run folder."""
    try:
        info = os.stat(path / schema.SUMMARY_FILE)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"


def scan(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(run path -> stamp, sweep name -> stamp) for what is in ``folder`` now (stats only)."""
    runs: dict[str, str] = {}
    sweeps: dict[str, str] = {}
    for name, link in _folders(folder):
        stamp = _summary_stamp(folder / name)
        if stamp is not None:
            runs[name] = ("L" if link else "") + stamp
        elif not link and _is_sweep_dir(folder / name):
            sweeps[name] = _stamp(folder / name / SWEEP_FILE, folder / name / POINTS_FILE)
            for point, point_link in _folders(folder / name):
                point_stamp = _summary_stamp(folder / name / point)
                if point_stamp is not None and not point_link:
                    runs[f"{name}/{point}"] = point_stamp
    return runs, sweeps


def _read_json(path: Path, limit: int) -> Any:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise ValueError(f"{path.name} is a link; links are not followed")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path.name} is not a regular file")
    if info.st_size > limit:
        raise ValueError(f"{path.name} is over {limit // 2**20} MiB")
    return json.loads(path.read_text(encoding="utf-8"))


def _number(value: Any) -> float | None:
    """A finite float, or None (text, booleans, infinities, NaN, numbers too large)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else clean_text(str(value)[:500])


def _key(path: str) -> str:
    """A folder path as the index stores it: the path itself, or, when it holds a lone surrogate
    (SQLite takes only UTF-8), '/' and the hex of its bytes (a relative path never starts with
    '/', so the two kinds cannot meet). :func:`_path_of` turns it back."""
    if clean_text(path) == path:
        return path
    return "/" + path.encode("utf-8", "surrogatepass").hex()


def _path_of(key: str) -> str:
    """The folder path a stored key names (:func:`_key`'s inverse)."""
    if key.startswith("/"):
        return bytes.fromhex(key[1:]).decode("utf-8", "surrogatepass")
    return key


def read_run(folder: Path, relative: str) -> dict[str, Any]:
    """One run folder as index rows: ``run`` (the runs table), ``config`` and ``headline``. An
    unreadable run gets ``problem`` (one line) and empty config and headline."""
    path = folder / relative
    name = relative.rsplit("/", 1)[-1]
    run: dict[str, Any] = {"path": relative, "name": clean_text(name),
                           "sweep": clean_text(relative.rsplit("/", 1)[0]) if "/" in relative
                           else "", "problem": "", "complete": 0, "tables": ""}
    for key in ("started_at", "finished_at", "gpu", "gpu_name", "device_type", "torch_version",
                "cuda_version", "driver_version", *HEADLINE_COLUMNS):
        run[key] = None
    try:
        run["mtime_ns"] = os.stat(path / schema.SUMMARY_FILE).st_mtime_ns
    except OSError:
        run["mtime_ns"] = 0
    config_rows: dict[str, Any] = {}
    headline_rows: dict[str, float] = {}
    try:
        if path.is_symlink():
            raise ValueError(f"{name} is a link; links are not followed")
        summary = _read_json(path / schema.SUMMARY_FILE, MAX_SUMMARY_BYTES)
        if not isinstance(summary, dict):
            raise ValueError(f"{schema.SUMMARY_FILE} does not hold a JSON object")
        version = summary.get("schema_version")
        if (isinstance(version, bool) or not isinstance(version, int)
                or version not in schema.READABLE_SCHEMA_VERSIONS):
            raise ValueError(f"{schema.SUMMARY_FILE} has schema_version {quoted(version)}")
        if not isinstance(summary.get("config"), dict):
            raise ValueError(f"{schema.SUMMARY_FILE} has no config")
        recorded = RunConfig.from_dict(summary["config"])
        config = {**recorded.to_dict(), "preset": preset_label(recorded)}  # the run's one label
        env = summary.get("environment") if isinstance(summary.get("environment"), dict) else {}
        headline = summary.get("headline") if isinstance(summary.get("headline"), dict) else {}
    except ConfigError as error:
        run["problem"] = clean_text(f"{schema.SUMMARY_FILE} holds an invalid config: {error}"[:500])
    except Exception as error:  # noqa: BLE001 - whatever a damaged file raises, list it, never crash
        run["problem"] = clean_text(f"{type(error).__name__}: {error}"[:500])
    else:
        run["complete"] = int(summary.get("complete") is True)
        for key in ("started_at", "finished_at", "gpu_name", "device_type", "torch_version",
                    "cuda_version", "driver_version"):
            run[key] = _text(env.get(key))
        run["gpu"] = run["gpu_name"] or ("CPU" if config["device"] == "cpu" else None)
        for key, value in headline.items():
            number = _number(value)
            if number is not None and isinstance(key, str):
                headline_rows[clean_text(key[:200])] = number
        for key, value in _other_modes_figures(path).items():
            headline_rows.setdefault(key, value)
        for key in HEADLINE_COLUMNS:
            run[key] = headline_rows.get(key)
        config_rows = config
        run["tables"] = ",".join(file for file, _ in schema.TABLE_FILES.values()
                                 if (path / file).is_file())
    run["config_json"] = json.dumps(config_rows)
    run["headline_json"] = json.dumps(headline_rows)
    return {"run": run, "config": config_rows, "headline": headline_rows}


def _other_modes_figures(path: Path) -> dict[str, float]:
    """The figures of modes beside eager and the graph (metrics.csv), as ``<mode>_<metric>``
    headline keys, so that any mode's figure can be filtered on (eager's and the graph's are in
    the summary's headline already). A missing or unreadable metrics.csv gives none."""
    file = path / schema.TABLE_FILES["metrics"][0]
    try:
        info = os.lstat(file)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_METRICS_BYTES:
            return {}
        with open(file, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error):
        return {}
    figures = {}
    for row in rows:
        mode, metric = row.get("mode"), row.get("metric")
        if not mode or not metric or mode in ALWAYS_MEASURED:
            continue
        try:
            number = _number(float(row.get("value") or "nan"))
        except ValueError:
            continue
        if number is not None:
            figures[clean_text(f"{mode}_{metric}"[:200])] = number
    return figures


def _config_row(relative: str, field: str, value: Any) -> tuple:
    if isinstance(value, (list, tuple)):
        text, number = clean_text(",".join(str(v) for v in value)), None
    elif isinstance(value, bool):
        text, number = ("true" if value else "false"), float(value)
    else:
        text, number = _text(value), _number(value)
    return relative, field, text, number, json.dumps(value)


def read_sweep(folder: Path, name: str) -> dict[str, Any]:
    """A sweep folder as index rows: ``sweep`` and its ``points`` (from points.csv)."""
    path = folder / name
    sweep = {"name": name, "problem": "", "status": None, "plan": None, "points": 0, "measured": 0}
    points: list[tuple] = []
    try:
        content = _read_json(path / SWEEP_FILE, MAX_SWEEP_FILE_BYTES)
        if not (isinstance(content, dict) and content.get("tool") == "profiler_core"
                and content.get("kind") == "sweep"):
            raise ValueError(f"{SWEEP_FILE} is not a sweep of this tool")
        sweep["status"] = _text(content.get("status"))
        plan = json.dumps(content.get("plan"))
        sweep["plan"] = plan if len(plan) <= MAX_PLAN_CHARS else None  # never cut, then parsed
        if os.path.lexists(path / POINTS_FILE):
            info = os.lstat(path / POINTS_FILE)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SWEEP_FILE_BYTES:
                raise ValueError(f"{POINTS_FILE} is not a regular file of a sweep")
            reader = csv.DictReader(io.StringIO((path / POINTS_FILE).read_text(encoding="utf-8")))
            for number, row in enumerate(reader):
                index = _row_index(row.get("index"), number)
                run = next((row[k] for k in ("run", "run_dir", "folder", "run_folder")
                            if row.get(k)), None)
                points.append((name, index, _text(row.get("status")), _text(run),
                               json.dumps(row)))
    except (OSError, ValueError, TypeError, RecursionError, UnicodeDecodeError, csv.Error) as error:
        sweep["problem"] = clean_text(f"{type(error).__name__}: {error}"[:500])
    sweep["points"] = len(points)
    sweep["measured"] = sum(1 for p in points if p[3] and _is_run_dir(path / p[3]))
    return {"sweep": sweep, "points": points}


def _row_index(text: Any, number: int) -> int:
    """A points.csv row's index: its ``index`` column when that is a whole number SQLite can
    hold (under 2**63), else the row's number."""
    text = str(text or "").strip()
    if text.isdecimal() and len(text) <= 18:
        return int(text)
    return number


# ----------------------------------------------------------------------------- the database


def _connect(path: str, timeout_s: float, read_only: bool = False) -> sqlite3.Connection:
    target = f"file:{Path(path).as_posix()}?mode=ro" if read_only else path
    connection = sqlite3.connect(target, timeout=timeout_s, isolation_level=None,
                                 uri=read_only, check_same_thread=False)
    connection.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
    return connection


def _create_schema(connection: sqlite3.Connection) -> None:
    connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    connection.execute(f"PRAGMA user_version = {INDEX_SCHEMA_VERSION}")
    connection.executescript(_SCHEMA_SQL)
    connection.execute("INSERT INTO meta VALUES ('tool', ?)", (INDEX_MARKER,))


def inspect_file(path: Path) -> str:
    """'missing', 'ours' (a regular file whose SQLite header carries our application id: ours
    even if damaged further on) or 'foreign' (anything else: never rebuilt nor removed)."""
    return _kind(_header(path))


def _kind(header: bytes | None) -> str:
    """inspect_file's answer for a file's first bytes (``_header``)."""
    if header is None:
        return "missing"
    ours = (header[:16] == _SQLITE_HEADER and len(header) >= 72
            and int.from_bytes(header[68:72], "big") == APPLICATION_ID)
    return "ours" if ours else "foreign"


def _header(path: Path) -> bytes | None:
    """The first 100 bytes of the file at ``path`` (SQLite's header); None when nothing is there,
    b"" when what is there is not a regular file or cannot be read."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return b""
    if not stat.S_ISREG(info.st_mode):
        return b""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(descriptor, "rb") as handle:
            return handle.read(100)
    except OSError:
        return b""


def needs_build(folder: str | os.PathLike) -> bool:
    """Whether opening ``folder``'s index now would read every run in it: the folder holds an
    index of ours of another version, or none at all. Cheap (no folder scan; one header read);
    a damaged index is only found on opening."""
    header = _header(Path(folder) / INDEX_FILE)
    kind = _kind(header)
    if kind == "missing":
        return Path(folder).is_dir()
    # Bytes 60-63 of SQLite's header hold the user_version (the index's schema version).
    return kind == "ours" and int.from_bytes(header[60:64], "big") != INDEX_SCHEMA_VERSION


# Index files this process found whole, by path: (inode, size, mtime) when checked. A file not
# changed since is not read through again (the check reads every page).
_checked: dict[str, str] = {}


def _check_ours(connection: sqlite3.Connection, path: Path) -> None:
    """Raise ``sqlite3.DatabaseError`` unless the open file is a whole index of this version."""
    if connection.execute("PRAGMA user_version").fetchone()[0] != INDEX_SCHEMA_VERSION:
        raise sqlite3.DatabaseError("another schema version")
    marker = connection.execute("SELECT value FROM meta WHERE key = 'tool'").fetchone()
    if marker != (INDEX_MARKER,):
        raise sqlite3.DatabaseError("no marker")
    stamp = _stamp(path)
    if _checked.get(str(path)) == stamp:
        return
    check = connection.execute("PRAGMA quick_check").fetchall()
    if check != [("ok",)]:
        raise sqlite3.DatabaseError("damaged: " + str(check[:1]))
    _checked[str(path)] = stamp


def _is_locked(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def _put_run(connection: sqlite3.Connection, rows: dict[str, Any], stamp: str) -> None:
    """Write one run's rows (``read_run``); its path is stored as its key (:func:`_key`)."""
    run = dict(rows["run"], stamp=stamp)
    _delete_runs(connection, [run["path"]])
    key = run["path"] = _key(run["path"])
    columns = ", ".join(run)
    connection.execute(f"INSERT INTO runs ({columns}) VALUES ({', '.join('?' * len(run))})",
                       list(run.values()))
    connection.executemany("INSERT INTO run_config VALUES (?, ?, ?, ?, ?)",
                           [_config_row(key, f, v) for f, v in rows["config"].items()])
    connection.executemany("INSERT INTO run_headline VALUES (?, ?, ?)",
                           [(key, k, v) for k, v in rows["headline"].items()])


def _delete_runs(connection: sqlite3.Connection, paths: Iterable[str]) -> None:
    keys = [(_key(p),) for p in paths]
    for table in ("runs", "run_config", "run_headline"):
        connection.executemany(f"DELETE FROM {table} WHERE path = ?", keys)


def _put_sweep(connection: sqlite3.Connection, rows: dict[str, Any], stamp: str) -> None:
    """Write one sweep's rows (``read_sweep``); its name is stored as its key (:func:`_key`)."""
    sweep = dict(rows["sweep"], stamp=stamp)
    _delete_sweeps(connection, [sweep["name"]])
    sweep["name"] = _key(sweep["name"])
    connection.execute(f"INSERT INTO sweeps ({', '.join(sweep)}) VALUES "
                       f"({', '.join('?' * len(sweep))})", list(sweep.values()))
    connection.executemany("INSERT OR REPLACE INTO sweep_points VALUES (?, ?, ?, ?, ?)",
                           [(sweep["name"], *point[1:]) for point in rows["points"]])


def _delete_sweeps(connection: sqlite3.Connection, names: Iterable[str]) -> None:
    keys = [(_key(n),) for n in names]
    for table, column in (("sweeps", "name"), ("sweep_points", "sweep")):
        connection.executemany(f"DELETE FROM {table} WHERE {column} = ?", keys)


def _stale(connection: sqlite3.Connection, found: tuple[dict[str, str], dict[str, str]]
           ) -> tuple[list[str], list[str], list[str], list[str]]:
    """(runs to read, runs to drop, sweeps to read, sweeps to drop) against what was found."""
    runs, sweeps = found
    stored_runs = {_path_of(p): s for p, s in connection.execute("SELECT path, stamp FROM runs")}
    stored_sweeps = {_path_of(n): s for n, s in connection.execute("SELECT name, stamp FROM sweeps")}
    return ([p for p, s in runs.items() if stored_runs.get(p) != s],
            [p for p in stored_runs if p not in runs],
            [n for n, s in sweeps.items() if stored_sweeps.get(n) != s],
            [n for n in stored_sweeps if n not in sweeps])


def _sync(connection: sqlite3.Connection, folder: Path,
          found: tuple[dict[str, str], dict[str, str]],
          progress: Callable[[int, int], None] | None = None) -> int:
    """Bring the index up to date with the folder: the new and changed folders are read first,
    then written in one short transaction. Returns the number of folders read."""
    read_runs, drop_runs, read_sweeps, drop_sweeps = _stale(connection, found)
    if not (read_runs or drop_runs or read_sweeps or drop_sweeps):
        return 0
    runs, sweeps = found
    total = len(read_runs) + len(read_sweeps)
    run_rows, sweep_rows = [], []
    for relative in read_runs:
        run_rows.append((read_run(folder, relative), runs[relative]))
        if progress is not None:
            progress(len(run_rows), total)
    for name in read_sweeps:
        sweep_rows.append((read_sweep(folder, name), sweeps[name]))
        if progress is not None:
            progress(len(run_rows) + len(sweep_rows), total)
    connection.execute("BEGIN IMMEDIATE")
    try:
        _delete_runs(connection, drop_runs)
        _delete_sweeps(connection, drop_sweeps)
        for rows, stamp in run_rows:
            _put_run(connection, rows, stamp)
        for rows, stamp in sweep_rows:
            _put_sweep(connection, rows, stamp)
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return total


class RunIndex:
    """An open index of one runs folder: on disk (``persistent``) or in memory, with ``note``
    saying why it is in memory (empty when all is well). Use as a context manager."""

    def __init__(self, folder: Path, connection: sqlite3.Connection, persistent: bool,
                 note: str = "") -> None:
        self.folder = folder
        self.connection = connection
        self.persistent = persistent
        self.note = note

    def __enter__(self) -> RunIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.connection.close()

    def _query(self, sql: str, args: Sequence[Any] = ()) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of one read. Another process's rebuild may have renamed a new
        index over the file this connection opened (SQLite then reports a disk I/O error, or a
        journal it cannot match): the file at the path is whole and up to date, so the read is
        tried once more on a fresh connection to it."""
        try:
            return self._read(sql, args)
        except sqlite3.DatabaseError:
            if not self.persistent:
                raise
            self.connection.close()
            self.connection = _connect(str(self.folder / INDEX_FILE), BUSY_TIMEOUT_S)
            return self._read(sql, args)

    def _read(self, sql: str, args: Sequence[Any]) -> tuple[list[str], list[tuple]]:
        cursor = self.connection.execute(sql, args)
        return [d[0] for d in cursor.description], cursor.fetchall()

    def _column(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        return [row[0] for row in self._query(sql, args)[1]]

    # ------------------------------------------------------------------ queries

    def fields(self) -> list[str]:
        """Every field a filter may name: config fields, run columns, ``date``, headline keys."""
        keys = self._column("SELECT DISTINCT key FROM run_headline ORDER BY key")
        return list(dict.fromkeys([*_FIELDS, *RUN_COLUMNS, DATE_FIELD, *ALWAYS_FILTERABLE, *keys]))

    def field_values(self, field: str) -> list[Any]:
        """The distinct values ``field`` has across the readable runs, sorted (None last)."""
        self._check_field(field)
        if field in _FIELDS:
            values = [json.loads(v) for v in self._column(
                "SELECT DISTINCT json_value FROM run_config WHERE field = ?", (field,))]
            values = [tuple(v) if isinstance(v, list) else v for v in values]
        elif field in RUN_COLUMNS:
            values = self._column(f"SELECT DISTINCT {RUN_COLUMNS[field]} FROM runs WHERE problem = ''")
            values = [bool(v) for v in values] if field == "complete" else values
        elif field == DATE_FIELD:
            values = [v for v in self._column(
                "SELECT DISTINCT substr(started_at, 1, 10) FROM runs WHERE started_at IS NOT NULL")
                if _is_day(v)]
        else:
            values = self._column("SELECT DISTINCT value FROM run_headline WHERE key = ?", (field,))
        present = list(dict.fromkeys(v for v in values if v is not None))
        try:
            present.sort()
        except TypeError:
            present.sort(key=str)
        return present + ([None] if None in values else [])

    def _check_field(self, field: str) -> None:
        """A field a filter may name: one some run here has, or a figure a run of this tool may
        hold (``is_figure``); anything else is refused, with the closest known names."""
        fields = self.fields()
        if field in fields or is_figure(field):
            return
        close = difflib.get_close_matches(field, list(dict.fromkeys([*fields, *HEADLINE_COLUMNS,
                                                               *FIGURE_NAMES])), n=3, cutoff=0.6)
        hint = (f"did you mean {' or '.join(close)}? " if close else "") + \
            ("use a run setting (" + ", ".join(list(_FIELDS)[:6])
             + ", ...), gpu, date, or a headline figure such as speedup")
        raise ConfigError("where", f"there is no field {quoted(field)} to filter on", hint)

    def absent_figures(self, filters: Sequence[FieldFilter]) -> list[str]:
        """The figures ``filters`` name that no run here has a value for (a filter on one matches
        none): headline figures only, not settings or run columns."""
        present = set(self._column("SELECT DISTINCT key FROM run_headline"))
        settings = {*_FIELDS, *RUN_COLUMNS, DATE_FIELD}
        return list(dict.fromkeys(f.field for f in filters
                                  if f.field not in settings and f.field not in present))

    def _condition(self, spec: FieldFilter) -> tuple[str, list[Any]]:
        field = spec.field
        self._check_field(field)
        spec = dataclasses.replace(spec, values=tuple(
            clean_text(v) if isinstance(v, str) else v for v in spec.values))
        if field == DATE_FIELD:
            clauses, args = ["started_at IS NOT NULL"], []
            for bound, op in ((spec.low, ">="), (spec.high, "<=")):
                if bound is not None:
                    clauses.append(f"substr(started_at, 1, 10) {op} ?")
                    args.append(_day(bound))
            if spec.values:
                clauses.append(f"substr(started_at, 1, 10) IN ({', '.join('?' * len(spec.values))})")
                args += [_day(v) for v in spec.values]
            return " AND ".join(clauses), args
        if field in RUN_COLUMNS:
            column = RUN_COLUMNS[field]
            clauses, args = [], []
            if spec.values:
                wanted = [_truth(v) if field == "complete" else (None if v is None else
                                                                  clean_text(str(v)))
                          for v in spec.values]
                clauses.append(f"({column} IN ({', '.join('?' * len(wanted))})"
                               + (f" OR {column} IS NULL)" if None in wanted else ")"))
                args += wanted
            return " AND ".join(clauses) or "1", args
        if field in _FIELDS:
            table, key, text, number = "run_config", "field", "text_value", "num_value"
        else:
            table, key, text, number = "run_headline", "key", "NULL", "value"
        clauses, args = [], []
        if spec.values:
            # One IN list per column (an OR per value would nest past SQLite's expression depth).
            texts: dict[str, None] = {}
            numbers: dict[float, None] = {}
            either = []
            for value in spec.values:
                if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
                    either[:1] = [f"({number} IS NULL AND {text} IS NULL)"]
                    continue
                as_text = _config_row("", field, value)[2]
                numeric = _number(value) if not isinstance(value, str) else _parse_number(value)
                if text != "NULL" and as_text is not None:
                    texts[as_text] = None
                if numeric is not None:
                    numbers[numeric] = None
            for column, wanted in ((text, texts), (number, numbers)):
                if wanted:
                    either.append(f"{column} IN ({', '.join('?' * len(wanted))})")
                    args += list(wanted)
            clauses.append("(" + (" OR ".join(either) or "0") + ")")
        for bound, op in ((spec.low, ">="), (spec.high, "<=")):
            if bound is not None:
                numeric = _number(bound) if not isinstance(bound, str) else _parse_number(bound)
                if numeric is None:
                    raise ConfigError("where", f"{shown(field)}: {quoted(bound)} is not a number",
                                      f"write a range as {shown(field)}=LOW..HIGH with numbers")
                clauses.append(f"{number} {op} ?")
                args.append(numeric)
        inner = " AND ".join(clauses) or "1"
        return f"path IN (SELECT path FROM {table} WHERE {key} = ? AND {inner})", [field, *args]

    def runs(self, filters: Sequence[FieldFilter] = (), sweep_points: bool = True,
             headline: bool = False) -> list[dict[str, Any]]:
        """Runs matching every filter, newest summary first: one flat dict each (run columns,
        ``path`` absolute, ``folder`` relative, every config field; with ``headline`` every
        numeric headline key too). Unreadable runs are kept (``problem``) unless a filter on a
        setting or figure leaves them out."""
        check_filters(filters)
        where, args = [], []
        if not sweep_points:
            where.append("sweep = ''")
        for spec in filters:
            clause, clause_args = self._condition(spec)
            where.append(clause)
            args += clause_args
        condition = " WHERE " + " AND ".join(where) if where else ""
        names, found = self._query(f"SELECT * FROM runs{condition} ORDER BY mtime_ns DESC, path",
                                   args)
        rows = [dict(zip(names, values)) for values in found]
        out = []
        for row in rows:
            relative = _path_of(row.pop("path"))
            row.pop("stamp")
            values = json.loads(row.pop("config_json"))
            figures = json.loads(row.pop("headline_json")) if headline else {}
            item = {"name": row.pop("name"), "folder": clean_text(relative),
                    "path": str(self.folder / relative), **row}
            item["complete"] = bool(item["complete"])
            item["mtime"] = (item.pop("mtime_ns") or 0) / 1e9
            for key in HEADLINE_COLUMNS:
                item[key] = math.nan if item[key] is None else item[key]
            for field in _FIELDS:
                value = values.get(field)
                item.setdefault(field, ",".join(value) if isinstance(value, list) else value)
            if headline:
                for key, value in figures.items():
                    item.setdefault(key, value)
            out.append(item)
        return out

    def sweeps(self) -> list[dict[str, Any]]:
        """Every sweep folder: name (as shown: bytes that are not UTF-8 as U+FFFD), path,
        status, plan (a dict; None when unreadable or too long to keep), points, measured,
        problem."""
        names, found = self._query("SELECT * FROM sweeps ORDER BY name")
        out = []
        for values in found:
            item = dict(zip(names, values))
            item.pop("stamp")
            name = _path_of(item["name"])
            item["name"], item["path"] = clean_text(name), str(self.folder / name)
            try:
                item["plan"] = json.loads(item["plan"]) if item["plan"] else None
            except (ValueError, RecursionError):  # an index written before plans were kept whole
                item["plan"] = None
            out.append(item)
        return out

    def sweep_points(self, sweep: str) -> list[dict[str, Any]]:
        """The rows of one sweep's points.csv, in order (``row``: every column as text);
        ``sweep`` is the sweep folder's name."""
        return [{"index": idx, "status": status, "run": run, "row": json.loads(row)}
                for idx, status, run, row in self._query(
                    "SELECT idx, status, run, row_json FROM sweep_points WHERE sweep = ? "
                    "ORDER BY idx", (_key(sweep),))[1]]


def check_filters(filters: Sequence[FieldFilter]) -> None:
    """``ConfigError`` on ``where`` for more filters than ``MAX_FILTERS``, or a filter listing
    more values than ``MAX_FILTER_VALUES``."""
    if len(filters) > MAX_FILTERS:
        raise ConfigError("where", f"{len(filters):,} filters were given (at most {MAX_FILTERS})",
                          "combine values of one field in one filter: FIELD=V1,V2")
    for spec in filters:
        if len(spec.values) > MAX_FILTER_VALUES:
            raise ConfigError("where", f"{quoted(spec.field)} lists "
                                       f"{len(spec.values):,} values (at most "
                                       f"{MAX_FILTER_VALUES:,})", f"give a range instead: "
                                       f"{shown(spec.field)}=LOW..HIGH")


def _parse_number(text: str) -> float | None:
    try:
        number = float(str(text).replace("_", ""))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _truth(value: Any) -> int:
    if isinstance(value, str):
        return int(value.strip().lower() in ("1", "true", "yes", "on"))
    return int(bool(value))


def _is_day(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _day(value: Any) -> str:
    if isinstance(value, date):
        return value.isoformat()[:10]
    text = str(value).strip()
    try:
        return date.fromisoformat(text[:10]).isoformat()
    except ValueError:
        raise ConfigError("where", f"date: {quoted(text)} is not a date",
                          "write dates as YYYY-MM-DD, a range as date=2026-11-30..2026-12-01") from None


# ----------------------------------------------------------------------------- opening


def _in_memory(folder: Path, found: tuple[dict[str, str], dict[str, str]], note: str,
               progress: Callable[[int, int], None] | None) -> RunIndex:
    connection = _connect(":memory:", BUSY_TIMEOUT_S)
    _create_schema(connection)
    _sync(connection, folder, found, progress)
    if note:
        log.info("run index: %s", note)
    return RunIndex(folder, connection, persistent=False, note=note)


def _rebuild(folder: Path, found: tuple[dict[str, str], dict[str, str]],
             progress: Callable[[int, int], None] | None) -> None:
    """Write a fresh index into a temporary file of the folder, then rename it over the index
    (only if what is there now is missing or ours). The temporary file is removed on failure."""
    handle, temporary = tempfile.mkstemp(prefix=INDEX_FILE + ".", suffix=".tmp", dir=folder)
    os.close(handle)
    try:
        connection = _connect(temporary, BUSY_TIMEOUT_S)
        try:
            _create_schema(connection)
            _sync(connection, folder, found, progress)
        finally:
            connection.close()
        if inspect_file(folder / INDEX_FILE) == "foreign":
            raise IndexUnavailable("a file that is not ours appeared at the index's path")
        os.replace(temporary, folder / INDEX_FILE)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def open_index(folder: str | os.PathLike, rebuild: bool = False,
               progress: Callable[[int, int], None] | None = None) -> RunIndex:
    """The index of ``folder``, up to date with its run and sweep folders. Never raises for a
    bad index or folder: a folder that does not exist gives an empty index; an index that cannot
    be used (not ours, locked, read-only folder) gives one in memory with ``note`` saying why.
    ``rebuild`` rebuilds the file from the folders even when it looks up to date. A folder
    holding no run and no sweep gets no index file.
    ``progress(done, total)`` is called for each folder read."""
    folder = Path(folder)
    found = scan(folder)
    path = folder / INDEX_FILE
    try:
        is_folder = folder.is_dir()
    except OSError:
        is_folder = False
    if not is_folder:
        return _in_memory(folder, found, "", progress)
    kind = inspect_file(path)
    if kind == "missing" and not (found[0] or found[1]):  # nothing to index: write nothing
        return _in_memory(folder, found, "", progress)
    if kind == "foreign":
        return _in_memory(folder, found, (
            f"{path} is not this tool's run index, so it was left as it is and the runs were "
            f"read from their folders; move that file away to let the index be kept there"),
            progress)
    if kind == "ours" and not rebuild:
        try:
            connection = _connect(str(path), BUSY_TIMEOUT_S)
        except sqlite3.Error as error:
            return _in_memory(folder, found, f"the run index could not be opened ({error}); the "
                                             "runs were read from their folders", progress)
        try:
            _check_ours(connection, path)
            _sync(connection, folder, found, progress)
            return RunIndex(folder, connection, persistent=True)
        except sqlite3.Error as error:
            connection.close()
            if _is_locked(error):
                return _in_memory(folder, found, "the run index is busy (another session or run "
                                                 "is writing it); the runs were read from their "
                                                 "folders this time", progress)
            if "readonly" in str(error).lower() or "read-only" in str(error).lower():
                return _in_memory(folder, found, f"the runs folder {folder} cannot be written, so "
                                                 "the index is kept in memory", progress)
            log.info("run index %s is damaged (%s): rebuilding it", path, error)
    try:
        _rebuild(folder, found, progress)
        connection = _connect(str(path), BUSY_TIMEOUT_S)
        _sync(connection, folder, scan(folder), progress)  # what changed while it was built
        return RunIndex(folder, connection, persistent=True)
    except (OSError, sqlite3.Error, IndexUnavailable) as error:
        reason = (error.strerror if isinstance(error, OSError) and error.strerror else str(error))
        return _in_memory(folder, found, f"the run index could not be written in {folder} "
                                         f"({reason}), so it is kept in memory", progress)


def runs_folder_of(run_dir: Path) -> tuple[Path, str]:
    """(the runs folder whose index lists ``run_dir``, its path relative to that folder): the
    parent, or the sweep folder's parent for a point of a sweep."""
    run_dir = Path(run_dir)
    parent = run_dir.parent
    if _is_sweep_dir(parent):
        return parent.parent, f"{parent.name}/{run_dir.name}"
    return parent, run_dir.name


def record_run(run_dir: str | os.PathLike) -> str:
    """Record one just-saved run in its runs folder's index, if that folder has one (an index is
    made by the first listing, never by a save). Never raises and waits at most
    ``RECORD_TIMEOUT_S`` for a busy index; returns '' or a note saying why it was left (the
    next listing catches up from the folders)."""
    try:
        folder, relative = runs_folder_of(Path(run_dir))
        path = folder / INDEX_FILE
        if inspect_file(path) != "ours":
            return ""
        connection = _connect(str(path), RECORD_TIMEOUT_S)
        try:
            if connection.execute("PRAGMA user_version").fetchone()[0] != INDEX_SCHEMA_VERSION:
                return "the run index is of another version; the next listing rebuilds it"
            stamp = scan_one(folder, relative)
            rows = read_run(folder, relative)
            connection.execute("BEGIN IMMEDIATE")
            try:
                _put_run(connection, rows, stamp)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        finally:
            connection.close()
        return ""
    except Exception as error:  # noqa: BLE001 - an index problem never fails a save
        note = f"the run was saved but not recorded in the run index ({type(error).__name__}: " \
               f"{str(error)[:200]}); the next listing adds it from its folder"
        log.info(note)
        return note


def scan_one(folder: Path, relative: str) -> str:
    """The stamp ``scan`` gives one run folder."""
    path = folder / relative
    link = "L" if "/" not in relative and path.is_symlink() else ""
    return link + (_summary_stamp(path) or "-")


def is_figure(name: str) -> bool:
    """Whether ``name`` is a headline figure a run of this tool may hold (whether or not any run
    here holds it)."""
    return (name in HEADLINE_COLUMNS or name in FIGURE_NAMES or name.startswith(FIGURE_PREFIXES)
            or "_between_" in name)


# ----------------------------------------------------------------------------- the command line


def parse_where(text: str) -> FieldFilter:
    """``field=value``, ``field=v1,v2`` (any of them), ``field=LOW..HIGH`` (either end may be
    left out), ``date=2026-11-30..2026-12-01``. ``ConfigError`` on ``where`` otherwise."""
    text = clean_text(str(text))  # bytes that are not UTF-8 match as U+FFFD, as stored
    field, sep, value = text.partition("=")
    field = field.strip()
    if not sep or not field:
        raise ConfigError("where", f"expected FIELD=VALUE, got {quoted(text)}",
                          "for example --where batch=64,128 --where speedup=2.. --where gpu='NVIDIA H200'")
    value = value.strip()
    if ".." in value:
        low, _, high = value.partition("..")
        return FieldFilter(field, low=low.strip() or None, high=high.strip() or None)
    if field in RUN_COLUMNS and field not in ("complete",):
        return FieldFilter(field, values=(value,))
    values = tuple(dict.fromkeys(v.strip() for v in value.split(",")))
    check_filters([FieldFilter(field, values=values)])
    return FieldFilter(field, values=values)


LISTING_COLUMNS = ("name", "started", "gpu", "workload", "preset", "dtype", "batch", "eager_ms",
                   "graph_ms", "speedup", "95% CI", "complete")


def _cell(value: Any, digits: str = ".4f") -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else format(value, digits)
    return "" if value is None else clean_text(str(value).translate({c: " " for c in range(32)})[:60])


def listing_rows(rows: Sequence[dict[str, Any]], fields: Sequence[str] = ()) -> list[list[str]]:
    """The ``index`` command's table: a header row, then one row of text per run (the filtered
    ``fields`` as extra columns)."""
    extra = [f for f in dict.fromkeys(fields) if f not in LISTING_COLUMNS and f != DATE_FIELD]
    table = [[*LISTING_COLUMNS, *extra]]
    for row in rows:
        low, high = row["speedup_ci_low"], row["speedup_ci_high"]
        table.append([
            row["folder"], _cell(row["started_at"])[:19], _cell(row["gpu"]),
            _cell(row["workload"]), _cell(row["preset"]), _cell(row["dtype"]), _cell(row["batch"]),
            _cell(row["eager_median_ms"]), _cell(row["graph_median_ms"]),
            _cell(row["speedup"], ".2f") + ("x" if not math.isnan(row["speedup"]) else ""),
            ("" if math.isnan(low) or math.isnan(high) else f"{low:.2f}-{high:.2f}"),
            "yes" if row["complete"] else ("unreadable" if row["problem"] else "no"),
            *[_cell(row.get(f)) for f in extra]])
    return table


def format_listing(index: RunIndex, filters: Sequence[FieldFilter] = ()) -> str:
    """What ``python -m profiler_core index`` prints: the matching runs as a table, the sweeps,
    and the index's note when it is kept in memory."""
    rows = index.runs(filters, headline=True)
    total = len(index.runs())
    table = listing_rows(rows, [f.field for f in filters])
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [f"Runs folder {index.folder}: {len(rows)} of {total} run(s) match"
             + (" (sweep points included)" if any(r["sweep"] for r in rows) else "")]
    absent = index.absent_figures(filters)
    on_cpu = absent and index.field_values("device_type").count("cpu")
    for figure in absent:
        lines.append(f"No run here has the figure {quoted(figure)}, so a filter on it matches no "
                     "run" + (" (a CPU run times the eager step only: it has no graph figures "
                              "and no speedup)." if on_cpu else "."))
    if rows:
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                  for line in table]
    sweeps = index.sweeps()
    if sweeps:
        lines += ["", "Sweeps"]
        for sweep in sweeps:
            state = sweep["problem"] or f"{sweep['status']}, {sweep['measured']} of " \
                                        f"{sweep['points']} point(s) measured"
            lines.append(f"  {_cell(sweep['name'])}: {state}")
    lines += ["", f"Index: {index.folder / INDEX_FILE}" if index.persistent
              else f"Index kept in memory: {index.note or 'the runs folder does not exist'}"]
    return clean_text("\n".join(lines))  # a folder name that is not UTF-8 prints, as U+FFFD
