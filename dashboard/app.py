"""Entry frame of the dashboard: ``streamlit run dashboard/app.py``.

Page config, a refusal to serve on a network address nobody chose (``binding``), the shared
sidebar (which run is open; the controls for a new run and the Run button), the live run panel,
then the chosen view from ``dashboard/views/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run dashboard/app.py` puts only dashboard/ on the path
    sys.path.insert(0, str(ROOT))

from profiler_core.spec.bytecode import keep_bytecode  # noqa: E402

# Before pandas and plotly are imported: where Python writes no bytecode and torch ships none,
# compiled modules are kept in the tool's cache (spec.bytecode; a no-op on a normal install).
keep_bytecode()

import streamlit as st  # noqa: E402
from streamlit import config as st_config  # noqa: E402

from dashboard import binding, controls, rundata, runpanel, state, ui  # noqa: E402

# Streamlit's default sidebar (300 px): the views' tables are sized to fit beside it at 1,400 px,
# so the sidebar's labels are kept short enough for it instead (longer ones were cut).
LABEL_FITS = 31  # characters the run selector shows whole at that width (the sample's label,
#                  "Sample run", its GPU and its date)
# The icon is a file of this folder, sent inside the page (a data: URL): a Material icon as the
# page icon made the browser fetch it from a public font host. Every asset the page
# loads comes from this server; tests/test_browser.py records every request of a tour.
ICON = Path(__file__).resolve().parent / "icon.svg"
st.set_page_config(page_title="CUDA Graphs profiler", page_icon=str(ICON), layout="wide")

# No login: on a network address nothing is served unless that was chosen (dashboard/binding.py).
ADDRESS = st.get_option("server.address")
REFUSAL = binding.remote_refusal(ADDRESS, st_config.get_where_defined("server.address"), os.environ)
if REFUSAL:
    st.error(ui.escape_md(REFUSAL), icon=":material/lock:")
    st.stop()

VIEWS = [
    st.Page("views/overview.py", title="Overview", icon=":material/insights:", default=True),
    st.Page("views/counters.py", title="Counters", icon=":material/pin:"),
    st.Page("views/latency.py", title="Latency", icon=":material/timer:"),
    st.Page("views/launch_split.py", title="Launch split", icon=":material/call_split:"),
    st.Page("views/gpu.py", title="GPU", icon=":material/memory:"),
    st.Page("views/kernels.py", title="Kernels", icon=":material/view_list:"),
    st.Page("views/runs.py", title="Runs", icon=":material/folder_open:"),
    st.Page("views/sweep.py", title="Sweep", icon=":material/stacked_line_chart:"),
    st.Page("views/ranks.py", title="Ranks", icon=":material/lan:"),
    st.Page("views/shapes.py", title="Shapes", icon=":material/width:"),
]
page = st.navigation(VIEWS)

state.init_session()
runpanel.handle_finished_job()

with st.sidebar:
    if not binding.is_local(ADDRESS):  # chosen explicitly, else stopped above
        st.warning(f"Shared on the network ({ui.escape_md(ADDRESS or 'every interface')}), as "
                   "asked: anyone who can reach it can start runs here.", icon=":material/public:")
    folder_problem = state.runs_dir_problem()
    options = state.run_options()
    if st.session_state.get(state.OPEN_RUN) not in options:
        st.session_state[state.OPEN_RUN] = next(iter(options), None)
    if options:
        keys = list(options)
        # a short label that fits the box; each view's header says the rest (GPU, date, preset)
        short = state.short_run_label(options)
        shown = st.selectbox("Showing", keys, index=keys.index(st.session_state[state.OPEN_RUN]),
                             key=state.OPEN_RUN, format_func=short,
                             help="The bundled sample, every run in the runs folder, and uploads.")
        if len(short(shown)) > LABEL_FITS:  # a long folder name: written whole under the box
            st.caption(ui.escape_md(short(shown)))
    else:
        st.caption("No runs yet: start one below, or upload a zip on the Runs page. "
                   + ui.sample_missing_text())
    if folder_problem:
        st.error(f"Runs folder refused: {ui.escape_md(folder_problem)}. Showing and saving to "
                 f"{ui.escape_md(state.runs_dir())} instead (see the end of this sidebar).",
                 icon=":material/block:")

    st.subheader("New run")
    gpus, no_gpu_reason = state.device_list()
    config, error, caption = controls.run_controls(gpus, no_gpu_reason)
    runpanel.run_button(config, error)  # on the first screen; what it runs and the settings follow
    st.caption(caption)
    controls.run_settings(error)

    # Rarely changed, so last: the Run button stays on the first screen.
    with st.expander(f"Runs folder: {ui.escape_md(state.runs_dir().name or state.runs_dir())}",
                     expanded=bool(folder_problem)):
        # Current values are passed as defaults too (see controls._widget for why).
        st.text_input("Runs folder",
                      value=str(st.session_state[state.RUNS_DIR] or "")[:rundata.MAX_FOLDER_CHARS],
                      key=state.RUNS_DIR,
                      max_chars=rundata.MAX_FOLDER_CHARS,
                      help="Where new runs are saved and listed (default ./runs, or "
                           "$PROFILER_RUNS_DIR). It must lie under the server's allowed folders "
                           f"(${rundata.RUNS_ROOT_ENV}, by default the folder the server started "
                           "in).")
        st.caption(f"Now: {ui.escape_md(state.runs_dir())}")

runpanel.job_panel()
page.run()
