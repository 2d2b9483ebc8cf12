"""Small Streamlit helpers the views share: the open run (or what to do without one), a run's
header, charts, tables with CSV downloads, and the run/trace downloads.

Scope: presentation only; data comes from ``dashboard.analysis`` and figures from
``dashboard.charts``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dashboard import rundata, state
from dashboard.analysis.run_kind import no_profile_reason
from dashboard.rundata import OpenedRun
from profiler_core import ALWAYS_MEASURED, ProfilerError
from profiler_core.spec.config import preset_text

# Characters that would break the line or reorder it: C0/C1 controls, line and paragraph
# separators, bidirectional overrides. Each run of them shows as one space.
_LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")
_ASCII_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# Left after escaping, Streamlit's Markdown still rewrites plain text: links from bare URLs
# (http://, www.) and e-mail addresses, :streamlit: (a logo) and :emoji: shortcodes, and
# typographic arrows (->). An invisible word joiner after a ':' that something follows, after
# '@', after 'www' before '.', and inside '->'-style pairs stops every one of them.
_WORD_JOINER = "\u2060"
_JOIN_AFTER = re.compile(r"(\\:(?=\S)|\\@|(?i:www)(?=\\\.)|\\[-<>~](?=\\[->=]))")


def escape_md(text: object) -> str:
    """Text from a run, a file name, an upload or the worker, shown exactly as itself inside
    Markdown: no emphasis, heading, list, table, code, LaTeX, HTML, link, image, autolink,
    Streamlit directive (``:red[...]``, ``:material/...:``) or shortcode. Every ASCII punctuation
    character is backslash-escaped (CommonMark shows it literally), a line break becomes a
    space, and an invisible word joiner breaks what Streamlit would still rewrite."""
    flat = _LINE_BREAKING.sub(" ", str(text))
    escaped = _ASCII_PUNCTUATION.sub(r"\\\1", flat)
    return _JOIN_AFTER.sub(lambda match: match.group(0) + _WORD_JOINER, escaped)


def require_run() -> OpenedRun:
    """The open run for a view; otherwise say how to get one and stop the page."""
    run, problem = state.current_run()
    if run is None:
        if problem:
            st.error(escape_md(problem), icon=":material/block:")
        else:
            st.info("No run is open. Pick one in the sidebar under **Showing**, upload a zip on "
                    "the **Runs** page, or start a new run from the sidebar.")
        if not rundata.sample_run_available(state.sample_dir()):
            st.caption(sample_missing_text())
        st.stop()
    return run


def sample_missing_text() -> str:
    return ("The bundled sample run (dashboard/sample_run/, a real H200 run) is not in this copy "
            "of the project, so there is nothing to show until you open or upload a run.")


PLOTLY_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def chart(fig: go.Figure, key: str) -> None:
    st.plotly_chart(fig, key=key, config=PLOTLY_CONFIG, width="stretch")


def csv_download(frame: pd.DataFrame, file_name: str, key: str, label: str = "CSV") -> None:
    """A download button serving ``frame`` as CSV (built on click, not on every rerun)."""
    st.download_button(f"Download {label}", data=lambda: rundata.table_csv_bytes(frame),
                       file_name=file_name, mime="text/csv", key=key, icon=":material/download:")


ROW_PX, MAX_FIT_ROWS = 35, 40
MISSING_CELL = ""  # what a table shows for a value not measured (Streamlit's default: "None")


# A text column sized by the table itself fits the values of its first rows only: a longer value
# further down was cut ("graphed_callables" in row 11 showed as "graphed_callabl"). Such a column
# is given the width of its longest value (about CHAR_PX a character), up to TEXT_MAX_PX.
SIZED_ROWS, CHAR_PX, TEXT_PAD_PX, TEXT_MAX_PX = 10, 7, 24, 480


def text_widths(frame: pd.DataFrame, column_config: dict[str, Any] | None) -> dict[str, Any]:
    """``column_config`` with a width for each text column it does not configure whose longest
    value lies beyond the first ``SIZED_ROWS`` rows and is longer than theirs."""
    config = dict(column_config or {})
    for column in frame.columns:
        if column in config or frame[column].dtype.kind not in "OSUT":
            continue
        lengths = [len(v) if isinstance(v, str) else 0 for v in frame[column]]
        if len(lengths) <= SIZED_ROWS or max(lengths[SIZED_ROWS:]) <= max(lengths[:SIZED_ROWS]):
            continue
        longest = max(len(str(column)), *lengths)
        config[column] = st.column_config.TextColumn(
            width=min(TEXT_MAX_PX, CHAR_PX * longest + TEXT_PAD_PX))
    return config


def number_columns(columns: list[str], pattern: str) -> dict[str, Any]:
    """The same number format for each of ``columns`` (a ``column_config``)."""
    return {column: st.column_config.NumberColumn(format=pattern) for column in columns}


TableHeight = int | Literal["auto", "stretch", "content"]  # what st.dataframe takes


def fit_height(rows: int) -> TableHeight:
    """A table height that shows every row (header included) without a scroll bar, up to
    ``MAX_FIT_ROWS`` rows; longer tables scroll."""
    if rows > MAX_FIT_ROWS:
        return "auto"
    return ROW_PX * (rows + 1) + 3


def table(frame: pd.DataFrame, file_name: str, key: str, label: str | None = None,
          column_config: dict[str, Any] | None = None,
          height: TableHeight | None = None,
          column_order: list[str] | None = None, empty: str | None = None) -> None:
    """A sortable table with its CSV download (all columns) under it. Every row shows (up to
    ``MAX_FIT_ROWS``; longer tables scroll) and the table takes the width it is given. A value
    not measured (NaN, None) is an empty cell, never the word "None".

    An empty table with an ``empty`` text shows that text instead (say what is missing and why).
    """
    if frame.empty and empty:
        st.info(empty, icon=":material/info:")
        return
    column_config = text_widths(frame, column_config)
    st.dataframe(frame, hide_index=True, column_config=column_config, key=f"{key}_table",
                 height=fit_height(len(frame)) if height is None else height,
                 column_order=column_order, width="stretch", placeholder=MISSING_CELL)
    csv_download(frame, file_name, key=f"{key}_csv", label=label or file_name)


def fmt(value: Any, pattern: str = "{:.3f}", missing: str = "n/a") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    try:
        return pattern.format(value)
    except (ValueError, TypeError):
        return str(value)


def run_header(run: OpenedRun, title: str) -> None:
    """The view's title, which run this is, and any warning that comes with it."""
    st.title(title)
    env = run.environment
    values = escape_md(preset_text(run.config))  # its one label: 'seed step in bf16, every mode'
    if run.source == state.SAMPLE:
        st.caption(f"Bundled sample run, recorded with this tool on "
                   f"**{escape_md(env.get('gpu_name', '?'))}** on "
                   f"{escape_md(str(env.get('started_at', '?'))[:10])} · {values}")
    else:
        gpu = env.get("gpu_name") or env.get("device_type") or "?"
        st.caption(f"Run **{escape_md(run.name)}** · {escape_md(gpu)} · "
                   f"{escape_md(rundata._when(env.get('started_at')))} · {values}")
    if not run.complete:
        st.warning(incomplete_text(run), icon=":material/warning:")


def incomplete_text(run: OpenedRun) -> str:
    """'Incomplete run: it stopped during timed trials (...)'; what every view says of such a run."""
    where = rundata.where_it_stopped(run.notes)
    text = "**Incomplete run:** " + (escape_md(where) if where else
                                     "it did not finish, and no note says where it stopped")
    return (text.rstrip(".") + ". Only what was measured before that is shown; tables of the "
            "phases it did not reach are empty.")


def notes(run: OpenedRun) -> None:
    if run.notes:
        with st.expander(f"Notes from the run ({len(run.notes)})"):
            for note in run.notes:
                st.markdown(f"- {escape_md(note)}")


@st.cache_resource(max_entries=4, show_spinner=False)
def _zip_bytes(path: str, stamp: tuple) -> bytes:
    """The run's zip, built once per state of its folder (bytes are immutable: shared, not
    copied, between reruns and sessions)."""
    return rundata.run_zip_bytes(Path(path))


@st.cache_resource(max_entries=8, show_spinner=False)
def _file_bytes(path: str, stamp: tuple) -> bytes:
    return Path(path).read_bytes()


def _stamp(path: Path) -> tuple:
    """What changes when a file or a run folder is written again (its summary's time and size)."""
    info = path.stat()
    return (info.st_mtime_ns, info.st_size)


def _download(label: str, build, file_name: str, mime: str, key: str, icon: str,
              help: str | None = None) -> None:
    """A download button whose bytes are built now, not on click: a button served from a
    deferred callable did nothing when the page reran between drawing and clicking (a sweep
    finishing: "Deferred file ... not found" in the server's log, nothing in the browser). The
    same bytes give the same file id on every rerun, so a click always finds them. A file that
    cannot be read is said in place of its button."""
    try:
        data = build()
    except (OSError, ValueError, ProfilerError) as error:  # a folder removed or changed meanwhile
        reason = (getattr(error, "message", None) or getattr(error, "strerror", None)
                  or str(error) or type(error).__name__)
        st.error(f"{escape_md(label)}: not available: {escape_md(reason)}. Reopen the run, or "
                 "check its folder.", icon=":material/error:")
        return
    st.download_button(label, data=data, file_name=file_name, mime=mime, key=key, icon=icon,
                       help=help)


def run_downloads(run: OpenedRun, key: str) -> None:
    """The whole run as one zip, summary.json, and eager's and the graph's traces for Perfetto
    (or why there is none: a CPU run never has one, whatever its profiler setting said)."""
    reason = no_profile_reason(run.config, run.environment, run.complete)
    summary = run.path / rundata.SUMMARY_FILE
    cols = st.columns(2 + len(ALWAYS_MEASURED))
    with cols[0]:
        _download("Download run (zip)", lambda: _zip_bytes(str(run.path), _stamp(summary)),
                  f"{run.name}.zip", "application/zip", f"{key}_zip", ":material/folder_zip:")
    with cols[1]:
        _download("Download summary.json",
                  lambda: json.dumps(json.loads(_file_bytes(str(summary), _stamp(summary))),
                                     indent=2),
                  f"{run.name}-summary.json", "application/json", f"{key}_summary",
                  ":material/download:")
    for col, mode in zip(cols[2:], ALWAYS_MEASURED):
        path = run.trace_paths.get(mode)
        with col:
            if path is not None and Path(path).is_file():
                _download(f"Trace: {mode} (Perfetto)",
                          lambda p=Path(path): _file_bytes(str(p), _stamp(p)),
                          f"{run.name}-{Path(path).name}",
                          "application/gzip" if str(path).endswith(".gz") else "application/json",
                          f"{key}_trace_{mode}", ":material/timeline:",
                          help="Open it at https://ui.perfetto.dev (or chrome://tracing).")
            else:
                st.caption(f"No {mode} trace in this run: {escape_md(reason)}.")
