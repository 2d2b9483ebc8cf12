"""The run folder's contract: which files a run holds, how large each may be, and its summary.

Scope: the names of a run's files (summary.json, the tables of ``schema.TABLE_FILES``, a Chrome
trace per mode), one size limit per kind of file, the check that those files are real files
within their limits, and the one reader of summary.json (:func:`read_summary` for a folder,
:func:`parse_summary` for its bytes: JSON, schema version, the kinds of its parts, the config,
and the upgrade of older summaries; :func:`read_figures` for the figures without the tables).
``results`` (the whole run), the dashboard (folders and uploads), the index and the sweeps all
read a run's summary through here.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from profiler_core.analysis import metrics
from profiler_core.analysis.figures import Figures
from profiler_core.spec import schema
from profiler_core.spec.config import MODE_NAMES, RunConfig
from profiler_core.spec.errors import ConfigError, RunFormatError
from profiler_core.spec.headline import HeadlineFacts, read_facts
from profiler_core.storage.outputs import TOOL_NAME, is_version, read_folder_json
from profiler_core.storage.tablelimits import check_table_file, table_row_limit

SUMMARY_FILE = schema.SUMMARY_FILE
# A file larger than its limit is not one of ours: a summary is a few kilobytes, a table at most
# tens of megabytes (its rows are checked against the config: ``tablelimits``), a trace hundreds.
MAX_SUMMARY_BYTES = 16 * 2**20
MAX_TABLE_BYTES = 256 * 2**20
MAX_TRACE_BYTES = 2**30
TABLE_OF_FILE = {file: name for name, (file, _) in schema.TABLE_FILES.items()}
TRACE_SUFFIXES = ("", ".gz")  # a trace is packed (.gz) when large
# A data-parallel rank's trace (``schema.rank_trace_key``): written only by versions that write a
# manifest listing it.
_RANK_TRACE_NAME = re.compile(r"trace_(?P<mode>[a-z_]+)_rank(0|[1-9][0-9]{0,5})\.json(\.gz)?")


def trace_names(modes: Iterable[str]) -> list[str]:
    """The names a trace of each of ``modes`` may have in a run folder (plain and packed)."""
    return [schema.trace_file(mode) + suffix for mode in modes for suffix in TRACE_SUFFIXES]


# Every file a run folder of this tool may hold, for any mode the engine knows.
KNOWN_FILES = frozenset({SUMMARY_FILE, *TABLE_OF_FILE, *trace_names(MODE_NAMES)})


def is_run_file_name(name: str, listed: bool = False) -> bool:
    """Whether this tool writes a file of that name into a run folder: summary.json, a table of
    ``schema.TABLE_FILES`` or the trace of a mode it knows (``trace_<mode>.json``, ``.json.gz``);
    with ``listed`` (the run's manifest lists it) also a data-parallel rank's trace
    (``trace_<mode>_rank<R>.json``, ``.json.gz``), which only runs with a manifest hold."""
    if name in KNOWN_FILES:
        return True
    rank_trace = _RANK_TRACE_NAME.fullmatch(name)
    return listed and rank_trace is not None and rank_trace["mode"] in MODE_NAMES


def size_limit(name: str) -> int:
    """The largest a run file of that name may be, in bytes."""
    if name == SUMMARY_FILE:
        return MAX_SUMMARY_BYTES
    return MAX_TABLE_BYTES if name in TABLE_OF_FILE else MAX_TRACE_BYTES


def check_files(path: Path) -> None:
    """Refuse a run folder that is a link, or whose known files are links, not regular files, or
    over their size limit (``RunFormatError`` naming the file). Unknown files are ignored."""
    path = Path(path)
    try:
        if path.is_symlink():
            raise RunFormatError(f"{path.name} is a link; links are not followed",
                                 "copy the run folder itself into the runs folder")
        for name in sorted(KNOWN_FILES):
            try:
                info = (path / name).lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(info.st_mode):
                raise RunFormatError(f"{name} in {path.name} is a link; links are not followed",
                                     "replace the link with the file itself")
            if not stat.S_ISREG(info.st_mode):
                raise RunFormatError(f"{name} in {path.name} is not a regular file",
                                     "the run folder was not written by this tool")
            limit = size_limit(name)
            if info.st_size > limit:
                raise RunFormatError(f"{name} in {path.name} is {info.st_size / 2**20:,.0f} MiB, "
                                     f"over the {limit / 2**20:,.0f} MiB limit",
                                     "the file is not a run file, or was damaged")
    except OSError as exc:
        raise RunFormatError(f"{path.name} cannot be read: {exc}", "check its permissions") from None


@dataclass(frozen=True)
class Summary:
    """summary.json as read and brought up to the current schema (``version`` is the one it was
    written with). ``headline`` holds the run's facts that are not per-mode figures (those live
    in metrics.csv); ``stored_figures`` the per-mode figures an older headline (schema 1 to 3)
    held, mode -> metric -> value as stored (``metrics.split_headline``), empty from schema 4."""

    version: int
    complete: bool
    config: RunConfig
    environment: dict[str, Any]
    headline: HeadlineFacts  # its declared facts' types checked (``headline.read_facts``)
    notes: list[str]
    stored_figures: dict[str, dict[str, Any]]


def json_safe(value: Any) -> Any:
    """NaN and infinities become strings JSON can carry; everything else stays as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _from_json_safe(value: Any) -> Any:
    """summary.json as read back: "nan"/"inf" strings as floats, every text (keys too) with
    lone surrogates (``\\udcff`` escapes) as U+FFFD, which pyarrow and Streamlit refuse."""
    if isinstance(value, str):
        return float(value) if value in ("nan", "inf", "-inf") else schema.clean_text(value)
    if isinstance(value, dict):
        return {schema.clean_text(k) if isinstance(k, str) else k: _from_json_safe(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json_safe(v) for v in value]
    return value


_DAMAGED = "the file was damaged or edited; run again"
_PARTS = {"complete": bool, "config": dict, "environment": dict, "headline": dict, "notes": list}


def parse_summary(data: bytes) -> Summary:
    """A summary.json's bytes, checked (``RunFormatError`` saying what is wrong) and upgraded."""
    try:
        content = _from_json_safe(json.loads(data.decode("utf-8")))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RunFormatError(f"{SUMMARY_FILE} is not valid JSON ({type(exc).__name__}: "
                             f"{str(exc)[:200]})",
                             _DAMAGED) from None
    if not isinstance(content, dict):
        raise RunFormatError(f"{SUMMARY_FILE} does not hold a JSON object",
                             "choose a run written by python -m profiler_core run")
    version = content.get("schema_version")
    if not isinstance(version, int) or not is_version(version, schema.READABLE_SCHEMA_VERSIONS):
        raise RunFormatError(
            f"{SUMMARY_FILE} has schema_version {version!r}, so it is not a run summary of a "
            f"version this tool reads ({', '.join(map(str, schema.READABLE_SCHEMA_VERSIONS))})",
            "open it with the version of the tool that wrote it")
    for key, kind in _PARTS.items():
        if not isinstance(content.get(key), kind):
            raise RunFormatError(f"{SUMMARY_FILE}: {key!r} must be a JSON {kind.__name__}",
                                 _DAMAGED)
    try:
        config = RunConfig.from_dict(content["config"])
    except (ConfigError, TypeError, ValueError) as error:
        raise RunFormatError(f"{SUMMARY_FILE} holds an invalid config: {error}",
                             "the file was edited by hand; run again") from None
    headline, notes = content["headline"], [str(note) for note in content["notes"]]
    if version == 1:
        headline, notes = _upgrade_v1_summary(headline, notes)
    stored_figures: dict[str, dict[str, Any]] = {}
    if version < 4:
        headline, stored_figures = metrics.split_headline(headline)
    return Summary(version=version, complete=content["complete"], config=config,
                   environment=content["environment"], headline=read_facts(headline), notes=notes,
                   stored_figures=stored_figures)


def read_summary(path: Path) -> Summary:
    """The summary of the run folder ``path``, its files checked first (:func:`check_files`)."""
    path = Path(path)
    file = path / SUMMARY_FILE
    if not file.is_file():
        raise RunFormatError(f"{path} has no {SUMMARY_FILE}",
                             "choose a run folder written by python -m profiler_core run")
    check_files(path)
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise RunFormatError(f"{SUMMARY_FILE} in {path.name} cannot be read: {exc}",
                             "check its permissions") from None
    return parse_summary(data)


def is_tool_run(path: Path) -> bool:
    """Whether ``path`` is a real folder holding one of this tool's runs (its summary.json says
    so, with a schema version this tool reads: a whole number, not true/false); links, files and
    any other folder are not. Recognising a run is not owning its folder (``results.run_files``)."""
    content = read_folder_json(Path(path), SUMMARY_FILE, MAX_SUMMARY_BYTES)
    return (isinstance(content, dict) and content.get("tool") == TOOL_NAME
            and is_version(content.get("schema_version"), schema.READABLE_SCHEMA_VERSIONS))


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a folder with a summary.json (the cheap test a listing makes)."""
    try:
        return Path(path).is_dir() and (Path(path) / SUMMARY_FILE).is_file()
    except (OSError, ValueError):
        return False


def trace_paths(directory: Path, modes: Iterable[str]) -> dict[str, Path | None]:
    """Each mode's trace in ``directory`` (plain, else packed), None where it has none."""
    found: dict[str, Path | None] = {}
    for mode in dict.fromkeys(modes):
        plain, packed = (directory / name for name in trace_names([mode]))
        found[mode] = plain if plain.is_file() else (packed if packed.is_file() else None)
    return found


def trace_name(mode: str, path: str | os.PathLike) -> str:
    """The name a mode's trace has in a run folder: ``trace_<mode>.json``, ``.json.gz`` if packed."""
    return schema.trace_file(mode) + (".gz" if os.fspath(path).endswith(".gz") else "")


# Schema 1 timed each iteration from an idle device only: its methods are today's cold start.
V1_METHODS = {"cuda_event": "cold_event", "sync_wall": "cold_wall"}


def _upgrade_v1_summary(headline: dict[str, Any], notes: list[str]) -> tuple[dict[str, Any], list[str]]:
    """A schema-1 headline: its speedup is the cold-start one (a synchronise before every step)."""
    headline = dict(headline)
    method = headline.get("timing_method")
    if isinstance(method, str):
        headline["timing_method"] = V1_METHODS.get(method, method)
    return headline, notes + [
        "recorded by an earlier version of this tool (run schema 1), which timed every step from "
        "an idle device (cold start): its headline is the cold-start speedup, not the steady "
        "state of a training loop; run it again for the steady-state figure"]


def read_figures(path: Path, summary: Summary) -> Figures:
    """The figures of the run folder ``path`` without reading its other tables: its metrics.csv
    (checked against the rows a run of its config writes, as ``RunResult.load`` does; none when
    missing or unreadable), then those only an older summary's headline held."""
    file = Path(path) / schema.TABLE_FILES["metrics"][0]
    try:
        check_table_file(file, table_row_limit("metrics", summary.config, summary.environment))
        table = pd.read_csv(file)
    except (OSError, ValueError, RunFormatError, pd.errors.ParserError, pd.errors.EmptyDataError):
        table = pd.DataFrame(columns=schema.METRIC_COLUMNS)
    return Figures.from_table(metrics.with_figures(table, summary.stored_figures))
