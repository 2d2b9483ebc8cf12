"""The Streamlit dashboard: drives runs of ``profiler_core`` and shows what they measured.

Scope: everything the browser sees. ``app.py`` is the entry frame (``streamlit run
dashboard/app.py``); ``views/`` holds one file per view; ``charts/`` builds every Plotly
figure from tidy DataFrames (no Streamlit there); ``analysis/`` derives tables and the verdict;
``rundata.py`` opens, lists, zips and validates run directories; ``runpanel.py`` starts and
follows a run (``profiler_core.orchestration.runjob``: the measuring engine in a separate process,
one run per GPU at a time) and ``worker.py`` says how it ended.
"""
