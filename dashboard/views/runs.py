"""Runs: every run in the runs folder, uploading a run as a zip, and two runs side by side."""

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, rundata, state, ui
from profiler_core.errors import ProfilerError

UPLOAD_KEY = "upload_zip"
TAGS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]  # runs in a comparison, in the order picked


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
if runs.empty:
    st.info("No runs in this folder yet.")
else:
    incomplete, unreadable = int((~runs["complete"] & (runs["problem"] == "")).sum()), int(
        (runs["problem"] != "").sum())
    if incomplete:
        st.caption(f"{incomplete} run(s) are incomplete (interrupted: cancelled, stopped at the "
                   "time limit, or failed part-way); they open, marked as such.")
    if unreadable:
        st.warning(f"{unreadable} run folder(s) cannot be opened; the problem column says why.",
                   icon=":material/warning:")
    ui.table(runs.drop(columns=["path"]), "runs.csv", key="runs_list", label="runs list CSV",
             column_config={"speedup": st.column_config.NumberColumn(format="%.2fx")})

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
options = state.run_options()
if len(options) < 2:
    st.info("Two runs are needed to compare (run again, or upload one).")
    st.stop()
keys = list(options)
chosen = st.multiselect(
    "Runs to compare (any number; each is tagged A, B, C... in the order picked)", keys,
    default=keys[:2], format_func=options.get, key="compare_runs",
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

bars, timed_by, medians, summary = [], [], [], []
for tag, run in loaded.items():
    if not run.complete:
        st.warning(f"{tag}: " + ui.incomplete_text(run), icon=":material/warning:")
    cpu = analysis.is_cpu_run(run.config, run.environment)
    reason = analysis.no_profile_reason(run.config, run.environment, run.complete)
    verdict = analysis.verdict(run.headline, run.table("launch_split"), run.config.capture_iters,
                               reason)
    summary.append(analysis.compare_summary(tag, run.label, run.config, run.environment,
                                            run.headline, run.table("stats"), verdict.title,
                                            run.complete))
    rows, text = analysis.compare_rows(tag, run.headline, run.table("stats"), cpu)
    bars.append(rows)
    timed_by.append(text)
    m = analysis.split_medians(run.table("launch_split"))
    m["mode"] = tag + ": " + m["mode"].astype(str)
    medians.append(m)

ui.table(pd.DataFrame(summary, columns=analysis.COMPARE_SUMMARY_COLUMNS), "compare_runs.csv",
         key="compare_summary", label="comparison CSV",
         column_order=["tag", "run", "speedup", "eager_ms", "graph_ms", "timed_by"],
         column_config={"tag": st.column_config.TextColumn(width="small"),
                        "run": st.column_config.TextColumn(width="medium"),
                        "speedup": st.column_config.NumberColumn(format="%.2fx"),
                        "eager_ms": st.column_config.NumberColumn("eager ms/step", format="%.3f"),
                        "graph_ms": st.column_config.NumberColumn("graph ms/step", format="%.3f"),
                        "timed_by": st.column_config.TextColumn("timed by", width="large")})
st.markdown("  \n".join(f"**{row['tag']}** ({ui.escape_md(row['run'])}): "
                        f"{ui.escape_md(row['verdict'])}." for row in summary))
st.caption("Each run is compared by its own headline timing, written under its bars: "
           + " ".join(ui.escape_md(t) for t in timed_by))
log_scale = st.toggle("Log scale for the times", key="compare_log",
                      help="Runs on different devices can differ by orders of magnitude (a CPU run's "
                           "step beside a GPU's): a log axis keeps every bar readable.")
left, right = st.columns(2)
with left:
    ui.chart(charts.compare_medians(pd.concat(bars, ignore_index=True), log_scale),
             key="compare_medians")
with right:
    ui.chart(charts.split_bars(pd.concat(medians, ignore_index=True),
                               "no profiled window in any of these runs"), key="compare_split")
st.markdown("**Settings that differ**")
diff = analysis.configs_diff({tag: run.config for tag, run in loaded.items()})
if diff.empty:
    st.caption("All these runs used the same settings.")
else:
    ui.table(diff, "config_diff.csv", key="compare_diff", label="differences CSV")
