"""Every figure of the dashboard: pure functions from tidy DataFrames to Plotly figures.

One module per subject (``timing``, ``attribution``, ``gpu``, ``kernels``, ``counters``,
``comparison``, ``sweep``) over what they share (``common``). No Streamlit. Two rules hold for
every figure: only finite numbers are drawn, and text from a run is escaped (``common.escape``)
and never becomes part of a hover template.
"""
