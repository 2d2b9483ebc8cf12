"""The CSV export's formula guard (storage.csvsafe): a cell a spreadsheet would run as a formula
gets a leading quote even when invisible or blank characters come before its ``=``, ``+``, ``-``
or ``@`` (spreadsheets skip them when they read a cell), and numbers stay numbers."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from profiler_core.storage.csvsafe import csv_bytes, neutralise_formulas

# What a spreadsheet skips before it decides that a cell is a formula.
LEADERS = [" ", "  ", "\n", "\r\n", "\t", "\u200b", "\ufeff", "\x00", "\u00a0", "\u2060",
           "\u3000", " \u200b\ufeff"]


@pytest.mark.parametrize("leader", LEADERS)
@pytest.mark.parametrize("start", ["=", "+", "-", "@"])
def test_a_formula_behind_blank_or_invisible_characters_is_made_inert(leader, start):
    cell = f"{leader}{start}cmd|' /C calc'!A0"
    safe = neutralise_formulas(pd.DataFrame({"kernel": [cell]}))
    assert safe["kernel"].tolist() == ["'" + cell]
    read = pd.read_csv(io.BytesIO(csv_bytes(pd.DataFrame({"kernel": [cell]}))), keep_default_na=False)
    assert read["kernel"].iloc[0].startswith("'")


@pytest.mark.parametrize("cell", [" 1.5", "\n-2", " -inf", "plain", " plain", "\u200bname", "a=b"])
def test_numbers_and_plain_text_behind_blanks_stay_as_they_are(cell):
    assert neutralise_formulas(pd.DataFrame({"kernel": [cell]}))["kernel"].tolist() == [cell]
