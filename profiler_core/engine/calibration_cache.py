"""The calibration cache: the prediction's graph costs per (GPU, driver, torch, CUDA), kept in one
small JSON file in the user's cache folder so a later run on the same setup need not measure
them again. A damaged file is ignored (and replaced by the next measurement); nothing but that
one file is ever written, and nothing is deleted. The folder is used only when it is this user's
alone (``bytecode.private_folder``: no link, writable by no one else).
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from profiler_core.spec.bytecode import private_folder, tool_cache_folder
from profiler_core.storage.outputs import is_version, replace_file

CACHE_FILE_NAME = "calibration.json"
# The file's format, and the calibration method it caches: a change to either reads older
# entries as missing.
CACHE_FORMAT = 1
MAX_CACHE_BYTES = 1 << 20  # a larger file is not read (damaged, or not ours)
MAX_CACHE_ENTRIES = 16  # setups kept; the oldest measurement is dropped beyond this
MAX_COST_US = 1e6  # a cached cost beyond one second (or below zero) is damage
MAX_CACHED_COUNT = 2**40  # replays timed or tensor elements beyond this are damage


@dataclass(frozen=True)
class GraphFit:
    """The batch-independent part of a calibration: what a graph replay costs on one setup."""

    launch_us: float  # the fitted line's intercept
    per_node_us: float  # its slope
    node_counts: tuple[int, ...]  # kernels per calibration graph
    timed: tuple[int, ...]  # replays timed per graph
    replay_us: tuple[float, ...]  # CUDA events: time per replay
    busy_us: tuple[float, ...]  # torch.profiler: the kernels' busy time per replay
    recorded: bool  # whether the profiler saw the kernels (their busy time was subtracted)
    elements: int  # elements of the calibration kernels' tensor
    held: str  # how the timed replays were queued
    device_name: str
    measured_at: str  # ISO 8601, UTC


def cache_path() -> Path:
    """``calibration.json`` in the tool's cache folder (``$XDG_CACHE_HOME/cuda-graph-profiler``,
    else under ``~/.cache``)."""
    return tool_cache_folder() / CACHE_FILE_NAME


def key_text(key: dict[str, str]) -> str:
    """One setup's entry name: its key's fields in a fixed order."""
    return json.dumps({name: key[name] for name in sorted(key)}, ensure_ascii=True)


class CalibrationCache:
    """The cache file at ``path``. Reading never raises; writing raises nothing either (a cache
    that cannot be written only costs the next run a measurement)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self, key: dict[str, str], node_counts: tuple[int, ...]) -> GraphFit | None:
        """The entry for ``key`` measured with ``node_counts``; None when there is none, or the
        file or the entry is damaged."""
        entry = self._entries().get(key_text(key))
        return _fit_from(entry, node_counts) if entry is not None else None

    def write(self, key: dict[str, str], fit: GraphFit) -> bool:
        """Store ``fit`` under ``key`` (other setups' entries kept, a damaged file replaced).
        The file is written beside itself and renamed over it; a path that is a link or not a
        regular file is left alone, and so is a folder that is not this user's alone (made with
        mode 0700 where missing). Returns whether it was written."""
        try:
            if private_folder(self.path.parent, self.path.parent) is not None:
                return False
            if os.path.lexists(self.path) and not stat.S_ISREG(os.lstat(self.path).st_mode):
                return False
            entries = self._entries()
            entries[key_text(key)] = {**asdict(fit), "key": key}
            kept = sorted(entries.items(), key=lambda item: str(item[1].get("measured_at", "")))
            text = json.dumps({"format": CACHE_FORMAT,
                               "entries": dict(kept[-MAX_CACHE_ENTRIES:])}, indent=1)
            replace_file(self.path, text.encode("utf-8"))
        except OSError:
            return False
        return True

    def _entries(self) -> dict[str, Any]:
        """The file's entries ({} when it is missing, unreadable, too large or not ours, or its
        folder is not this user's alone)."""
        folder = self.path.parent
        if not os.path.lexists(folder) or private_folder(folder, folder) is not None:
            return {}
        try:
            info = os.lstat(self.path)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CACHE_BYTES:
                return {}
            with open(self.path, encoding="utf-8") as handle:
                content = json.loads(handle.read(MAX_CACHE_BYTES + 1))
        except (OSError, ValueError, RecursionError):
            return {}
        if not (isinstance(content, dict) and is_version(content.get("format"), (CACHE_FORMAT,))
                and isinstance(content.get("entries"), dict)):
            return {}
        return {name: entry for name, entry in content["entries"].items()
                if isinstance(name, str) and isinstance(entry, dict)}


def _fit_from(entry: dict[str, Any], node_counts: tuple[int, ...]) -> GraphFit | None:
    """A cached entry as a :class:`GraphFit`, or None when any field is missing or out of range."""
    try:
        counts = tuple(entry["node_counts"])
        if counts != tuple(node_counts) or not all(type(c) is int for c in counts):
            return None
        finite = [entry["launch_us"], entry["per_node_us"], *entry["replay_us"]]
        if not (all(_in_range(value) for value in finite)
                and all(_in_range(value) or _is_nan(value) for value in entry["busy_us"])):
            return None  # busy times are NaN where the profiler saw no kernels
        timed, replay_us, busy_us = (tuple(entry[name]) for name in ("timed", "replay_us", "busy_us"))
        if not (len(timed) == len(replay_us) == len(busy_us) == len(counts)):
            return None
        if not (all(_is_count(t) for t in timed) and _is_count(entry["elements"])
                and type(entry["recorded"]) is bool):
            return None
        texts = [entry["held"], entry["device_name"], entry["measured_at"]]
        if not all(isinstance(text, str) and len(text) < 1000 for text in texts):
            return None
        return GraphFit(launch_us=float(entry["launch_us"]), per_node_us=float(entry["per_node_us"]),
                        node_counts=counts, timed=timed,
                        replay_us=tuple(float(v) for v in replay_us),
                        busy_us=tuple(float(v) for v in busy_us), recorded=entry["recorded"],
                        elements=entry["elements"], held=entry["held"],
                        device_name=entry["device_name"], measured_at=entry["measured_at"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def _in_range(value: object) -> bool:
    """A number (not a bool) from 0 to ``MAX_COST_US`` (an integer too large for a float is
    not; the options refuse negative constants too)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return 0.0 <= float(value) <= MAX_COST_US
    except OverflowError:
        return False


def _is_count(value: object) -> bool:
    """A whole number (not a bool) from 1 to ``MAX_CACHED_COUNT``."""
    return type(value) is int and 0 < value <= MAX_CACHED_COUNT


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)
