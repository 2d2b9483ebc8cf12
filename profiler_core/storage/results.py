"""``RunResult``: everything one run measured (tables, the summary's headline and facts, traces),
its figures through ``Figures`` and ``Headline``, saved into and loaded from its run folder.

Scope: writing a run folder atomically, only where this tool may (:func:`check_output`,
:func:`run_files`), or under the system's temporary folder when it cannot (``SaveError``); the
same rule for a run's files written elsewhere (:func:`write_run_folder`: an upload); loading
one through ``runfolder``, checking every table and upgrading older schemas. No pickle.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from profiler_core.analysis import attribution, metrics
from profiler_core.analysis.figures import Figures, Headline
from profiler_core.spec import schema
from profiler_core.spec.config import ALWAYS_MEASURED, RunConfig
from profiler_core.spec.errors import ConfigError, RunFormatError, SaveError, shown
from profiler_core.spec.headline import HeadlineFacts, written_facts
from profiler_core.storage import leftovers, outputs
from profiler_core.storage.index import record_run
from profiler_core.storage.outputs import (
    NotOwned,
    Owned,
    make_parents,
    owned_folder,
    remove_made,
    replace_folder,
    write_manifest,
)
from profiler_core.storage.runfolder import (
    V1_METHODS,
    is_run_file_name,
    is_tool_run,
    json_safe,
    read_summary,
    trace_name,
    trace_paths,
)
from profiler_core.storage.tablelimits import check_table_file, table_row_limit

# Largest time a table may hold: a step of more than ~11 days is not a measurement.
MAX_TIME_MS = 1e9
# A mode or timing method is a short identifier (it appears in file names, legends and labels).
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_+-]{0,39}")
# Columns that can never be negative (times, counts, shares of a total).
_NON_NEGATIVE = {
    "latency": ("trial", "iteration", "steps", "gpu_ms", "wall_ms"),
    "stats": ("count", "mean_ms", "median_ms", "p10_ms", "p90_ms", "p99_ms", "iqr_ms", "min_ms",
              "max_ms"),
    "launch_split": ("iteration", "span_us", "cpu_launch_us", "gpu_busy_us", "launches", "kernels"),
    "kernels": ("calls_per_iter", "total_us", "mean_us", "min_us", "max_us", "share_of_gpu_pct"),
    "breakdown": ("eager_us", "mode_us"),
    "modes": ("median_ms", "one_time_ms", "graphs_recorded"),
    "repeats": ("repeat", "pid", "eager_median_ms", "graph_median_ms", "run_wall_s"),
    "rank_latency": ("rank", "trial", "iteration", "steps", "gpu_ms", "wall_ms"),
    "ranks": ("rank",),
}

# Breakdown components that may be negative: other CPU time is the window less its launch calls,
# which exceed the window when several threads launch at once (``trace``).
_SIGNED_COMPONENTS = {"cpu_other"}
# Figures derived from measurements that a finite measurement can make as large as it likes (a
# ratio to a tiny figure, the share of a tiny saving, the steps a tiny saving takes to pay a
# one-time cost back): finite, but not bounded like a measurement.
_UNBOUNDED = {
    "metrics": ("value", "eager_value", "ratio_to_eager"),
    "breakdown": ("share_of_saving_pct",),
    "attribution": ("share_of_saving_pct",),
    "modes": ("speedup", "speedup_ci_low", "speedup_ci_high"),
    "ranks": ("value",),
}

# Text columns whose writer stores "" for "none" (a kernel no operator launched): an empty cell
# reads back as "", not as missing.
_MAY_BE_EMPTY_TEXT = {"kernels": ("operator",)}

# Column dtypes that are not float: everything else in a table is read as a float.
_TEXT_COLUMNS = {"mode", "method", "phase", "rule", "component", "kernel", "kernel_full", "metric",
                 "source", "operator", "strategy", "label"}
_INT_COLUMNS = {"trial", "iteration", "steps", "count", "launches", "kernels", "repeat", "pid",
                "rank", "step", "shape", "bucket"}
_BOOL_COLUMNS = {"match", "shown"}


SCRATCH_PREFIX = "profiler_core_traces_"  # the private folder a run keeps its traces in
UNSAVED_PREFIX = "profiler_core_unsaved_"  # where a run goes when its folder cannot be written
RUN_KIND = "run"  # a run folder's manifest kind


def _refused_output(message: str, hint: str) -> ConfigError:
    return ConfigError("out", message, hint)


def run_files(path: Path) -> Owned:
    """What ``--overwrite`` removes from the run folder ``path``; ``NotOwned`` (naming the entry)
    when the folder is not wholly one run of this tool.

    The rule: ``path`` is a real folder holding one of this tool's runs (:func:`is_tool_run`) and
    nothing else: every entry is a regular file (no links, no subfolders) named as this tool
    names a run's files (:func:`is_run_file_name`) or ``manifest.json``. A run saved with a
    manifest (this version on) must also match it: every file listed there, with the size and
    content hash it was written with, so a file edited since is refused too. A run saved by an
    earlier version has no manifest, and the names alone decide: exactly the names the tool
    wrote then (no rank traces)."""
    if not is_tool_run(path):
        raise NotOwned("", "is not a run folder of this tool")
    return owned_folder(Path(path), RUN_KIND, functools.partial(is_run_file_name, listed=True),
                        unlisted_ok=is_run_file_name)


def write_run_folder(target: Path, write_files: Callable[[Path], Iterable[str]]) -> Path:
    """Create the new run folder ``target`` from files written outside a ``RunResult`` (an
    uploaded run, unpacked), by the rule every run folder is written by: ``write_files(staging)``
    writes the run's files into a staging folder beside ``target`` and returns their names (each
    a name this tool gives a run's file), the manifest lists them with their sizes and content
    hashes, and the staging folder becomes ``target``. ``target`` must not exist; on any error
    nothing is left behind and the error is raised."""
    target = Path(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    made = False
    try:
        names = list(write_files(staging))
        strange = [name for name in names if not is_run_file_name(name)]
        if strange:
            raise ValueError(f"not the name of a run's file: {shown(strange[0])}")
        write_manifest(staging, RUN_KIND, names)
        os.mkdir(target)  # refuses a folder or file already there
        made = True
        os.replace(staging, target)  # onto the empty folder just made
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # our own staging folder only
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(target)  # still the empty folder made above
        raise
    return target


RUN_FOLDER = outputs.FolderKind("run", "the run", "runs/seed", "nothing was written there", "files")


def check_output(directory: str | os.PathLike, overwrite: bool = False) -> Path:
    """The run folder to write, checked before anything runs: a new folder whose parent can be
    written, or (with ``overwrite``) a folder holding one of this tool's earlier runs and nothing
    else (:func:`run_files`). Anything else is refused with ``ConfigError`` on ``out`` and left
    untouched. The path is taken as :func:`outputs.output_path` reads it (``~`` expanded, ``..``
    taken lexically); nothing is created (the parents made to probe the location are removed)."""
    return outputs.check_output_folder(directory, overwrite, RUN_FOLDER, run_files)


def check_writable(target: Path, described: str) -> None:
    """Refuse (``ConfigError`` on ``out``) a folder that could not be created at ``target``; the
    probe leaves nothing behind (:func:`outputs.check_writable`)."""
    outputs.check_writable(target, described, lambda reason: _refused_output(
        reason, "choose a folder on a writable disk"))


def _reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__


def _refuse_booleans(name: str, raw: pd.DataFrame, path: Path) -> None:
    """true/false in a numeric column would be read as 1/0: refuse it instead."""
    for column in schema.TABLE_FILES[name][1]:
        if column in _TEXT_COLUMNS or column in _BOOL_COLUMNS or column not in raw.columns:
            continue
        values = raw[column]
        if values.dtype == bool or (values.dtype == object and values.astype(str).str.strip()
                                    .str.lower().isin(("true", "false")).any()):
            raise RunFormatError(f"{path}: column {column} holds true/false where numbers belong",
                                 "the file was damaged or edited; run again")


def _check_values(name: str, frame: pd.DataFrame, path: Path) -> None:
    """Every number finite (or NaN: not measured), times in range, counts and durations not
    negative, modes and methods short identifiers."""
    def refuse(what: str) -> None:
        raise RunFormatError(f"{path}: {what}", "the file was damaged or edited; run again")

    for column in schema.TABLE_FILES[name][1]:
        if column in _TEXT_COLUMNS or column in _BOOL_COLUMNS:
            continue
        values = pd.to_numeric(frame[column], errors="coerce").astype(float)
        if values.isin([math.inf, -math.inf]).any():
            refuse(f"column {column} holds an infinite value")
        if column not in _UNBOUNDED.get(name, ()) and (
                values.abs() > (MAX_TIME_MS * 1e3 if name != "nvml" else 1e12)).any():
            refuse(f"column {column} holds a value beyond any measurement")
        negative = values < 0
        if name == "breakdown":
            signed = frame["component"].isin(_SIGNED_COMPONENTS)
            negative &= ~signed.to_numpy(dtype=bool, na_value=False)
        if column in _NON_NEGATIVE.get(name, ()) and negative.any():
            refuse(f"column {column} holds a negative value")
        if column.endswith("_ms") and (values > MAX_TIME_MS).any():
            refuse(f"column {column} holds a time beyond {MAX_TIME_MS:g} ms")
    for column in ("mode", "method"):
        if column in frame.columns and len(frame):
            if frame[column].isna().any():
                refuse(f"column {column} is empty in a row")
            bad = [str(v) for v in frame[column] if not _IDENTIFIER.fullmatch(str(v))]
            if bad:
                refuse(f"column {column} holds {bad[0][:40]!r}, which is not a mode or method name")
    if name == "latency" and len(frame):
        if not frame["method"].isin(schema.LATENCY_METHODS).all():
            refuse(f"column method must be one of {', '.join(schema.LATENCY_METHODS)}")
        if (frame["gpu_ms"].isna() & frame["wall_ms"].isna()).any():
            refuse("a timed iteration has neither a GPU nor a wall time")
        if (frame["steps"] < 1).any():
            refuse("column steps must be at least 1")
    if name == "stats" and len(frame) and frame["median_ms"].isna().any():
        refuse("a statistics row has no median")
    if name == "phases" and len(frame) and (frame["end_s"] < frame["start_s"]).any():
        refuse("a phase ends before it starts")


def empty_table(name: str) -> pd.DataFrame:
    """The table ``name`` with its columns and no rows."""
    return coerce_table(name, pd.DataFrame(columns=schema.TABLE_FILES[name][1]))


def coerce_table(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Columns in schema order with their dtypes; a missing column is an error."""
    columns = schema.TABLE_FILES[name][1]
    later = [c for c in schema.LATER_COLUMNS.get(name, ()) if c not in frame.columns]
    if later:  # a run written before these columns existed: they are empty
        frame = frame.assign(**{c: "" if c in _TEXT_COLUMNS else math.nan for c in later})
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise RunFormatError(f"table {name} lacks columns {missing}",
                             "the run directory was not written by this tool, or was edited by hand")
    frame = frame[columns].copy()
    for column in columns:
        if column in _TEXT_COLUMNS:
            frame[column] = frame[column].astype("string")
        elif column in _BOOL_COLUMNS:
            frame[column] = frame[column].astype("boolean")
        elif column in _INT_COLUMNS:
            frame[column] = pd.to_numeric(frame[column], errors="raise").astype("Int64")
        else:
            frame[column] = pd.to_numeric(frame[column], errors="raise").astype(float)
    return frame.reset_index(drop=True)


def _pandas_error(error: Exception) -> str:
    """A pandas parse error's text on one line (its messages may end in a line break), shortened."""
    return shown(" ".join(str(error).split()), 200)


@dataclass
class RunResult:
    """One run: config, environment, headline (the run's facts that are not per-mode figures:
    those are in the metrics table, read through :attr:`figures` and :attr:`pair`), tables and
    the paths of its traces."""

    config: RunConfig
    environment: dict[str, Any]
    headline: HeadlineFacts
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    complete: bool = True
    trace_paths: dict[str, Path | None] = field(default_factory=dict)
    scratch_dir: Path | None = None  # private folder holding the traces until saved

    def table(self, name: str) -> pd.DataFrame:
        return self.tables.get(name, empty_table(name))

    @property
    def figures(self) -> Figures:
        """Every per-mode figure, once (metrics.csv; an older run's are brought into it on load)."""
        return Figures.from_table(self.table("metrics"))

    @property
    def pair(self) -> Headline:
        """The article's pair, eager against the graph."""
        return Headline.of(self.figures, self.headline)

    def summary_dict(self) -> dict[str, Any]:
        return {
            "schema_version": schema.SCHEMA_VERSION,
            "tool": "profiler_core",
            "complete": self.complete,
            "config": self.config.to_dict(),
            "environment": self.environment,
            "headline": self.headline,
            "notes": list(self.notes),
        }

    def save(self, directory: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the run directory atomically: a staging folder beside it (its manifest written
        last), then a rename. A folder already there is replaced only when ``overwrite`` is set
        and it holds one of this tool's runs and nothing else (:func:`run_files`); exactly that
        run's files are then removed. Anything else is refused (``ConfigError`` on ``out``) and
        left as it was. When the folder cannot be written (``OSError``: a full disk, a read-only
        disk...), the run is written under the system's temporary folder instead and
        ``SaveError`` says where, or that nothing could be saved and why. A headline key no
        ``spec.headline.HeadlineFacts`` declares is refused first (``UndeclaredFactError``)."""
        self.headline = written_facts(self.headline)  # as summary.json holds it, checked
        target = check_output(directory, overwrite)
        leftovers.remove_stale(target.parent, run_files)  # what killed runs of the tool left there
        try:
            self._save_at(target, overwrite)
        except OSError as error:
            raise self.keep_elsewhere(directory, _reason(error)) from None
        self.trace_paths = {mode: (target / trace_name(mode, path) if path else None)
                            for mode, path in self.trace_paths.items()}
        record_run(target)  # never raises; a busy or damaged index catches up on the next listing
        return target

    def _save_at(self, target: Path, overwrite: bool) -> None:
        made = make_parents(target)
        staging = None
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            self._write_into(staging)
            if os.path.lexists(target):
                check_output(target, overwrite)  # still one of our runs, just before it goes
                try:
                    replace_folder(target, run_files, new=staging)  # checked again once aside
                except NotOwned as why:
                    raise outputs.not_replaced(RUN_FOLDER, repr(str(target)), why) from None
            else:
                os.replace(staging, target)
        except BaseException:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)  # our own staging folder only
            remove_made(made)
            raise

    def keep_elsewhere(self, wanted: str | os.PathLike, reason: str) -> SaveError:
        """Write the run into a new folder under the system's temporary folder, after it could
        not be saved at ``wanted`` (``reason``), so that its measurements are not lost; returns
        the ``SaveError`` to raise, which says where the run is, or that nothing could be saved
        and why."""
        shown = repr(os.fspath(wanted))
        folder = None
        try:
            folder = Path(tempfile.mkdtemp(prefix=UNSAVED_PREFIX))
            self._write_into(folder)
        except OSError as error:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)  # our own, just made
            where = repr(str(folder or tempfile.gettempdir()))
            return SaveError(f"the run could not be saved in {shown} ({reason}) nor in {where} "
                             f"({_reason(error)}), so its measurements are lost",
                             "free some disk space, or choose a folder on another disk with "
                             "--out, and run again")
        self.trace_paths = {mode: (folder / trace_name(mode, path) if path else None)
                            for mode, path in self.trace_paths.items()}
        return SaveError(f"the run could not be saved in {shown} ({reason}); it was saved in "
                         f"{str(folder)!r} instead",
                         "free some disk space, then move that folder where you want it")

    def _write_into(self, directory: Path) -> None:
        """Write every file of the run into ``directory`` (new, empty), then its manifest. Files
        are written through open handles (pandas would expand a ``~`` in a path)."""
        written = [schema.SUMMARY_FILE]
        with open(directory / schema.SUMMARY_FILE, "w", encoding="utf-8") as handle:
            json.dump(json_safe(self.summary_dict()), handle, indent=2, sort_keys=False)
        for name, (file_name, _) in schema.TABLE_FILES.items():
            with open(directory / file_name, "w", encoding="utf-8", newline="") as handle:
                coerce_table(name, self.table(name)).to_csv(handle, index=False)
            written.append(file_name)
        for mode, path in self.trace_paths.items():
            if path is not None and Path(path).is_file():
                written.append(trace_name(mode, path))
                shutil.copyfile(path, directory / written[-1])
        write_manifest(directory, RUN_KIND, written)

    def release_scratch(self) -> None:
        """Delete the private folder the run kept its traces in before saving (if any)."""
        scratch, self.scratch_dir = self.scratch_dir, None
        if scratch is not None and Path(scratch).name.startswith(SCRATCH_PREFIX):
            shutil.rmtree(scratch, ignore_errors=True)
            self.trace_paths = {mode: (None if path is not None and Path(scratch) in Path(path).parents
                                       else path) for mode, path in self.trace_paths.items()}

    @classmethod
    def load(cls, directory: str | os.PathLike) -> RunResult:
        """Read a run directory written by ``save``; a malformed one raises ``RunFormatError``.
        It needs no manifest (older runs have none), checks the schema version, the files, the
        columns and the values (finite, in range, of the right kind), and brings a run of an
        older schema up to date; nothing from the directory is ever executed."""
        directory = Path(directory)
        summary = read_summary(directory)
        version, config = summary.version, summary.config
        tables = {}
        for name, (file_name, _) in schema.TABLE_FILES.items():
            path = directory / file_name
            if not path.is_file():
                tables[name] = empty_table(name)
                continue
            # rows, line lengths and NUL bytes checked in chunks before pandas parses the file
            check_table_file(path, table_row_limit(name, config, summary.environment))
            try:
                frame = pd.read_csv(path)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
                raise RunFormatError(f"{path} is not a readable CSV: {_pandas_error(error)}",
                                     "the file was damaged or edited; run again") from None
            if version == 1:
                frame = _upgrade_v1_table(name, frame)
            if version < 3:
                frame = _upgrade_v2_table(name, frame)
            _refuse_booleans(name, frame, path)  # before anything is written into a column
            for column in _MAY_BE_EMPTY_TEXT.get(name, ()):
                if column in frame.columns:  # an empty cell is the writer's "" (CSV cannot tell)
                    frame[column] = frame[column].astype("string").fillna("")
            if name == "metrics":
                frame = _upgrade_never_pays_back(frame)
            try:
                tables[name] = coerce_table(name, frame)
            except (ValueError, TypeError, OverflowError) as error:
                raise RunFormatError(f"{path} holds a non-numeric value (or one out of range): "
                                     f"{_pandas_error(error)}",
                                     "the file was damaged or edited; run again") from None
            _check_values(name, tables[name], path)
        if version < 3:  # no metrics.csv: its figures from the other tables and the headline
            tables["metrics"] = coerce_table("metrics", _upgrade_never_pays_back(metrics.build(
                tables["modes"], tables["stats"], summary.stored_figures, from_older_run=True)))
        elif version < 4:  # a figure only the headline held (a run stopped early) joins the rest
            tables["metrics"] = coerce_table("metrics", _upgrade_never_pays_back(
                metrics.with_figures(tables["metrics"], summary.stored_figures)))
        if not (directory / schema.TABLE_FILES["attribution"][0]).is_file():  # written before it existed
            tables["attribution"] = coerce_table("attribution", attribution.build(
                tables["stats"], tables["launch_split"], tables["latency"]))
        traces = trace_paths(directory, [*ALWAYS_MEASURED, *config.modes])
        return cls(config=config, environment=summary.environment, headline=summary.headline,
                   tables=tables, notes=summary.notes, complete=summary.complete,
                   trace_paths=traces)


def _upgrade_never_pays_back(frame: pd.DataFrame) -> pd.DataFrame:
    """metrics.csv as older versions of the tool wrote it stored a mode that never pays back its one-time
    cost as ``break_even_iters = inf``: today that is ``pays_back = 0`` with ``break_even_iters``
    NaN (every stored figure finite or NaN). Modes without ``pays_back`` get it from their
    break-even."""
    if not {"mode", "metric", "value"} <= set(frame.columns) or frame.empty:
        return frame
    frame = frame.copy()
    values = pd.to_numeric(frame["value"], errors="coerce")
    is_break_even = frame["metric"].astype(str) == "break_even_iters"
    never = is_break_even & (values == float("inf"))
    frame.loc[never, "value"] = float("nan")
    has_pay_back = set(frame.loc[frame["metric"].astype(str) == "pays_back", "mode"].astype(str))
    added = []
    for row, is_never in zip(frame[is_break_even].itertuples(), never[is_break_even]):
        if str(row.mode) in has_pay_back:
            continue
        finite_steps = pd.notna(pd.to_numeric(row.value, errors="coerce"))
        pays = 0.0 if is_never else (1.0 if finite_steps else float("nan"))
        added.append({"mode": row.mode, "metric": "pays_back", "value": pays})
    if added:
        frame = pd.concat([frame, pd.DataFrame(added)], ignore_index=True)
    return frame


def _upgrade_v1_table(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """A schema-1 table in today's columns and method names."""
    frame = frame.copy()
    if name == "latency":
        if "method" not in frame.columns:
            frame.insert(min(1, len(frame.columns)), "method", "cold")
    if name == "stats" and "method" in frame.columns:
        frame["method"] = frame["method"].replace(V1_METHODS)
    return frame


def _upgrade_v2_table(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """A schema-2 (or 1) table in today's columns: its breakdown was the graph's, in graph_us."""
    if name != "breakdown" or "mode" in frame.columns:
        return frame
    frame = frame.rename(columns={"graph_us": "mode_us"})
    frame.insert(0, "mode", "graph")
    return frame
