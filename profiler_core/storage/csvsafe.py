"""CSV cells that a spreadsheet would run as formulas, made inert.

Scope: one helper for every CSV a user downloads or ``trace-stats`` writes. A spreadsheet
(Excel, LibreOffice, Google Sheets) opening a CSV treats a cell starting with ``=``, ``+``,
``-`` or ``@`` (or a tab or carriage return before one) as a formula, so a kernel named
``=cmd|' /C calc'!A0`` would run when the table is opened ("CSV injection"). Such a text cell
gets a single quote in front, which the spreadsheet shows as text. Numbers are left as they are:
numeric columns are not touched, and neither is a text cell that is a plain number (``-1.5``,
``-inf``), which a spreadsheet reads as that number, not as a formula. A line break inside a
cell must not start a new row either: :func:`csv_bytes` ends lines with CRLF (as RFC 4180 does),
so every cell holding a carriage return or a line feed is quoted.

A run directory's own CSVs (``RunResult.save``) are written as measured, since the tool reads
them back; the dashboard's zip of a run passes its tables through here (see
``dashboard.rundata.run_zip_bytes``).
"""

from __future__ import annotations

import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"
LINE_END = "\r\n"


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """``frame`` as CSV for a user (UTF-8, header row, no index), formulas made inert."""
    text = neutralise_formulas(frame).to_csv(index=False, lineterminator=LINE_END)
    return text.encode("utf-8", errors="backslashreplace")


def neutralise_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells cannot start a spreadsheet formula.

    Only cells that are ``str`` in text (object or string) columns change: one starting with one
    of ``FORMULA_STARTS`` gets ``QUOTE`` in front, unless the whole cell is a number.
    """
    safe = frame.copy()
    for position in range(frame.shape[1]):
        series = frame.iloc[:, position]
        if not (pd.api.types.is_object_dtype(series) or pd.api.types.is_string_dtype(series)):
            continue
        safe.isetitem(position, series.map(_inert_cell, na_action="ignore"))
    return safe


def _inert_cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _is_number(value):
        return QUOTE + value
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
