"""What may be asked of the run index: filters on a run's settings and figures, and the listing.

Scope: :class:`FieldFilter` and its checks, the names a filter may use (``is_figure``), the
command line's ``--where`` grammar (:func:`parse_where`) and the ``index`` command's table
(:func:`listing_rows`). No database here (``index`` runs the queries).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from profiler_core.analysis.metrics import headline_key
from profiler_core.spec.errors import ConfigError, quoted, shown
from profiler_core.spec.headline import FACT_TYPES
from profiler_core.spec.metrics import METRICS
from profiler_core.spec.schema import clean_text
from profiler_core.storage.index_rows import HEADLINE_COLUMNS

# Headline figures a filter may name even when no run in the folder has a value for them (a
# folder of CPU runs has no speedup; one whose graphs never pay back has no break-even): the
# filter then matches nothing instead of being refused.
ALWAYS_FILTERABLE = (*HEADLINE_COLUMNS, *(headline_key("graph", metric)
                                           for metric in ("break_even_iters", "pays_back")))
# Columns of a run that can be filtered besides its config fields and headline keys.
RUN_COLUMNS = {"gpu": "gpu", "gpu_name": "gpu_name", "device_type": "device_type",
               "torch_version": "torch_version", "cuda_version": "cuda_version",
               "driver_version": "driver_version", "sweep": "sweep", "name": "name",
               "complete": "complete"}
DATE_FIELD = "date"
# Headline figures a run of this tool may hold besides HEADLINE_COLUMNS (a CUDA run holds most; a
# CPU run, which times the eager step only, holds no graph figure and no speedup), as declared:
# every per-mode figure (``spec.metrics``) of every mode that may have it, under its filter name
# (``metrics.headline_key``), and every fact of the headline whose value is a number or a flag
# (``spec.headline``). A filter on one that no run here has matches no run; it is not an error. A
# name that is neither one of these (nor a repeats run's ``<figure>_between_...``), nor a setting,
# a run column or a key some indexed run has, is refused with the closest names.
FIGURE_NAMES = tuple(dict.fromkeys([
    *(headline_key(mode, spec.name) for spec in METRICS for mode in spec.modes),
    *(name for name, kind in FACT_TYPES.items() if kind in (float, int, bool))]))
MAX_FILTERS = 32  # --where options in one query
MAX_FILTER_VALUES = 1000  # values one --where may list (field=V1,V2,...)


@dataclass(frozen=True)
class FieldFilter:
    """Runs whose ``field`` is one of ``values`` (any of them) and within ``low``..``high``
    (numbers, inclusive; either end open). ``field`` is a RunConfig field, a headline key, one of
    ``RUN_COLUMNS`` or ``date`` (``low``/``high`` as ISO dates, compared by day)."""

    field: str
    values: tuple[Any, ...] = ()
    low: Any = None
    high: Any = None


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


def parse_number(text: str) -> float | None:
    """A finite number written in ASCII ("1_024", "2.5"); None otherwise."""
    try:
        if not str(text).isascii():
            return None
        number = float(str(text).replace("_", ""))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def truth(value: Any) -> int:
    if isinstance(value, str):
        return int(value.strip().lower() in ("1", "true", "yes", "on"))
    return int(bool(value))


def is_day(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def day(value: Any) -> str:
    if isinstance(value, date):
        return value.isoformat()[:10]
    text = str(value).strip()
    try:
        return date.fromisoformat(text[:10]).isoformat()
    except ValueError:
        raise ConfigError("where", f"date: {quoted(text)} is not a date",
                          "write dates as YYYY-MM-DD, a range as date=2026-11-30..2026-12-01") from None


def is_figure(name: str) -> bool:
    """Whether ``name`` is a headline figure a run of this tool may hold (whether or not any run
    here holds it)."""
    return name in HEADLINE_COLUMNS or name in FIGURE_NAMES or "_between_" in name


def parse_where(text: str) -> FieldFilter:
    """``field=value``, ``field=v1,v2`` (any of them), ``field=LOW..HIGH`` (either end may be
    left out), ``date=YYYY-MM-DD..YYYY-MM-DD``. ``ConfigError`` on ``where`` otherwise."""
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


def cell(value: Any, digits: str = ".4f") -> str:
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
            row["folder"], cell(row["started_at"])[:19], cell(row["gpu"]),
            cell(row["workload"]), cell(row["preset"]), cell(row["dtype"]), cell(row["batch"]),
            cell(row["eager_median_ms"]), cell(row["graph_median_ms"]),
            cell(row["speedup"], ".2f") + ("x" if not math.isnan(row["speedup"]) else ""),
            ("" if math.isnan(low) or math.isnan(high) else f"{low:.2f}-{high:.2f}"),
            "yes" if row["complete"] else ("unreadable" if row["problem"] else "no"),
            *[cell(row.get(f)) for f in extra]])
    return table
