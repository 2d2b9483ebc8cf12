"""Every figure of the dashboard: pure functions from tidy DataFrames to Plotly figures, one
module per subject over what they share (``common``): ``timing`` (overview, latency, repeats),
``attribution`` (launch split), ``gpu``, ``kernels``, ``counters``, ``comparison`` (several runs)
and ``sweep``.

Drawing only, no Streamlit: the inputs are the run's tables (``profiler_core.spec.schema``) or the
derived tables of ``dashboard.analysis``; an empty input gives a figure that says so. Long inputs
stay cheap (numpy bins, an ECDF at a few hundred quantiles, min/max decimation and Scattergl).
Two rules hold for every figure:

- **Only finite numbers are drawn.** NaN and +-inf are left out, never binned, stacked or used
  for an axis range.
- **Text from a run is shown as text.** Every label from run data goes through
  ``common.escape`` (Plotly renders a subset of HTML: ``<a href>`` would become a live link), and
  run data never becomes part of a hover *template*, which refers only to escaped names or data.
"""
