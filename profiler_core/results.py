"""``RunResult``: everything one run measured, as tidy DataFrames plus JSON-able metadata.

Scope: the in-memory result and its run directory (``summary.json`` + one CSV per table + Chrome
traces). Saving is atomic (a temporary sibling directory, then a rename); loading checks the schema
version, the files and the columns, and never executes anything from the directory (no pickle).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from profiler_core import schema
from profiler_core.config import RunConfig
from profiler_core.errors import ConfigError, RunFormatError

# Column dtypes that are not float: everything else in a table is read as a float.
_TEXT_COLUMNS = {"mode", "method", "phase", "rule", "component", "kernel", "kernel_full", "metric",
                 "source"}
_INT_COLUMNS = {"trial", "iteration", "steps", "count", "launches", "kernels"}
_BOOL_COLUMNS = {"match"}


def empty_table(name: str) -> pd.DataFrame:
    """The table ``name`` with its columns and no rows."""
    return coerce_table(name, pd.DataFrame(columns=schema.TABLE_FILES[name][1]))


def coerce_table(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Columns in schema order with their dtypes; a missing column is an error."""
    columns = schema.TABLE_FILES[name][1]
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


def _json_safe(value: Any) -> Any:
    """NaN and infinities become strings JSON can carry; everything else stays as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _from_json_safe(value: Any) -> Any:
    if value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, dict):
        return {k: _from_json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json_safe(v) for v in value]
    return value


@dataclass
class RunResult:
    """One run: config, environment, headline numbers, tables and the paths of its traces."""

    config: RunConfig
    environment: dict[str, Any]
    headline: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    complete: bool = True
    trace_paths: dict[str, Path | None] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame:
        return self.tables.get(name, empty_table(name))

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

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the run directory atomically; an existing directory of that name is replaced."""
        target = Path(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            self._write_into(staging)
            if target.exists():
                retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
                os.replace(target, retired / target.name)
                os.replace(staging, target)
                shutil.rmtree(retired, ignore_errors=True)
            else:
                os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.trace_paths = {mode: (target / path.name if path else None)
                            for mode, path in self.trace_paths.items()}
        return target

    def _write_into(self, directory: Path) -> None:
        with open(directory / schema.SUMMARY_FILE, "w", encoding="utf-8") as handle:
            json.dump(_json_safe(self.summary_dict()), handle, indent=2, sort_keys=False)
        for name, (file_name, _) in schema.TABLE_FILES.items():
            coerce_table(name, self.table(name)).to_csv(directory / file_name, index=False)
        for mode, path in self.trace_paths.items():
            if path is not None and Path(path).exists():
                shutil.copyfile(path, directory / Path(path).name)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "RunResult":
        """Read a run directory written by ``save``; a malformed one raises ``RunFormatError``."""
        directory = Path(directory)
        summary_path = directory / schema.SUMMARY_FILE
        if not summary_path.is_file():
            raise RunFormatError(f"{directory} has no {schema.SUMMARY_FILE}",
                                 "choose a run directory written by python -m profiler_core run")
        try:
            summary = _from_json_safe(json.loads(summary_path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
            raise RunFormatError(f"{summary_path} is not valid JSON: {type(error).__name__}",
                                 "the file was damaged or edited; run again") from None
        version = summary.get("schema_version") if isinstance(summary, dict) else None
        if isinstance(version, bool) or not isinstance(version, int) or (
                version not in schema.READABLE_SCHEMA_VERSIONS):
            raise RunFormatError(
                f"{summary_path} has schema version {version!r}",
                "this tool reads versions "
                + ", ".join(str(v) for v in schema.READABLE_SCHEMA_VERSIONS))
        expected = {"complete": bool, "config": dict, "environment": dict, "headline": dict,
                    "notes": list}
        for key, kind in expected.items():
            if not isinstance(summary.get(key), kind):
                raise RunFormatError(f"{summary_path}: {key!r} must be a JSON {kind.__name__}",
                                     "the file was damaged or edited; run again")
        try:
            config = RunConfig.from_dict(summary["config"])
        except (ConfigError, TypeError) as error:
            raise RunFormatError(f"{summary_path} holds an invalid config: {error}",
                                 "the file was edited by hand; run again") from None
        tables = {}
        for name, (file_name, _) in schema.TABLE_FILES.items():
            path = directory / file_name
            if not path.is_file():
                tables[name] = empty_table(name)
                continue
            try:
                frame = pd.read_csv(path)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
                raise RunFormatError(f"{path} is not a readable CSV: {error}",
                                     "the file was damaged or edited; run again") from None
            if version == 1:
                frame = _upgrade_v1_table(name, frame)
            try:
                tables[name] = coerce_table(name, frame)
            except (ValueError, TypeError) as error:
                raise RunFormatError(f"{path} holds a non-numeric value: {error}",
                                     "the file was damaged or edited; run again") from None
        headline, notes = summary["headline"], [str(n) for n in summary["notes"]]
        if version == 1:
            headline, notes = _upgrade_v1_summary(headline, notes)
        traces = {}
        for mode, file_name in schema.TRACE_FILES.items():
            plain, packed = directory / file_name, directory / (file_name + ".gz")
            traces[mode] = plain if plain.is_file() else (packed if packed.is_file() else None)
        return cls(config=config, environment=summary["environment"], headline=headline,
                   tables=tables, notes=notes, complete=summary["complete"], trace_paths=traces)


# Schema 1 timed each iteration from an idle device only: its methods are today's cold start.
_V1_METHODS = {"cuda_event": "cold_event", "sync_wall": "cold_wall"}


def _upgrade_v1_table(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """A schema-1 table in today's columns and method names."""
    frame = frame.copy()
    if name == "latency":
        if "method" not in frame.columns:
            frame.insert(min(1, len(frame.columns)), "method", "cold")
    if name == "stats" and "method" in frame.columns:
        frame["method"] = frame["method"].replace(_V1_METHODS)
    return frame


def _upgrade_v1_summary(headline: dict[str, Any], notes: list[str]) -> tuple[dict[str, Any], list[str]]:
    """A schema-1 headline: its speedup is the cold-start one (a synchronise before every step)."""
    headline = dict(headline)
    method = headline.get("timing_method")
    if isinstance(method, str):
        headline["timing_method"] = _V1_METHODS.get(method, method)
    return headline, notes + [
        "recorded by an earlier version of this tool (run schema 1), which timed every step from "
        "an idle device (cold start): its headline is the cold-start speedup, not the steady "
        "state of a training loop; run it again for the steady-state figure"]
