"""Runs: every run in the runs folder (from its run index), filtered by any setting, GPU and
date; uploading a run as a zip; any number of runs compared side by side and overlaid (speedup
with its CI, medians, launch split, latency distributions)."""

import dataclasses
import datetime
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import compare, run_facts, rundata, state, ui
from dashboard.analysis import verdict_text
from dashboard.analysis.launch_split import split_medians
from dashboard.analysis.payback import BREAK_EVEN_DEFINITION, pay_back
from dashboard.analysis.run_kind import is_cpu_run, no_profile_reason
from dashboard.charts.attribution import split_bars
from dashboard.charts.comparison import compare_latency_ecdf, compare_medians, compare_speedups
from profiler_core.analysis.metrics import headline_key
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ProfilerError
from profiler_core.storage import index as run_index
from profiler_core.storage.index_query import FieldFilter

UPLOAD_KEY = "upload_zip"
TAGS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]  # runs in a comparison, in the order picked
COMPARE_KEY = "compare_runs"
FIELDS_KEY = "runs_filter_fields"
MATCHING_KEY = "runs_matching"  # option keys of the runs the filters keep (for the button)
CHART_VIEWS = {"medians": "Medians and launch split", "speedup": "Speedup with 95% CI",
               "distributions": "Latency distributions"}
# Fields offered for filtering besides the run's settings: figures every run has, under their
# filter names (``metrics.headline_key``).
FILTER_FIGURES = tuple(headline_key(mode, metric) for mode, metric in (
    ("graph", "speedup"), ("eager", "median_ms"), ("graph", "median_ms")))
SETTINGS = [field.name for field in dataclasses.fields(RunConfig)]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value) -> str:
    if value is None:
        return "(automatic)"
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _field_filter(index: run_index.RunIndex, field: str) -> FieldFilter | None:
    """The control for one chosen field (a range for numbers, else values) and its filter."""
    values = index.field_values(field)
    if len(values) < 2:
        st.caption(f"Every run has {ui.escape_md(field)} = "
                   f"{ui.escape_md(_shown(values[0]) if values else 'nothing')}.")
        return None
    if all(_is_number(v) for v in values):
        low, high = st.select_slider(f"{field} between", values, value=(values[0], values[-1]),
                                     key=f"runs_filter_range_{field}", format_func=_shown)
        if (low, high) == (values[0], values[-1]):
            return None
        return FieldFilter(field, low=low, high=high)
    picked = st.multiselect(f"{field} is any of", values, key=f"runs_filter_values_{field}",
                            format_func=_shown, placeholder="any value")
    return FieldFilter(field, values=tuple(picked)) if picked else None


def _filters(index: run_index.RunIndex) -> list[FieldFilter]:
    """The filter controls (GPU, date, any setting or figure) and the filters they set."""
    filters = []
    gpu_col, date_col = st.columns(2)
    gpus = index.field_values("gpu")
    with gpu_col:
        picked = st.multiselect("GPU", [g for g in gpus if g is not None], key="runs_filter_gpu",
                                placeholder="any GPU")
        if picked:
            filters.append(FieldFilter("gpu", values=tuple(picked)))
    days = [datetime.date.fromisoformat(d) for d in index.field_values("date")]
    with date_col:
        if len(days) >= 2:
            chosen = st.date_input("Started between", value=(days[0], days[-1]),
                                   min_value=days[0], max_value=days[-1], key="runs_filter_dates")
            picked_days = tuple(chosen) if isinstance(chosen, (tuple, list)) else (chosen,)
            if picked_days and picked_days != (days[0], days[-1]):
                filters.append(FieldFilter("date", low=picked_days[0],
                                           high=picked_days[1] if len(picked_days) > 1 else None))
        elif days:
            st.caption(f"Every dated run started on {days[0].isoformat()}.")
    fields = st.multiselect("Filter by settings or figures (then pick values or a range)",
                            SETTINGS + [f for f in FILTER_FIGURES if f in index.fields()],
                            key=FIELDS_KEY, placeholder="pick any run setting, or speedup")
    for field in fields:
        spec = _field_filter(index, field)
        if spec is not None:
            filters.append(spec)
    return filters


def _compare_matching() -> None:
    st.session_state[COMPARE_KEY] = list(st.session_state.get(MATCHING_KEY, []))[:len(TAGS)]


def _on_upload() -> None:
    """Validate, unpack (into this session's upload folder) and open the uploaded zip."""
    uploaded = st.session_state.get(UPLOAD_KEY)
    st.session_state.pop("upload_error", None)
    st.session_state.pop("upload_ok", None)
    if uploaded is None:
        return
    name = str(uploaded.name)
    try:
        run, removed = state.session_uploads().add(uploaded.getvalue(), name)
    except ProfilerError as exc:
        st.session_state["upload_error"] = f"{name} was refused: {exc}"
        return
    state.forget_extra_runs(removed)
    key = state.remember_extra_run(run.path, f"{run.path.name} (uploaded)")
    st.session_state[state.OPEN_RUN] = key
    st.session_state["upload_ok"] = f"{name} is open: see the other views."


st.title("Runs")
folder = state.runs_dir()
st.markdown(f"Runs folder: {ui.escape_md(folder.resolve())} (change it in the sidebar). Every run "
            "started here is saved there; pick one under **Showing** in the sidebar to open it.")
runs = state.folder_runs()
point_options: dict[str, str] = {}  # runs inside sweep folders, offered for comparing
matching_paths: list[str] = []
with run_index.open_index(folder) as index:
    if index.note:
        st.caption(ui.escape_md(index.note))
    sweeps = index.sweeps()
    include_points = bool(sweeps) and st.toggle(
        f"Include the points of {len(sweeps)} sweep(s)", value=True, key="runs_include_points",
        help="Each measured point of a sweep is a run folder inside the sweep's folder.")
    everything = index.runs(sweep_points=include_points)
    if not everything:
        filters, matching = [], []
        st.info("No runs in this folder yet.")
    else:
        filters = _filters(index)
        matching = index.runs(filters, sweep_points=include_points)
for item in everything:
    if item["sweep"]:
        row = rundata.run_list_row(item)
        point_options[str(Path(row["path"]).resolve())] = " · ".join(
            b for b in (row["name"], row["gpu"], row["started"]) if b)
if everything:
    by_path = runs.set_index("path") if not runs.empty else runs
    rows = []
    for item in matching:
        row = rundata.run_list_row(item)
        if not item["sweep"] and item["path"] in by_path.index:  # checked files, the list's words
            row.update(by_path.loc[item["path"]].to_dict())
        row.update({f.field: item.get(f.field) for f in filters if f.field in SETTINGS})
        rows.append(row)
    filtered_settings = [f.field for f in filters if f.field in SETTINGS]
    shown = pd.DataFrame(rows, columns=list(dict.fromkeys(rundata.RUN_LIST_COLUMNS
                                                          + filtered_settings)))
    incomplete = int((~shown["complete"].astype(bool) & (shown["problem"] == "")).sum())
    unreadable = int((shown["problem"] != "").sum())
    if filters:
        st.caption(f"{len(shown)} of {len(everything)} run(s) match the filters.")
    if incomplete:
        st.caption(f"{incomplete} run(s) are incomplete (interrupted: cancelled, stopped at the "
                   "time limit, or failed part-way); they open, marked as such.")
    if unreadable:
        st.warning(f"{unreadable} run folder(s) cannot be opened; the problem column says why.",
                   icon=":material/warning:")
    listed = shown.drop(columns=["path"])
    # the problem column shown only where a folder has one (it pushed the others off a 1,400 px
    # screen); the CSV keeps it
    ui.table(listed, "runs.csv", key="runs_list", label="runs list CSV",
             column_order=[c for c in listed.columns if unreadable or c != "problem"],
             column_config={"speedup": st.column_config.NumberColumn(format="%.2fx"),
                            "eager_ms": st.column_config.NumberColumn("eager ms", format="%.3f"),
                            "graph_ms": st.column_config.NumberColumn("graph ms", format="%.3f"),
                            "speedup_ci_low": st.column_config.NumberColumn("CI low",
                                                                            format="%.2fx"),
                            "speedup_ci_high": st.column_config.NumberColumn("CI high",
                                                                             format="%.2fx")},
             empty="No run matches these filters.")
    matching_paths = [str(Path(p).resolve()) for p in shown["path"]]

st.subheader("Upload a run")
st.file_uploader(
    f"A zip this tool produced (the 'Download run (zip)' button), at most {rundata.MAX_UPLOAD_MB} MB",
    type=["zip"], key=UPLOAD_KEY, on_change=_on_upload, max_upload_size=rundata.MAX_UPLOAD_MB)
if st.session_state.get("upload_error"):
    st.error(ui.escape_md(st.session_state["upload_error"]), icon=":material/block:")
elif st.session_state.get("upload_ok"):
    st.success(ui.escape_md(st.session_state.pop("upload_ok")))
st.caption(f"Uploads are unpacked into a temporary folder of this server; the newest "
           f"{state.upload_store().keep} of this session are kept until the session ends.")

st.subheader("Compare runs")
options = {**state.run_options(), **point_options}
if len(options) < 2:
    st.info("Two runs are needed to compare (run again, or upload one).")
    st.stop()
keys = list(options)
matching_keys = [k for k in matching_paths if k in options]
st.session_state[MATCHING_KEY] = matching_keys
if filters and len(matching_keys) >= 2:
    st.button(f"Compare the {min(len(matching_keys), len(TAGS))} matching runs",
              key="compare_matching", on_click=_compare_matching, icon=":material/compare:",
              help=f"Puts every run the filters keep into the comparison (at most {len(TAGS)}).")
chosen = st.multiselect(
    f"Runs to compare (any number up to {len(TAGS)}; each is tagged A, B, C... in the order "
    "picked)", keys, default=keys[:2], format_func=lambda key: options[key], key=COMPARE_KEY,
    max_selections=len(TAGS))
if len(chosen) < 2:
    st.info("Pick at least two runs.")
    st.stop()
loaded = {}
for tag, key in zip(TAGS, chosen):
    try:
        loaded[tag] = state.load_option(key)
    except (ProfilerError, OSError) as exc:
        st.error(f"Run {tag} cannot be opened: {ui.escape_md(exc)}")
        st.stop()

bars, timed_by, medians, summary, speedups, steps = [], [], [], [], [], []
no_speedup: dict[str, str] = {}  # runs the speedup chart has no marker for, and why
for tag, run in loaded.items():
    if not run.complete:
        st.warning(f"{tag}: " + ui.incomplete_text(run), icon=":material/warning:")
    cpu = is_cpu_run(run.config, run.environment)
    reason = no_profile_reason(run.config, run.environment, run.complete)
    pay = pay_back(run.figures, run.table("modes"), "graph")
    verdict = verdict_text.verdict(run.figures, run.table("attribution"), reason, "graph", pay)
    summary.append(compare.compare_summary(tag, run.label, run.config, run.environment,
                                            run.pair, run.table("stats"), verdict.title,
                                            run.complete, "" if cpu else pay.text))
    rows, text = compare.compare_rows(tag, run.pair.timing_method, run.table("stats"), cpu)
    bars.append(rows)
    timed_by.append(text)
    m = split_medians(run.table("launch_split"))
    m["mode"] = tag + ": " + m["mode"].astype(str)
    medians.append(m)
    speedups.append(compare.compare_speedup_rows(tag, run.pair, run.table("modes")))
    if speedups[-1].empty:
        no_speedup[tag] = ("a CPU run times eager only" if cpu else
                           "the run stopped before its graph was timed" if not run.complete else
                           "the run has no graph timing")
    steps.append(compare.overlay_steps(tag, run.table("latency")))

ui.table(pd.DataFrame(summary, columns=compare.COMPARE_SUMMARY_COLUMNS), "compare_runs.csv",
         key="compare_summary", label="comparison CSV",
         column_order=["tag", "run", "speedup", "eager_ms", "graph_ms", "break_even", "timed_by"],
         column_config={"tag": st.column_config.TextColumn(width="small"),
                        "run": st.column_config.TextColumn(width="medium"),
                        "speedup": st.column_config.NumberColumn(format="%.2fx"),
                        "eager_ms": st.column_config.NumberColumn("eager ms/step", format="%.3f"),
                        "graph_ms": st.column_config.NumberColumn("graph ms/step", format="%.3f"),
                        "break_even": st.column_config.TextColumn(
                            "break-even", help=f"Break-even: {BREAK_EVEN_DEFINITION}."),
                        "timed_by": st.column_config.TextColumn("timed by", width="large")})
st.markdown("  \n".join(f"**{row['tag']}** ({ui.escape_md(row['run'])}): "
                        f"{ui.escape_md(row['verdict'])}." for row in summary))
st.caption("Each run is compared by its own headline timing, written under its bars: "
           + " ".join(ui.escape_md(t) for t in timed_by))
log_scale = st.toggle("Log scale for the times", key="compare_log",
                      help="Runs on different devices can differ by orders of magnitude (a CPU run's "
                           "step beside a GPU's): a log axis keeps every bar readable.")
view = st.radio("Overlay", list(CHART_VIEWS), format_func=CHART_VIEWS.get, horizontal=True,
                key="compare_chart")
if view == "medians":
    left, right = st.columns(2)
    with left:
        ui.chart(compare_medians(pd.concat(bars, ignore_index=True), log_scale),
                 key="compare_medians")
    with right:
        ui.chart(split_bars(pd.concat(medians, ignore_index=True),
                                   "no profiled window in any of these runs"), key="compare_split")
elif view == "speedup" and len(no_speedup) == len(loaded):  # nothing to draw: say why
    st.info("No speedup to draw: none of these runs timed a graph. "
            + " ".join(f"{tag}: {ui.escape_md(why)}." for tag, why in no_speedup.items()),
            icon=":material/info:")
elif view == "speedup":
    ui.chart(compare_speedups(pd.concat(speedups, ignore_index=True), no_speedup,
                                     order=list(loaded)),
             key="compare_speedups")
    st.caption("Each run's steady-state speedup over its own eager step, with the 95% bootstrap "
               "CI over its trials; every mode the run timed has its marker."
               + "".join(f" {tag} has no marker: {ui.escape_md(why)}." for tag, why in
                         no_speedup.items()))
else:
    overlay = pd.concat(steps, ignore_index=True)
    ui.chart(compare_latency_ecdf(overlay, log_scale), key="compare_distributions")
    methods = overlay.drop_duplicates("run")
    st.caption("Every steady-state step of each run, one line per run: "
               + "; ".join(f"{ui.escape_md(r)}: {ui.escape_md(t)}"
                           for r, t in zip(methods["run"], methods["timed_by"])) + ".")
st.markdown("**Settings that differ**")
diff = run_facts.configs_diff({tag: run.config for tag, run in loaded.items()},
                              {tag: run.environment for tag, run in loaded.items()})
hosts = [compare.host_row(tag, run.environment) for tag, run in loaded.items()]
host_diff = compare.host_differences(hosts)
if diff.empty:
    st.caption("All these runs used the same settings"
               + (f", but the host did not run them alike: {ui.escape_md(host_diff)}." if host_diff
                  else "."))
else:
    ui.table(diff, "config_diff.csv", key="compare_diff", label="differences CSV")
    if host_diff:
        st.caption(f"The host did not run them alike either: {ui.escape_md(host_diff)}.")
st.markdown("**How the host ran them**")
ui.table(pd.DataFrame(hosts, columns=compare.HOST_COLUMNS), "compare_hosts.csv", key="compare_hosts",
         label="host CSV",
         column_config={"torch_threads": st.column_config.NumberColumn("torch threads", format="%d"),
                        "cpus": st.column_config.NumberColumn("CPUs", format="%d"),
                        "load_start": st.column_config.NumberColumn("load at start", format="%.2f"),
                        "load_end": st.column_config.NumberColumn("load at end", format="%.2f"),
                        "loaded": st.column_config.CheckboxColumn("loaded host")})
st.caption("Load: the host's 1-minute load average (runnable processes) against the CPUs the run "
           "could use. A loaded host: the run's threads and the processes already running at its "
           "start wanted more CPUs than there were, or more processes than CPUs were runnable at "
           "its end. A CPU run fits torch's threads to the CPUs the load leaves free unless "
           "OMP_NUM_THREADS says otherwise (torchrun sets it to 1 for each rank).")
