"""A sweep folder on disk: its format, who measures it now, and reading it back.

Scope: ``sweep.json`` (the plan and the sweep's status), ``points.csv`` (one row per planned
point: its values, status, run folder, error, headline figures), ``point_modes.csv`` (each
measured point's modes.csv, one row per mode), one ordinary run folder per point (``point-000``,
...) and ``manifest.json`` listing the sweep's own files with their sizes and its point folders.
Only a new folder is written, or (``overwrite``) one holding one of this tool's sweeps and nothing
else (:func:`sweep_files`). A folder being measured is claimed (this process, or a live process of
this host named in its sweep.json), so two runners never measure one sweep. :func:`load_sweep` and
:func:`list_sweeps` read sweeps back (nothing in them is executed).
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.spec.errors import ConfigError, ProfilerError, RunFormatError, shown
from profiler_core.spec.modes import MODE_NAMES
from profiler_core.spec.schema import clean_text
from profiler_core.storage.outputs import (
    TOOL_NAME,
    NotOwned,
    Owned,
    is_version,
    output_path,
    owned_folder,
    read_folder_json,
    replace_file,
    write_manifest,
)
from profiler_core.storage.results import RunResult, check_writable, run_files
from profiler_core.storage.runfolder import is_tool_run
from profiler_core.sweep.plan import SweepPlan

SWEEP_FILE = "sweep.json"
POINTS_FILE = "points.csv"
POINT_MODES_FILE = "point_modes.csv"
SWEEP_SCHEMA_VERSION = 1
SWEEP_STATUSES = ("running", "stopped", "done")
# pending: not measured yet; running: being measured (or the sweep crashed there); stopped: the
# sweep was stopped during it; done: measured; failed: it ended with an error, recorded.
POINT_STATUSES = ("pending", "running", "stopped", "done", "failed")
FINISHED = ("done", "failed")
POINT_FIGURES = ["eager_median_ms", "graph_median_ms", "speedup", "speedup_ci_low",
                 "speedup_ci_high", "eager_gpu_busy_ms", "graph_gpu_busy_ms", "floor_ms",
                 "capture_ms", "graph_pool_bytes", "break_even_steps", "predicted_speedup",
                 "predicted_speedup_error_pct", "elapsed_s"]
POINT_TEXT = ["status", "run", "error_kind", "error_message"]
POINT_MODE_COLUMNS = ["index", "mode", "median_ms", "speedup", "speedup_ci_low",
                      "speedup_ci_high", "one_time_ms", "memory_bytes"]
SWEEP_KIND = "sweep"  # a sweep folder's manifest kind
_SWEEP_FILES = (SWEEP_FILE, POINTS_FILE, POINT_MODES_FILE)
_POINT_FOLDER = re.compile(r"point-[0-9]{3,}")
_MAX_SWEEP_JSON_BYTES = 4 * 2**20
_MAX_TABLE_BYTES = 64 * 2**20
_MAX_MESSAGE = 400


def point_columns(axis_names: Sequence[str]) -> list[str]:
    return ["index", *axis_names, *POINT_TEXT, *POINT_FIGURES]


def read_sweep_json(path: Path) -> dict | None:
    """sweep.json's content if ``path`` is a real folder holding one of this tool's sweeps."""
    content = read_folder_json(path, SWEEP_FILE, _MAX_SWEEP_JSON_BYTES)
    if isinstance(content, dict) and content.get("tool") == TOOL_NAME and \
            content.get("kind") == "sweep" and is_version(content.get("schema_version"),
                                                          (SWEEP_SCHEMA_VERSION,)):
        return content
    return None


def is_tool_sweep(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a real folder holding one of this tool's sweeps (its sweep.json says so)."""
    return read_sweep_json(Path(path)) is not None


def sweep_files(path: Path) -> Owned:
    """What ``--overwrite`` removes from the sweep folder ``path``; ``NotOwned`` (naming the
    entry) when the folder is not wholly one sweep of this tool.

    The rule: ``path`` is a real folder holding one of this tool's sweeps (:func:`is_tool_sweep`)
    and nothing else: the sweep's own files (sweep.json, points.csv, point_modes.csv,
    manifest.json: regular files, no links) and point folders (``point-NNN``), each holding
    nothing but one run of this tool (``results.run_files``). With a manifest (this version on)
    the files must have the sizes it lists and the point folders be among those it lists; a sweep
    written by an earlier version has none, and the names decide. A point folder moved aside as
    damaged (``point-NNN.damaged-K``), a temporary file left by a crash or anything else refuses
    the folder."""
    if not is_tool_sweep(path):
        raise NotOwned("", "is not a sweep folder of this tool")
    return owned_folder(Path(path), SWEEP_KIND, lambda name: name in _SWEEP_FILES,
                        subfolder=run_files,
                        folder_ok=lambda name: _POINT_FOLDER.fullmatch(name) is not None)


def check_sweep_output(directory: str | os.PathLike, overwrite: bool = False,
                       resume: bool = False) -> Path:
    """The sweep folder, checked before anything runs: a new folder whose parent can be written;
    with ``resume`` one of this tool's sweeps; with ``overwrite`` a new folder or one holding one
    of this tool's sweeps and nothing else (:func:`sweep_files`; replaced). Anything else is
    refused (``ConfigError`` on ``out``), untouched. The path is read as
    ``outputs.output_path`` reads it (``~`` expanded, ``..`` taken lexically)."""
    text = os.fspath(directory)
    shown = repr(text)
    target = output_path(text)
    if not text.strip() or Path(text).name in ("", ".", "..") or \
            os.path.basename(text.rstrip(os.sep)) in ("", ".", "..") or \
            target.name in ("", ".", ".."):
        raise ConfigError("out", f"out must name a folder for the sweep; got {shown}",
                          "give a folder name such as runs/sweep-batch")
    exists = os.path.lexists(target)
    ours = is_tool_sweep(target)
    if resume:
        if not ours:
            raise ConfigError("out", f"{shown} is not a sweep folder of this tool, so there is "
                                     "nothing to resume", "name the folder of a sweep that was "
                                                          "stopped, or start a new one without --resume")
        return target
    if exists and not ours:
        what = "a run folder of this tool, not a sweep" if is_tool_run(target) else \
            "not a sweep folder of this tool"
        raise ConfigError("out", f"{shown} already exists and is {what}, so nothing was written "
                                 "there", "choose a new folder name")
    if exists and not overwrite:
        raise ConfigError("out", f"{shown} already holds a sweep",
                          "pass --resume to continue it, --overwrite to replace it, or choose a "
                          "new folder")
    if exists:
        try:
            sweep_files(target)
        except (NotOwned, OSError) as why:
            raise not_replaced(shown, why) from None
    check_writable(target, f"the sweep folder {shown}")
    return target


def not_replaced(shown: str, why: NotOwned | OSError) -> ConfigError:
    reason = f"cannot be read ({why.strerror})" if isinstance(why, OSError) else f"holds more: {why}"
    return ConfigError("out", f"{shown} holds a sweep of this tool but {reason}, so nothing was "
                              "written there",
                       "move what you keep out of it, or choose a new folder name; --overwrite "
                       "replaces only a folder holding nothing but files this tool wrote")


def _write_atomic(path: Path, text: str) -> None:
    replace_file(path, text.encode("utf-8"))


def one_line(text: object, limit: int = _MAX_MESSAGE) -> str:
    flat = " ".join(str(text or "").split())
    flat = "".join(ch if ch.isprintable() else " " for ch in flat)
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def number_or_nan(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of 400 digits
        return math.nan
    return number


def point_figures(result: RunResult) -> tuple[dict[str, float], pd.DataFrame]:
    """A measured point's headline figures (points.csv) and its modes (point_modes.csv rows).

    The GPU-busy floor per training step is the graph's profiled busy time per replay divided by
    the steps it holds (the graph's own floor), or eager's busy time per step when the graph has
    no profiled window; NaN without a profiled window."""
    figures, pair, steps = result.figures, result.pair, result.config.capture_iters
    eager_busy = figures.get("eager", "gpu_busy_us") / 1e3
    graph_busy = figures.get("graph", "gpu_busy_us") / 1e3 / steps
    point = {
        "eager_median_ms": pair.eager_ms, "graph_median_ms": pair.graph_ms,
        "speedup": pair.speedup, "speedup_ci_low": pair.speedup_ci_low,
        "speedup_ci_high": pair.speedup_ci_high,
        "eager_gpu_busy_ms": eager_busy, "graph_gpu_busy_ms": graph_busy,
        "floor_ms": graph_busy if math.isfinite(graph_busy) else eager_busy,
        "capture_ms": figures.get("graph", "capture_ms"),
        "graph_pool_bytes": figures.get("graph", "pool_bytes"),
        "break_even_steps": pair.break_even_steps,
        "predicted_speedup": number_or_nan(result.headline.get("predicted_speedup")),
        "predicted_speedup_error_pct": number_or_nan(result.headline.get("predicted_speedup_error_pct")),
    }
    modes = result.table("modes")
    if modes.empty:  # a run from before modes.csv: eager and graph from its figures
        warmup = figures.get("graph", "warmup_ms")
        modes = pd.DataFrame([
            {"mode": "eager", "median_ms": pair.eager_ms, "speedup": 1.0,
             "speedup_ci_low": math.nan, "speedup_ci_high": math.nan, "one_time_ms": 0.0,
             "memory_bytes": 0.0},
            {"mode": "graph", "median_ms": pair.graph_ms, "speedup": pair.speedup,
             "speedup_ci_low": pair.speedup_ci_low, "speedup_ci_high": pair.speedup_ci_high,
             # the one-time cost as every run states it: warm-up and capture
             "one_time_ms": point["capture_ms"] + (warmup if math.isfinite(warmup) else 0.0),
             "memory_bytes": point["graph_pool_bytes"]}])
    rows = pd.DataFrame({column: modes[column] for column in POINT_MODE_COLUMNS[1:]})
    rows["mode"] = rows["mode"].astype(str)
    return point, rows


class SweepFolder:
    """The files of one sweep folder (written atomically, one at a time)."""

    def __init__(self, path: Path, plan: SweepPlan) -> None:
        self.path = path
        self.plan = plan
        self.points = pd.DataFrame(columns=point_columns(plan.axis_names))
        self.point_modes = pd.DataFrame(columns=POINT_MODE_COLUMNS)
        self.info: dict[str, Any] = {}

    def blank_points(self) -> pd.DataFrame:
        rows = []
        for point in self.plan.points():
            row = {"index": point.index, **dict(point.values), "status": "pending",
                   "run": point.run_name, "error_kind": "", "error_message": ""}
            row.update({name: math.nan for name in POINT_FIGURES})
            rows.append(row)
        return pd.DataFrame(rows, columns=point_columns(self.plan.axis_names))

    def write_info(self, status: str, **extra: Any) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.info.setdefault("created_at", now)
        self.info.update(extra)
        self.info.update(tool=TOOL_NAME, kind="sweep", schema_version=SWEEP_SCHEMA_VERSION,
                         status=status, updated_at=now, plan=self.plan.to_dict(),
                         points=len(self.points), files={"points": POINTS_FILE,
                                                         "point_modes": POINT_MODES_FILE})
        ordered = {key: self.info[key] for key in ("tool", "kind", "schema_version", "status")}
        ordered.update(self.info)
        _write_atomic(self.path / SWEEP_FILE, json.dumps(ordered, indent=2))
        self.write_manifest()

    def write_points(self) -> None:
        _write_atomic(self.path / POINTS_FILE, self.points.to_csv(index=False))
        _write_atomic(self.path / POINT_MODES_FILE, self.point_modes.to_csv(index=False))
        self.write_manifest()

    def write_manifest(self) -> None:
        """List the sweep's own files (their sizes now) and the plan's point folders."""
        write_manifest(self.path, SWEEP_KIND, _SWEEP_FILES,
                       [point.run_name for point in self.plan.points()])



# ----------------------------------------------------------------------------- claims



# Sweep folders that a runner of this process measures now (the dashboard may hold several).
_ACTIVE_FOLDERS: set[str] = set()
_ACTIVE_GUARD = threading.Lock()


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (Linux clock ticks, from /proc), so that a pid reused by
    another process is not taken for the sweep's; None when unknown or not running."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError, ValueError):
        return None


MAX_PID = 2**22  # Linux's largest process id (PID_MAX_LIMIT)


def _runner_pid(runner: Any) -> int | None:
    """The process id that sweep.json's runner record names: a whole number from 1 to MAX_PID
    (not a boolean, not Infinity, not a list), else None: an edited or damaged record names no
    process."""
    pid = runner.get("pid") if isinstance(runner, dict) else None
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= MAX_PID:
        return None
    return pid


def runner_record() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _process_start(os.getpid())}


def claim_folder(target: Path, info: Mapping[str, Any] | None) -> str:
    """Refuse a sweep folder that a runner measures now (of this process, or a live process of
    this host named in its sweep.json); otherwise mark it as this process's until released."""
    shown = repr(str(target))
    pid = _other_live_runner(info)
    if pid is not None:
        raise ConfigError("out", f"{shown} is being measured by process {pid}",
                          "stop that sweep first (Ctrl-C there), or wait for it to end")
    key = str(target.resolve())
    with _ACTIVE_GUARD:
        if key in _ACTIVE_FOLDERS:
            raise ConfigError("out", f"{shown} is being measured now (a sweep of this process)",
                              "stop that sweep first, or wait for it to end")
        _ACTIVE_FOLDERS.add(key)
    return key


def measured_now(directory: str | os.PathLike) -> bool:
    """Whether a runner measures the sweep in ``directory`` now (this process, or a live process
    of this host that its sweep.json names)."""
    target = Path(directory)
    with _ACTIVE_GUARD:
        if str(target.resolve()) in _ACTIVE_FOLDERS:
            return True
    return _other_live_runner(read_sweep_json(target)) is not None


def _other_live_runner(info: Mapping[str, Any] | None) -> int | None:
    """The process id that sweep.json (``info``) names as measuring the sweep now, if it is a
    live process of this host other than this one (its start time tells a reused pid)."""
    info = info or {}
    runner = info.get("runner")
    pid = _runner_pid(runner)
    if info.get("status") != "running" or pid is None or not isinstance(runner, dict) or \
            runner.get("host") != socket.gethostname() or pid == os.getpid():
        return None
    start = _process_start(pid)
    return pid if start is not None and start == runner.get("start") else None


def release_folder(key: str) -> None:
    with _ACTIVE_GUARD:
        _ACTIVE_FOLDERS.discard(key)



# ----------------------------------------------------------------------------- reading a sweep

def saved_plan(directory: str | os.PathLike) -> SweepPlan:
    """The plan of the sweep in ``directory`` (``ConfigError`` on ``out`` if it is not one)."""
    target = check_sweep_output(directory, resume=True)
    return SweepPlan.from_dict((read_sweep_json(target) or {}).get("plan") or {})




@dataclass(frozen=True)
class SweepData:
    """A sweep folder as read: its plan, status, points.csv and point_modes.csv."""

    folder: Path
    plan: SweepPlan
    status: str
    points: pd.DataFrame
    point_modes: pd.DataFrame
    info: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.folder.name


def _read_csv(path: Path, columns: Sequence[str], text_columns: Iterable[str],
              optional: Iterable[str] = ()) -> pd.DataFrame:
    if path.is_symlink() or not path.is_file():
        raise RunFormatError(f"{path} is missing", "the sweep folder is incomplete; resume it "
                                                   "(python -m profiler_core sweep --resume)")
    if path.stat().st_size > _MAX_TABLE_BYTES:
        raise RunFormatError(f"{path} is too large for a sweep table", "the file was damaged")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise RunFormatError(f"{path} is not a readable CSV: {one_line(error, 200)}",
                             "the file was damaged or edited; resume the sweep") from None
    for column in optional:  # a figure an older sweep did not record: not measured
        if column not in frame.columns:
            frame[column] = ""
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise RunFormatError(f"{path} lacks columns {missing}", "the file was damaged or edited")
    frame = frame[list(columns)].copy()
    text = set(text_columns)
    for column in columns:
        if column in text:
            continue
        raw = frame[column].str.strip()
        blank = raw.eq("") | raw.str.lower().eq("nan")
        values = pd.to_numeric(raw.where(~blank), errors="coerce").astype(float)
        if (values.isna() & ~blank).any():
            raise RunFormatError(f"{path}: column {column} holds text where numbers belong",
                                 "the file was damaged or edited")
        frame[column] = values
    return frame


def read_points(folder: Path, plan: SweepPlan) -> pd.DataFrame:
    text = set(POINT_TEXT) | {a.name for a in plan.axes if not a.numeric}
    frame = _read_csv(folder / POINTS_FILE, point_columns(plan.axis_names), text, POINT_FIGURES)
    if len(frame) != len(plan.points()) or list(frame["index"]) != list(range(len(frame))):
        raise RunFormatError(f"{folder / POINTS_FILE} does not hold the plan's "
                             f"{len(plan.points())} points in order", "resume the sweep to rebuild it")
    bad = frame[~frame["status"].isin(POINT_STATUSES)]
    if len(bad):
        raise RunFormatError(f"{folder / POINTS_FILE}: unknown status {bad['status'].iloc[0][:20]!r}",
                             "the file was damaged or edited")
    frame["index"] = frame["index"].astype(int)
    for axis in plan.axes:
        if not axis.numeric:
            continue
        planned = [dict(point.values)[axis.name] for point in plan.points()]
        wrong = frame[axis.name].to_numpy(dtype=float) != np.asarray(planned, dtype=float)
        if wrong.any():  # blank, nan, inf or another number: not the point the plan measures
            at = int(np.flatnonzero(wrong)[0])
            raise RunFormatError(
                f"{folder / POINTS_FILE}: point {at} has {axis.name} "
                f"{shown(float(frame[axis.name].iloc[at]))}, not the plan's {planned[at]:,}",
                "the file was damaged or edited; resume the sweep to rebuild it")
        frame[axis.name] = planned
    return frame


def load_sweep(directory: str | os.PathLike) -> SweepData:
    """Read a sweep folder (nothing in it is executed); ``RunFormatError`` says what is wrong."""
    folder = Path(directory)
    info = read_sweep_json(folder)
    if info is None:
        raise RunFormatError(f"{folder} is not a sweep folder of this tool (no readable "
                             f"{SWEEP_FILE})", "choose a folder written by python -m profiler_core sweep")
    plan = SweepPlan.from_dict(info.get("plan") or {})
    status = info.get("status") if info.get("status") in SWEEP_STATUSES else "running"
    points = read_points(folder, plan)
    modes_path = folder / POINT_MODES_FILE
    point_modes = _read_csv(modes_path, POINT_MODE_COLUMNS, ("mode",)) if modes_path.exists() \
        else pd.DataFrame(columns=POINT_MODE_COLUMNS)
    if not point_modes["mode"].isin(MODE_NAMES).all():
        raise RunFormatError(f"{modes_path}: a row names an unknown mode",
                             "the file was damaged or edited")
    return SweepData(folder, plan, str(status), points, point_modes.reset_index(drop=True),
                     {k: v for k, v in info.items() if k in ("created_at", "updated_at", "fatal",
                                                             "runner", "resumed_at")})


SWEEP_LIST_COLUMNS = ["name", "path", "status", "axes", "points", "done", "failed", "updated",
                      "problem"]


def list_sweeps(runs_folder: str | os.PathLike) -> pd.DataFrame:
    """The sweep folders directly in ``runs_folder``, newest first; a damaged one is listed with
    ``problem`` saying why."""
    rows = []
    folder = Path(runs_folder)
    try:
        children = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        children = []
    for child in children:
        info = read_sweep_json(child)
        if info is None:
            continue
        row = {"name": clean_text(child.name), "path": clean_text(str(child)),
               "status": clean_text(str(info.get("status", ""))), "axes": "", "points": 0,
               "done": 0, "failed": 0, "updated": clean_text(str(info.get("updated_at", ""))[:19]),
               "problem": ""}
        if row["path"] != str(child):  # pandas' text columns and Streamlit take only UTF-8
            row["problem"] = ("the folder name is not valid UTF-8 (shown with U+FFFD); rename "
                              "the folder to open it")
            rows.append(row)
            continue
        try:
            data = load_sweep(child)
            row.update(axes=" x ".join(data.plan.axis_names), points=len(data.points),
                       done=int((data.points["status"] == "done").sum()),
                       failed=int((data.points["status"] == "failed").sum()), status=data.status)
        except ProfilerError as exc:
            row["problem"] = one_line(clean_text(str(exc)), 200)
        except Exception as exc:  # a damaged sweep is listed, never a crash
            row["problem"] = one_line(clean_text(f"{type(exc).__name__}: {exc}"), 200)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=SWEEP_LIST_COLUMNS)
    return frame.sort_values("updated", ascending=False, kind="stable").reset_index(drop=True)


