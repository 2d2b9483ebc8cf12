"""CSV for people: cells a spreadsheet would run as formulas made inert, line ends safe.

Every CSV a user downloads or ``trace-stats`` writes passes through here: a text cell starting
with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return), also behind blank or invisible
characters a spreadsheet skips (spaces, line breaks, a zero-width space, a BOM, NUL), gets a
leading quote, numbers stay numbers, and rows end in CRLF so a line break inside a cell is always quoted. A run folder's own
CSVs are written as measured (the tool reads them back).
"""

from __future__ import annotations

import unicodedata

import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"
LINE_END = "\r\n"
# Unicode categories of the characters a spreadsheet skips before a formula: controls (NUL, line
# breaks) and format characters (zero-width space and joiners, the BOM, the word joiner).
_SKIPPED_CATEGORIES = ("Cc", "Cf")


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """``frame`` as CSV for a user (UTF-8, header row, no index), formulas made inert."""
    text = neutralise_formulas(frame).to_csv(index=False, lineterminator=LINE_END)
    return text.encode("utf-8", errors="backslashreplace")


def neutralise_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells cannot start a spreadsheet formula.

    Only cells that are ``str`` in text (object or string) columns change: one starting with one
    of ``FORMULA_STARTS``, after any blank or invisible characters (:func:`_visible_start`), gets
    ``QUOTE`` in front, unless the whole cell is a number.
    """
    safe = frame.copy()
    for position in range(frame.shape[1]):
        series = frame.iloc[:, position]
        if not (pd.api.types.is_object_dtype(series) or pd.api.types.is_string_dtype(series)):
            continue
        safe.isetitem(position, series.map(_inert_cell, na_action="ignore"))
    return safe


def _inert_cell(value: object) -> object:
    if isinstance(value, str) and (value.startswith(FORMULA_STARTS) or _visible_start(value)
                                   .startswith(FORMULA_STARTS)) and not _is_number(value):
        return QUOTE + value
    return value


def _visible_start(text: str) -> str:
    """``text`` from its first character a spreadsheet does not skip (whitespace, controls and
    format characters are skipped)."""
    for at, character in enumerate(text):
        if not (character.isspace() or unicodedata.category(character) in _SKIPPED_CATEGORIES):
            return text[at:]
    return ""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
