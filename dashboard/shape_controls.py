"""The sidebar's control for steps whose shapes change: off by default; on, one dimension, its
distribution (uniform, log-normal, a list of values, or an uploaded lengths file) and the buckets,
composed into exactly the command line's ``--vary NAME=DIST`` and ``--buckets`` text.

Scope: the widgets (``draw``: their own collapsed section under the others), the text they hold
(``chosen``: read before the widgets are drawn, as every control's value is), and the checks the
run makes when it starts, made before it can start (``refusal``). The grammar and the workload's
dimensions are checked by building the ``RunConfig`` (``spec.shapes.check_vary`` and
``check_buckets``); then the distribution is read (``parse_vary``; a lengths file by the command
line's reader, when it is uploaded), the buckets are drawn against it (``bucket_edges``, on the
sequence the run will draw) and the largest shape is checked against the dimension's own limit.
An uploaded lengths file is kept in this session's upload folder (``dashboard.uploads``).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from dashboard import state, ui
from profiler_core.spec import fields
from profiler_core.spec.config import INT_LIMITS, RunConfig, is_user_spec
from profiler_core.spec.errors import ConfigError, ProfilerError
from profiler_core.spec.shapes import (
    MAX_BUCKETS,
    MAX_FILE_BYTES,
    MAX_LENGTH,
    bucket_edges,
    parse_vary,
)
from profiler_core.spec.workload_kinds import workload_named

PREFIX = "shape_"
ON = PREFIX + "on"
DIMENSION = PREFIX + "dimension"  # a built-in workload's: a selector
OWN_DIMENSION = PREFIX + "own_dimension"  # an own step's: a keyword of its batch function
KIND = PREFIX + "kind"
LOW, HIGH = PREFIX + "uniform_low", PREFIX + "uniform_high"
MEDIAN, SIGMA, LOG_MAX = PREFIX + "lognormal_median", PREFIX + "lognormal_sigma", PREFIX + "lognormal_max"
LIST = PREFIX + "list"
UPLOAD = PREFIX + "lengths_upload"
LENGTHS = PREFIX + "lengths"  # the uploaded lengths file as kept (uploads.SavedLengths)
LENGTHS_ERROR = PREFIX + "lengths_error"  # why the last uploaded file was refused (a ConfigError)
BUCKETS = PREFIX + "buckets"
QUANTILES = PREFIX + "quantiles"
GIVEN = PREFIX + "given"

KIND_LABELS = {"uniform": "Uniform", "lognormal": "Log-normal", "list": "A list of values",
               "file": "A lengths file (upload)"}
BUCKET_LABELS = {"pow2": "Powers of two", "quantiles": "At quantiles", "given": "Given sizes"}
# Where the controls start (the command line's examples).
DEFAULTS: dict[str, Any] = {
    ON: False, KIND: "uniform", LOW: 64, HIGH: 512, MEDIAN: 128.0, SIGMA: 0.6, LOG_MAX: 512,
    LIST: "128,256,512", BUCKETS: "pow2", QUANTILES: 4, GIVEN: "128,256,512",
    OWN_DIMENSION: "seq_len"}
# Kept while not drawn (``controls.keep_hidden_values``); the upload cannot be written back.
KEPT = [DIMENSION, OWN_DIMENSION, *DEFAULTS]
MAX_TEXT = 4_000  # characters of a typed list of values or bucket sizes


def _get(name: str) -> Any:
    value = st.session_state.get(name)
    return DEFAULTS.get(name) if value is None else value


def dimensions(workload: str) -> tuple[str, ...] | None:
    """The dimensions a built-in workload can vary; None for an own step, which can vary any
    keyword of its batch function: only its code knows them, and the sidebar does not run it
    (the run checks the keyword when it starts)."""
    if is_user_spec(workload):
        return None
    declared = workload_named(workload)
    return declared.varying if declared is not None and declared.varying else ("batch",)


def _dimension(workload: str) -> str:
    options = dimensions(workload)
    if options is None:
        return str(_get(OWN_DIMENSION)).strip()
    if st.session_state.get(DIMENSION) not in options:  # first use, or another workload now
        st.session_state[DIMENSION] = "seq_len" if "seq_len" in options else options[0]
    return str(st.session_state[DIMENSION])


def _number_text(value: float) -> str:
    return f"{float(value):.10g}"


def _distribution_text() -> str | None:
    """DIST as the command line takes it; None for a lengths file not uploaded yet."""
    kind = _get(KIND)
    if kind == "uniform":
        return f"uniform:{int(_get(LOW))}:{int(_get(HIGH))}"
    if kind == "lognormal":
        return f"lognormal:{_number_text(_get(MEDIAN))}:{_number_text(_get(SIGMA))}:{int(_get(LOG_MAX))}"
    if kind == "list":
        return "".join(str(_get(LIST)).split())
    saved = st.session_state.get(LENGTHS)
    return f"file:{saved.path}" if saved is not None else None


def _buckets_text() -> str:
    kind = _get(BUCKETS)
    if kind == "quantiles":
        return f"quantiles:{int(_get(QUANTILES))}"
    if kind == "given":
        return "".join(str(_get(GIVEN)).split())
    return "pow2"


def chosen(workload: str) -> dict[str, Any]:
    """The ``vary`` and ``buckets`` values the controls hold, for the ``RunConfig``: {} while off
    (the preset's: fixed shapes); ``vary`` None while a lengths file is chosen but none is kept
    (``refusal`` says so)."""
    if not _get(ON):
        return {}
    distribution = _distribution_text()
    vary = None if distribution is None else f"{_dimension(workload)}={distribution}"
    return {"vary": vary, "buckets": _buckets_text()}


def refusal(config: RunConfig) -> ConfigError | None:
    """What the run would refuse when it starts, said before it can start: no lengths file (or
    why the uploaded one was refused), a distribution that cannot be read, buckets below its
    largest value, a largest shape over the dimension's limit. None when the run may start."""
    if not _get(ON):
        return None
    saved = st.session_state.get(LENGTHS)
    if _get(KIND) == "file":
        if saved is None:
            return st.session_state.get(LENGTHS_ERROR) or ConfigError(
                "vary", "no lengths file is uploaded", "upload one (one length a line), or "
                "choose another distribution")
        if not saved.path.is_file():
            return ConfigError("vary", f"the uploaded lengths file {saved.name} is no longer kept",
                               "upload it again")
    if config.vary is None:
        return None
    try:
        if _get(KIND) == "file" and saved is not None:
            distribution = saved.distribution  # read by the command line's reader when uploaded
        else:
            distribution = parse_vary(config.vary).distribution
        quantiles = config.buckets.strip().lower().startswith("quantiles")
        sequence = distribution.sample(config.total_eager_iters, config.seed) if quantiles else ()
        largest = bucket_edges(config.buckets, distribution, sequence)[-1]
        dimension = config.vary.partition("=")[0].strip()
        if not is_user_spec(config.workload) and dimension in INT_LIMITS:
            try:
                config.replace(**{dimension: largest})
            except ConfigError as error:
                raise ConfigError("vary", f"the largest {dimension} a step is padded to, "
                                          f"{largest:,}, is refused: {error.message}",
                                  "lower the distribution's largest value or the largest "
                                  "bucket") from None
    except ConfigError as error:
        return error
    return None


def _on_upload() -> None:
    """on_change of the lengths-file upload: keep the file and read it, or say why it is refused
    (a refused file replaces the one kept before: the run never reads another file than shown)."""
    uploaded = st.session_state.get(UPLOAD)
    st.session_state.pop(LENGTHS_ERROR, None)
    st.session_state.pop(LENGTHS, None)
    if uploaded is None:
        return
    try:
        if uploaded.size > MAX_FILE_BYTES:  # said before the whole file is read into memory
            raise ConfigError("vary", f"the lengths file {uploaded.name} is "
                                      f"{uploaded.size / 2**20:.1f} MiB, over "
                                      f"{MAX_FILE_BYTES // 2**20} MiB",
                              "upload a sample of the lengths")
        st.session_state[LENGTHS] = state.session_uploads().add_lengths(uploaded.getvalue(),
                                                                        uploaded.name)
    except ConfigError as error:
        st.session_state[LENGTHS_ERROR] = error
    except (ProfilerError, OSError) as error:
        st.session_state[LENGTHS_ERROR] = ConfigError(
            "vary", f"the lengths file {uploaded.name} could not be kept: {error}",
            "upload it again")


def _refused(error: ConfigError | None, field: str, text: str) -> None:
    if error is not None and error.field == field:
        st.error(ui.escape_md(text), icon=":material/block:")


def draw(workload: str, error: ConfigError | None, refusal_text: str) -> None:
    """The section: collapsed unless a setting of it is refused (``refusal_text`` under the
    control it concerns); off, one toggle."""
    refused = error is not None and error.field in ("vary", "buckets")
    with st.expander(fields.CHANGING_SHAPES, expanded=refused):
        st.toggle("Vary a dimension per step", value=bool(_get(ON)), key=ON,
                  help=f"{fields.spec('vary').help} The run times eager on the exact shapes, "
                       "padding to the largest, a graph per bucket and torch.compile on one "
                       "seeded sequence of them; the Shapes page compares them. Off: every step "
                       "has the same shapes.")
        if not _get(ON):
            return
        _dimension_control(workload)
        _distribution_controls()
        _refused(error, "vary", refusal_text)
        _bucket_controls()
        _refused(error, "buckets", refusal_text)
        shapes = chosen(workload)
        if shapes.get("vary"):
            st.caption("Given to the run as --vary " + ui.escape_md(shapes["vary"])
                       + " --buckets " + ui.escape_md(shapes["buckets"]))


def _dimension_control(workload: str) -> None:
    options = dimensions(workload)
    if options is None:
        st.text_input("Dimension (a keyword of your batch)", value=str(_get(OWN_DIMENSION)),
                      key=OWN_DIMENSION, max_chars=64,
                      help="A keyword parameter of your step's batch(generator, **shape) "
                           "function, given each step's value. The sidebar does not run your "
                           "code, so it cannot list them: the run checks it when it starts.")
        return
    current = _dimension(workload)
    st.selectbox("Dimension", options, index=options.index(current), key=DIMENSION,
                 help="seq_len: tokens per sequence (the transformer); batch: rows per batch "
                      "(any workload: the short last batch of an epoch).")


def _distribution_controls() -> None:
    kinds = list(KIND_LABELS)
    st.selectbox("Distribution", kinds, index=kinds.index(_get(KIND)), key=KIND,
                 format_func=KIND_LABELS.__getitem__,
                 help="What each step's value is drawn from, seeded: every strategy runs the "
                      "same sequence.")
    kind = _get(KIND)
    if kind == "uniform":
        st.number_input("Smallest value", min_value=1, max_value=MAX_LENGTH, step=1,
                        value=int(_get(LOW)), key=LOW)
        st.number_input("Largest value", min_value=1, max_value=MAX_LENGTH, step=1,
                        value=int(_get(HIGH)), key=HIGH)
    elif kind == "lognormal":
        st.number_input("Median", min_value=1.0, max_value=float(MAX_LENGTH), step=1.0,
                        value=float(_get(MEDIAN)), format="%.2f", key=MEDIAN)
        st.number_input("Sigma (of the log)", min_value=0.01, max_value=5.0, step=0.05,
                        value=float(_get(SIGMA)), format="%.2f", key=SIGMA,
                        help="The spread: 0.6 puts most values within a factor of about 2 of "
                             "the median.")
        st.number_input("Largest value", min_value=1, max_value=MAX_LENGTH, step=1,
                        value=int(_get(LOG_MAX)), key=LOG_MAX,
                        help="Values above it are drawn again.")
    elif kind == "list":
        st.text_input("Values (optional weights)", value=str(_get(LIST)), key=LIST,
                      max_chars=MAX_TEXT, placeholder="128,256,512 or 128:3,256:1",
                      help="Whole numbers separated by commas, each with an optional weight "
                           "after a colon (128:3 is drawn three times as often as 256:1).")
    else:
        st.file_uploader(f"Lengths file: one a line, at most {MAX_FILE_BYTES // 2**20} MB",
                         key=UPLOAD, on_change=_on_upload,
                         max_upload_size=MAX_FILE_BYTES // 2**20,
                         help="Observed lengths, e.g. of your dataset: one whole number a line "
                              "(blank lines and lines starting with # are skipped). It is kept "
                              "in this server's temporary folder for this session; the run "
                              "records the sequence it drew, so the file is not needed later.")
        saved = st.session_state.get(LENGTHS)
        if saved is not None:
            st.caption(f"Using {ui.escape_md(saved.name)}: {saved.summary}.")


def _bucket_controls() -> None:
    kinds = list(BUCKET_LABELS)
    st.selectbox("Buckets", kinds, index=kinds.index(_get(BUCKETS)), key=BUCKETS,
                 format_func=BUCKET_LABELS.__getitem__, help=f"{fields.spec('buckets').help} Powers of "
                 "two from the smallest value; quantiles of the sequence; or sizes you give, the "
                 "largest at or above the largest value.")
    if _get(BUCKETS) == "quantiles":
        st.number_input("Number of buckets", min_value=1, max_value=MAX_BUCKETS, step=1,
                        value=int(_get(QUANTILES)), key=QUANTILES)
    elif _get(BUCKETS) == "given":
        st.text_input("Bucket sizes", value=str(_get(GIVEN)), key=GIVEN, max_chars=MAX_TEXT,
                      placeholder="128,256,512", help="Whole numbers separated by commas.")
