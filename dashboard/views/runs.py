"""Runs: every run in the runs folder, uploading a run as a zip, and two runs side by side."""

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, rundata, state, ui
from profiler_core.errors import ProfilerError

UPLOAD_KEY = "upload_zip"


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

st.subheader("Compare two runs")
options = state.run_options()
if len(options) < 2:
    st.info("Two runs are needed to compare (run again, or upload one).")
    st.stop()
keys = list(options)
left, right = st.columns(2)
a_key = left.selectbox("Run A", keys, index=0, format_func=options.get, key="compare_a")
b_key = right.selectbox("Run B", keys, index=1, format_func=options.get, key="compare_b")
if a_key == b_key:
    st.info("Pick two different runs.")
    st.stop()
loaded = {}
for tag, key in (("A", a_key), ("B", b_key)):
    try:
        loaded[tag] = state.load_option(key)
    except (ProfilerError, OSError) as exc:
        st.error(f"Run {tag} cannot be opened: {ui.escape_md(exc)}")
        st.stop()

cols = st.columns(2)
stats_rows, medians = [], []
for col, (tag, run) in zip(cols, loaded.items()):
    h = run.headline
    with col:
        st.markdown(f"**{tag}: {ui.escape_md(run.label)}**")
        if not run.complete:
            st.warning(ui.incomplete_text(run), icon=":material/warning:")
        m = st.columns(3)
        m[0].metric("Speedup", ui.fmt(analysis.number(h, "speedup"), "{:.2f}x"))
        m[1].metric("Eager", ui.fmt(analysis.number(h, "eager_median_ms"), "{:.3f} ms"))
        m[2].metric("Graph", ui.fmt(analysis.number(h, "graph_median_ms"), "{:.3f} ms"))
        v = analysis.verdict(h, run.table("launch_split"), run.config.capture_iters)
        st.caption(f"{v.title}.")
    stats = run.table("stats")
    method = analysis.headline_method(h, stats)  # each run by its own headline method
    part = stats[stats["method"] == method] if not stats.empty else stats
    for row in part.itertuples(index=False):
        stats_rows.append({"run": tag, "mode": row.mode, "median_ms": row.median_ms,
                           "p10_ms": row.p10_ms, "p90_ms": row.p90_ms})
    m = analysis.split_medians(run.table("launch_split"))
    m["mode"] = tag + ": " + m["mode"].astype(str)
    medians.append(m)

left, right = st.columns(2)
with left:
    ui.chart(charts.compare_medians(pd.DataFrame(stats_rows, columns=["run", "mode", "median_ms",
                                                                      "p10_ms", "p90_ms"])),
             key="compare_medians")
with right:
    ui.chart(charts.split_bars(pd.concat(medians, ignore_index=True)), key="compare_split")
st.markdown("**Settings that differ**")
diff = analysis.config_diff(loaded["A"].config, loaded["B"].config)
if diff.empty:
    st.caption("Both runs used the same settings.")
else:
    ui.table(diff, "config_diff.csv", key="compare_diff", label="differences CSV")
