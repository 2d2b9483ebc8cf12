"""The run index: an embedded SQLite database in a runs folder listing every run and sweep in it.

Scope: ``<runs folder>/.profiler_index.sqlite``, kept up to date with the folders on every open
(:func:`open_index`), which stay the truth; what it records of a folder is ``index_rows``', the
filters and the listing ``index_query``'s. Never imports the dashboard.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import os
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ConfigError, quoted, shown
from profiler_core.spec.schema import INDEX_FILE, clean_text
from profiler_core.storage import leftovers
from profiler_core.storage.index_query import (
    ALWAYS_FILTERABLE,
    DATE_FIELD,
    FIGURE_NAMES,
    RUN_COLUMNS,
    FieldFilter,
    cell,
    check_filters,
    day,
    is_day,
    is_figure,
    listing_rows,
    parse_number,
    truth,
)
from profiler_core.storage.index_rows import (
    HEADLINE_COLUMNS,
    config_row,
    file_stamp,
    finite_number,
    read_run,
    read_sweep,
    runs_folder_of,
    scan,
    scan_one,
    stored_key,
    stored_path,
)

INDEX_SCHEMA_VERSION = 5  # PRAGMA user_version of an index this code reads (4: preset is the
#                           run's label, custom when its values differ from the preset it names;
#                           5: every mode's figures from metrics.csv, under their filter names)
APPLICATION_ID = 0x43475049  # "CGPI": PRAGMA application_id, how a file is recognised as ours
INDEX_MARKER = "profiler_core run index"  # meta.tool
BUSY_TIMEOUT_S = 2.0  # how long a reader or writer waits for another writer
RECORD_TIMEOUT_S = 0.5  # a save waits at most this long to record its run (then leaves it)
_SQLITE_HEADER = b"SQLite format 3\x00"
_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}

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




class IndexUnavailable(Exception):
    """The index file cannot be used this time (locked, damaged, not ours, not writable)."""


# ----------------------------------------------------------------------------- reading folders


































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
    if kind == "missing" or header is None:
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
    stamp = file_stamp(path)
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
    """Write one run's rows (``read_run``); its path is stored as its key (:func:`stored_key`)."""
    run = dict(rows["run"], stamp=stamp)
    _delete_runs(connection, [run["path"]])
    key = run["path"] = stored_key(run["path"])
    columns = ", ".join(run)
    connection.execute(f"INSERT INTO runs ({columns}) VALUES ({', '.join('?' * len(run))})",
                       list(run.values()))
    connection.executemany("INSERT INTO run_config VALUES (?, ?, ?, ?, ?)",
                           [config_row(key, f, v) for f, v in rows["config"].items()])
    connection.executemany("INSERT INTO run_headline VALUES (?, ?, ?)",
                           [(key, k, v) for k, v in rows["headline"].items()])


def _delete_runs(connection: sqlite3.Connection, paths: Iterable[str]) -> None:
    keys = [(stored_key(p),) for p in paths]
    for table in ("runs", "run_config", "run_headline"):
        connection.executemany(f"DELETE FROM {table} WHERE path = ?", keys)


def _put_sweep(connection: sqlite3.Connection, rows: dict[str, Any], stamp: str) -> None:
    """Write one sweep's rows (``read_sweep``); its name is stored as its key (:func:`stored_key`)."""
    sweep = dict(rows["sweep"], stamp=stamp)
    _delete_sweeps(connection, [sweep["name"]])
    sweep["name"] = stored_key(sweep["name"])
    connection.execute(f"INSERT INTO sweeps ({', '.join(sweep)}) VALUES "
                       f"({', '.join('?' * len(sweep))})", list(sweep.values()))
    connection.executemany("INSERT OR REPLACE INTO sweep_points VALUES (?, ?, ?, ?, ?)",
                           [(sweep["name"], *point[1:]) for point in rows["points"]])


def _delete_sweeps(connection: sqlite3.Connection, names: Iterable[str]) -> None:
    keys = [(stored_key(n),) for n in names]
    for table, column in (("sweeps", "name"), ("sweep_points", "sweep")):
        connection.executemany(f"DELETE FROM {table} WHERE {column} = ?", keys)


def _stale(connection: sqlite3.Connection, found: tuple[dict[str, str], dict[str, str]]
           ) -> tuple[list[str], list[str], list[str], list[str]]:
    """(runs to read, runs to drop, sweeps to read, sweeps to drop) against what was found."""
    runs, sweeps = found
    stored_runs = {stored_path(p): s for p, s in connection.execute("SELECT path, stamp FROM runs")}
    stored_sweeps = {stored_path(n): s for n, s in connection.execute("SELECT name, stamp FROM sweeps")}
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
                if is_day(v)]
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
            clauses: list[str] = ["started_at IS NOT NULL"]
            args: list[Any] = []
            for bound, op in ((spec.low, ">="), (spec.high, "<=")):
                if bound is not None:
                    clauses.append(f"substr(started_at, 1, 10) {op} ?")
                    args.append(day(bound))
            if spec.values:
                clauses.append(f"substr(started_at, 1, 10) IN ({', '.join('?' * len(spec.values))})")
                args += [day(v) for v in spec.values]
            return " AND ".join(clauses), args
        if field in RUN_COLUMNS:
            column = RUN_COLUMNS[field]
            clauses, args = [], []
            if spec.values:
                wanted = [truth(v) if field == "complete" else (None if v is None else
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
            either: list[str] = []
            for value in spec.values:
                if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
                    either[:1] = [f"({number} IS NULL AND {text} IS NULL)"]
                    continue
                as_text = config_row("", field, value)[2]
                numeric = finite_number(value) if not isinstance(value, str) else parse_number(value)
                if text != "NULL" and as_text is not None:
                    texts[as_text] = None
                if numeric is not None:
                    numbers[numeric] = None
            for column, values in ((text, list(texts)), (number, list(numbers))):
                if values:
                    either.append(f"{column} IN ({', '.join('?' * len(values))})")
                    args += values
            clauses.append("(" + (" OR ".join(either) or "0") + ")")
        for bound, op in ((spec.low, ">="), (spec.high, "<=")):
            if bound is not None:
                numeric = finite_number(bound) if not isinstance(bound, str) else parse_number(bound)
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
            relative = stored_path(row.pop("path"))
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
            name = stored_path(item["name"])
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
                    "ORDER BY idx", (stored_key(sweep),))[1]]












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
    (only if what is there now is missing or ours). The temporary file is removed on failure; its
    name tags this process as its owner, so that a later run removes it if this one is killed
    (``leftovers``)."""
    handle, temporary = tempfile.mkstemp(prefix=leftovers.tagged(INDEX_FILE + "."), suffix=".tmp",
                                         dir=folder)
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
    """The index of ``folder``, up to date with its run and sweep folders (the folder is scanned
    cheaply: names and the ``stat`` of each summary.json, sweep.json and points.csv; only what
    changed is read). A missing or damaged index of ours (not readable as SQLite, another schema
    version, truncated) is rebuilt into a temporary file of the folder and renamed over it;
    nothing else is ever written or removed, but the temporary file of a rebuild that was killed
    (``leftovers.remove_stale``). Writers use SQLite transactions with a busy
    timeout. Never raises for a bad index or folder: a folder that does not exist gives an
    empty index; an index that cannot be used (not ours, locked, read-only folder, a file there
    that is not recognisably ours, which is left exactly as it is) gives one in memory with
    ``note`` saying why.
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
    leftovers.remove_stale(folder)  # a killed rebuild's temporary file
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
    except Exception as error:  # an index problem never fails a save
        note = f"the run was saved but not recorded in the run index ({type(error).__name__}: " \
               f"{str(error)[:200]}); the next listing adds it from its folder"
        log.info(note)
        return note






# ----------------------------------------------------------------------------- the command line










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
            lines.append(f"  {cell(sweep['name'])}: {state}")
    lines += ["", f"Index: {index.folder / INDEX_FILE}" if index.persistent
              else f"Index kept in memory: {index.note or 'the runs folder does not exist'}"]
    return clean_text("\n".join(lines))  # a folder name that is not UTF-8 prints, as U+FFFD
