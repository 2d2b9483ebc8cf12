"""The Streamlit dashboard: drives runs of ``profiler_core`` and shows what they measured.

Scope: everything the browser sees. ``app.py`` is the entry frame (``streamlit run
dashboard/app.py``); ``views/`` holds one file per view; ``charts/`` builds every Plotly
figure from tidy DataFrames (no Streamlit there); ``analysis.py`` derives tables and the verdict;
``rundata.py`` opens, lists, zips and validates run directories; ``worker.py`` and ``gpulock.py``
run the measuring engine in a separate process, one run per GPU at a time.
"""
