"""The run index's rows: what it records of each run folder and sweep folder of a runs folder.

Scope: finding the run and sweep folders cheaply (:func:`scan`: names and the ``stat`` of each
summary.json, sweep.json and points.csv), and reading one of them into the rows the index
stores (:func:`read_run`: through ``runfolder``, the one reader of a run; :func:`read_sweep`).
Never writes anything; ``index`` keeps the database.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from profiler_core.analysis.metrics import headline_key
from profiler_core.spec import schema
from profiler_core.spec.config import preset_label
from profiler_core.spec.errors import ProfilerError
from profiler_core.spec.schema import clean_text
from profiler_core.storage import runfolder
from profiler_core.storage.runfolder import is_run_dir

SWEEP_FILE, POINTS_FILE = "sweep.json", "points.csv"
MAX_SWEEP_FILE_BYTES = 16 * 2**20
# The pair's figures the runs table holds in columns of its own, under their filter names.
HEADLINE_COLUMNS = tuple(headline_key(mode, metric) for mode, metric in (
    ("eager", "median_ms"), ("graph", "median_ms"), ("graph", "speedup"),
    ("graph", "speedup_ci_low"), ("graph", "speedup_ci_high")))
MAX_PLAN_CHARS = 100_000  # a sweep's plan as JSON; a longer one is not kept in the index


def file_stamp(*files: Path) -> str:
    """What changes when a file is replaced or rewritten: inode, size and mtime of each."""
    parts = []
    for file in files:
        try:
            info = os.stat(file)
            parts.append(f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}")
        except OSError:
            parts.append("-")
    return "|".join(parts)


def is_sweep_dir(path: Path) -> bool:
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


def summary_stamp(path: Path) -> str | None:
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
        stamp = summary_stamp(folder / name)
        if stamp is not None:
            runs[name] = ("L" if link else "") + stamp
        elif not link and is_sweep_dir(folder / name):
            sweeps[name] = file_stamp(folder / name / SWEEP_FILE, folder / name / POINTS_FILE)
            for point, point_link in _folders(folder / name):
                point_stamp = summary_stamp(folder / name / point)
                if point_stamp is not None and not point_link:
                    runs[f"{name}/{point}"] = point_stamp
    return runs, sweeps


def scan_one(folder: Path, relative: str) -> str:
    """The stamp ``scan`` gives one run folder."""
    path = folder / relative
    link = "L" if "/" not in relative and path.is_symlink() else ""
    return link + (summary_stamp(path) or "-")


def runs_folder_of(run_dir: Path) -> tuple[Path, str]:
    """(the runs folder whose index lists ``run_dir``, its path relative to that folder): the
    parent, or the sweep folder's parent for a point of a sweep."""
    run_dir = Path(run_dir)
    parent = run_dir.parent
    if is_sweep_dir(parent):
        return parent.parent, f"{parent.name}/{run_dir.name}"
    return parent, run_dir.name


def _read_json(path: Path, limit: int) -> Any:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise ValueError(f"{path.name} is a link; links are not followed")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path.name} is not a regular file")
    if info.st_size > limit:
        raise ValueError(f"{path.name} is over {limit // 2**20} MiB")
    return json.loads(path.read_text(encoding="utf-8"))


def finite_number(value: Any) -> float | None:
    """A finite float, or None (text, booleans, infinities, NaN, numbers too large)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def short_text(value: Any) -> str | None:
    return None if value is None or value == "" else clean_text(str(value)[:500])


def stored_key(path: str) -> str:
    """A folder path as the index stores it: the path itself, or, when it holds a lone surrogate
    (SQLite takes only UTF-8), '/' and the hex of its bytes (a relative path never starts with
    '/', so the two kinds cannot meet). :func:`stored_path` turns it back."""
    if clean_text(path) == path:
        return path
    return "/" + path.encode("utf-8", "surrogatepass").hex()


def stored_path(key: str) -> str:
    """The folder path a stored key names (:func:`stored_key`'s inverse)."""
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
        summary = runfolder.read_summary(path)
    except ProfilerError as error:
        run["problem"] = clean_text(error.message[:500])
    except Exception as error:  # whatever a damaged file raises, list it, never crash
        run["problem"] = clean_text(f"{type(error).__name__}: {error}"[:500])
    else:
        # an own step's settings under their own names (filterable as batch=8); no built-in size
        # field applies to an own step, and no setting may take the name of one that does
        config_rows = {**summary.config.to_dict(), "preset": preset_label(summary.config),
                       **summary.config.settings}
        run["complete"] = int(summary.complete)
        for key in ("started_at", "finished_at", "gpu_name", "device_type", "torch_version",
                    "cuda_version", "driver_version"):
            run[key] = short_text(summary.environment.get(key))
        run["gpu"] = run["gpu_name"] or ("CPU" if summary.config.device == "cpu" else None)
        for key, value in summary.headline.items():
            number = finite_number(value)
            if number is not None and isinstance(key, str):
                headline_rows[clean_text(key[:200])] = number
        # every mode's figures under their filter names (``metrics.headline_key``: speedup,
        # capture_ms... for the pair, <mode>_<metric> otherwise)
        for mode, metric, value in runfolder.read_figures(path, summary).items():
            number = finite_number(value)
            if number is not None:
                headline_rows.setdefault(clean_text(headline_key(mode, metric)[:200]), number)
        for key in HEADLINE_COLUMNS:
            run[key] = headline_rows.get(key)
        run["tables"] = ",".join(file for file, _ in schema.TABLE_FILES.values()
                                 if (path / file).is_file())
    run["config_json"] = json.dumps(config_rows)
    run["headline_json"] = json.dumps(headline_rows)
    return {"run": run, "config": config_rows, "headline": headline_rows}


def config_row(relative: str, field: str, value: Any) -> tuple:
    """One config field as the index stores it: (path, field, text, number, JSON)."""
    text: str | None
    number: float | None
    if isinstance(value, (list, tuple)):
        text, number = clean_text(",".join(str(v) for v in value)), None
    elif isinstance(value, bool):
        text, number = ("true" if value else "false"), float(value)
    else:
        text, number = short_text(value), finite_number(value)
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
        sweep["status"] = short_text(content.get("status"))
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
                points.append((name, index, short_text(row.get("status")), short_text(run),
                               json.dumps(row)))
    except (OSError, ValueError, TypeError, RecursionError, UnicodeDecodeError, csv.Error) as error:
        sweep["problem"] = clean_text(f"{type(error).__name__}: {error}"[:500])
    sweep["points"] = len(points)
    sweep["measured"] = sum(1 for p in points if p[3] and is_run_dir(path / p[3]))
    return {"sweep": sweep, "points": points}


def _row_index(text: Any, number: int) -> int:
    """A points.csv row's index: its ``index`` column when that is a whole number SQLite can
    hold (under 2**63), else the row's number."""
    text = str(text or "").strip()
    if text.isdecimal() and len(text) <= 18:
        return int(text)
    return number
