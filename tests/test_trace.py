"""Tests for profiler_core.analysis.trace: synthetic Kineto-style traces with golden figures, file
loading, and one real CPU-only trace recorded by torch.profiler on this machine."""

from __future__ import annotations

import gzip
import json
import math

import pandas as pd
import pytest

from profiler_core.analysis.kernel_names import short_kernel_name
from profiler_core.analysis.trace import (
    TraceAnalysis,
    analyse_trace,
    decompose_medians,
    decompose_speedup,
    format_report,
)
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.spec.errors import RunFormatError
from profiler_core.spec.schema import BREAKDOWN_COLUMNS, KERNEL_COLUMNS, LAUNCH_SPLIT_COLUMNS
from profiler_core.storage.trace_tables import write_tables

FOO_KERNEL = "void at::native::(anonymous namespace)::foo<float, 4>(float*, int)"
GEMM_KERNEL = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"
ADD_KERNEL = "void at::native::add_kernel<float>(float*)"


# ---- builders of Kineto-style events (fields as torch.profiler exports them) ----

def api_call(name, ts, dur, correlation, tid=100, cat="cuda_runtime"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur,
            "args": {"External id": correlation, "cbid": 211, "correlation": correlation}}


def gpu_event(name, ts, dur, correlation, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": correlation}}


def step_marker(number, ts, dur, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": f"ProfilerStep#{number}", "pid": 100, "tid": 100,
            "ts": ts, "dur": dur, "args": {"External id": number}}


def noise_events(offset):
    """Events the analysis must ignore or treat as plain CPU time."""
    return [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100,
         "ts": offset + 2, "dur": 50, "args": {"External id": 1}},
        api_call("cudaStreamIsCapturing", offset + 60, 1, offset + 99),
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 100, "tid": 100,
         "ts": offset + 10},
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "mark", "pid": 100,
         "tid": 100, "ts": offset + 3},
    ]


def eager_iteration(offset, first_correlation, with_step=None):
    """One eager step, golden figures (from ``offset``): CPU window 0-100; kernels 20-50 and
    40-60 (overlapping), memset 70-80, kernel 110-130 launched inside the window but running
    after it. busy 70 = 40 + 10 + 20, span 130, idle 60, launches 4 (19 us), kernels 3,
    launch delays 5, 15, 36, 65 -> median 25.5."""
    c = first_correlation
    events = [
        api_call("cudaLaunchKernel", offset + 10, 5, c),
        gpu_event(FOO_KERNEL, offset + 20, 30, c),
        api_call("cudaLaunchKernel", offset + 20, 5, c + 1),
        gpu_event(GEMM_KERNEL, offset + 40, 20, c + 1),
        api_call("cudaMemsetAsync", offset + 30, 4, c + 2),
        gpu_event("Memset (Device)", offset + 70, 10, c + 2, cat="gpu_memset"),
        api_call("cudaLaunchKernelExC_v11060", offset + 40, 5, c + 3),
        gpu_event(FOO_KERNEL, offset + 110, 20, c + 3),
    ] + noise_events(offset)
    if with_step is not None:
        events.append(step_marker(with_step, offset, 100))
        # torch also writes the step on the GPU timeline: it must not count as a CPU step.
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{with_step}",
                       "pid": 0, "tid": 7, "ts": offset + 20, "dur": 110})
    return events


def graph_iteration(offset, first_correlation, with_step=None):
    """One replay, golden figures: CPU window 0-50; memcpy of the input 12-16, then one
    cudaGraphLaunch (10-30) whose three kernels 35-45, 44-60, 60-70 share its correlation id.
    busy 39 = 4 + 35, span 70, idle 31, launches 2 (23 us), kernels 3, delays 4 and 5 -> 4.5."""
    c = first_correlation
    events = [
        api_call("cudaMemcpyAsync", offset + 5, 3, c),
        gpu_event("Memcpy HtoD (Pageable -> Device)", offset + 12, 4, c, cat="gpu_memcpy"),
        api_call("cudaGraphLaunch", offset + 10, 20, c + 1),
        gpu_event(GEMM_KERNEL, offset + 35, 10, c + 1),
        gpu_event(ADD_KERNEL, offset + 44, 16, c + 1),
        gpu_event(FOO_KERNEL, offset + 60, 10, c + 1),
    ]
    if with_step is not None:
        events.append(step_marker(with_step, offset, 50))
    return events


def trace_of(*event_lists):
    events = [event for event_list in event_lists for event in event_list]
    return {"schemaVersion": 1, "traceEvents": events}


def eager_trace():
    return trace_of(eager_iteration(1000, 10, with_step=5), eager_iteration(1200, 20, with_step=6))


def graph_trace():
    return trace_of(graph_iteration(1000, 10, with_step=5), graph_iteration(1200, 20, with_step=6))


# ---- iterations and the launch split ----

def test_eager_steps_give_golden_launch_split():
    analysis = analyse_trace(eager_trace(), mode="eager")
    split = analysis.launch_split
    assert analysis.iteration_source == "profiler_steps"
    assert list(split.columns) == LAUNCH_SPLIT_COLUMNS
    assert split["iteration"].tolist() == [0, 1]
    assert (split["mode"] == "eager").all()
    for row in split.to_dict("records"):
        assert row["span_us"] == 130
        assert row["gpu_busy_us"] == 70
        assert row["gpu_idle_us"] == 60
        assert row["cpu_launch_us"] == 19
        assert row["cpu_other_us"] == 81
        assert row["launches"] == 4
        assert row["kernels"] == 3
        assert row["launch_delay_us"] == 25.5
    assert analysis.gpu_event_count == 8
    assert analysis.launch_api_names == (
        "cudaLaunchKernel", "cudaLaunchKernelExC_v11060", "cudaMemsetAsync")


def test_graph_replay_kernels_are_accounted_to_their_launch():
    analysis = analyse_trace(graph_trace(), mode="graph")
    assert analysis.iteration_source == "profiler_steps"
    assert analysis.summary() == {
        "span_us": 70, "cpu_launch_us": 23, "cpu_other_us": 27, "gpu_busy_us": 39,
        "gpu_idle_us": 31, "launches": 2, "kernels": 3, "launch_delay_us": 4.5,
    }


def test_step_markers_recorded_as_cpu_op_are_used_too():
    events = eager_iteration(0, 10)
    events.append(step_marker(1, 0, 100, cat="cpu_op"))
    analysis = analyse_trace(trace_of(events))
    assert analysis.iteration_source == "profiler_steps"
    assert analysis.launch_split["span_us"].tolist() == [130]


def test_without_steps_each_graph_launch_is_an_iteration():
    trace = trace_of([
        api_call("cudaGraphLaunch", 100, 20, 1),
        gpu_event(FOO_KERNEL, 125, 10, 1),
        gpu_event(ADD_KERNEL, 135, 15, 1),
        api_call("cudaGraphLaunch", 200, 20, 2),
        gpu_event(FOO_KERNEL, 230, 10, 2),
        gpu_event(ADD_KERNEL, 238, 22, 2),
    ])
    split = analyse_trace(trace, mode="graph").launch_split
    assert analyse_trace(trace).iteration_source == "graph_launches"
    assert split["span_us"].tolist() == [50, 60]
    assert split["gpu_busy_us"].tolist() == [25, 30]
    assert split["gpu_idle_us"].tolist() == [25, 30]
    assert split["cpu_launch_us"].tolist() == [20, 20]
    assert split["cpu_other_us"].tolist() == [0, 0]
    assert split["launches"].tolist() == [1, 1]
    assert split["kernels"].tolist() == [2, 2]
    assert split["launch_delay_us"].tolist() == [5, 10]


def test_without_steps_or_graphs_the_whole_trace_is_one_window():
    orphan = gpu_event(ADD_KERNEL, 200, 10, 12345)  # its runtime call is not in the trace
    not_cpu_work = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
         "tid": "PyTorch Profiler", "ts": -500, "dur": 5000, "args": {"Op count": 0}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "forward", "pid": 0, "tid": 7,
         "ts": 1, "dur": 300},
    ]
    analysis = analyse_trace(trace_of(eager_iteration(0, 10), [orphan], not_cpu_work))
    split = analysis.launch_split
    assert analysis.iteration_source == "whole_trace"
    assert len(split) == 1
    # CPU window 2-61 (cpu_op 2-52 ... cudaStreamIsCapturing 60-61); GPU up to 210.
    assert split["span_us"].tolist() == [208]
    assert split["gpu_busy_us"].tolist() == [80]
    assert split["kernels"].tolist() == [4]
    assert split["launches"].tolist() == [4]
    assert split["launch_delay_us"].tolist() == [25.5]  # the orphan has no call to measure from


def test_gpu_events_without_their_call_are_skipped_inside_steps():
    orphan = gpu_event(ADD_KERNEL, 85, 10, 12345)
    split = analyse_trace(trace_of(eager_iteration(0, 10, with_step=1), [orphan])).launch_split
    assert split["gpu_busy_us"].tolist() == [70]
    assert split["kernels"].tolist() == [3]


def test_work_of_a_synchronous_copy_is_busy_time_but_not_a_launch():
    # cudaMemcpy (not Async) blocks until its copy is done: the copy is GPU work of the
    # step, but the call is no launch and its "delay" (copy start - call end) means nothing.
    events = eager_iteration(0, 10, with_step=1) + [
        api_call("cudaMemcpy", 85, 10, 50),
        gpu_event("Memcpy DtoH (Device -> Pageable)", 88, 4, 50, cat="gpu_memcpy"),
    ]
    row = analyse_trace(trace_of(events)).launch_split.iloc[0]
    assert (row["gpu_busy_us"], row["launches"], row["kernels"]) == (74, 4, 3)
    assert row["launch_delay_us"] == 25.5


def test_gpu_time_before_the_window_is_clipped_so_idle_is_never_negative():
    # CPU and GPU clocks are aligned by Kineto, but a kernel can appear to start before the
    # step that launched it; only the part inside the span counts as busy.
    trace = trace_of([
        step_marker(1, 0, 100),
        api_call("cudaLaunchKernel", 1, 2, 1),
        gpu_event(ADD_KERNEL, -4, 10, 1),
    ])
    row = analyse_trace(trace).launch_split.iloc[0]
    assert (row["span_us"], row["gpu_busy_us"], row["gpu_idle_us"]) == (100, 6, 94)
    assert row["launch_delay_us"] == -7


def test_launch_names_with_suffixes_count_and_nested_driver_calls_do_not():
    trace = trace_of([
        step_marker(1, 0, 100),
        api_call("cudaLaunchKernel_ptsz_v7000", 10, 10, 1),
        api_call("cuLaunchKernel", 12, 5, 2, cat="cuda_driver"),  # made by the call above
        gpu_event(ADD_KERNEL, 25, 5, 1),
        api_call("cuLaunchKernel", 30, 4, 3, cat="cuda_driver", tid=101),  # Triton, own thread
        gpu_event(FOO_KERNEL, 40, 5, 3),
        api_call("cudaLaunchHostFunc", 50, 3, 4),  # not a launch of GPU work
    ])
    analysis = analyse_trace(trace)
    assert analysis.launch_split["launches"].tolist() == [2]
    assert analysis.launch_split["cpu_launch_us"].tolist() == [14]
    assert analysis.launch_api_names == ("cuLaunchKernel", "cudaLaunchKernel_ptsz_v7000")


def test_string_and_integer_timestamps_and_missing_durations():
    events = eager_iteration(0, 10, with_step=1)
    for event in events:
        if "ts" in event:
            event["ts"] = str(event["ts"]) if event.get("cat") == "kernel" else int(event["ts"])
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 100, "tid": 100,
                   "ts": 90})  # no "dur"
    row = analyse_trace(trace_of(events)).launch_split.iloc[0]
    assert (row["span_us"], row["gpu_busy_us"], row["kernels"]) == (130, 70, 3)


def test_non_numeric_timestamp_is_a_format_error():
    events = eager_iteration(0, 10, with_step=1)
    events[0]["ts"] = "soon"
    with pytest.raises(RunFormatError) as caught:
        analyse_trace(trace_of(events))
    assert caught.value.hint


def test_trace_without_events_keeps_columns_and_dtypes():
    analysis = analyse_trace({"traceEvents": []}, mode="eager")
    reference = analyse_trace(eager_trace(), mode="eager")
    assert analysis.launch_split.empty and analysis.kernels.empty
    assert analysis.launch_split.dtypes.to_dict() == reference.launch_split.dtypes.to_dict()
    assert analysis.kernels.dtypes.to_dict() == reference.kernels.dtypes.to_dict()
    assert all(math.isnan(value) for value in analysis.summary().values())
    assert "No GPU kernels" in format_report(analysis)


# ---- kernels ----

def test_kernel_table_golden():
    kernels = analyse_trace(eager_trace(), mode="eager").kernels
    assert list(kernels.columns) == KERNEL_COLUMNS
    assert kernels["kernel"].tolist() == ["foo", GEMM_KERNEL]
    foo = kernels.iloc[0]
    assert foo["kernel_full"] == FOO_KERNEL
    assert foo["calls_per_iter"] == 2
    assert (foo["total_us"], foo["mean_us"], foo["min_us"], foo["max_us"]) == (100, 25, 20, 30)
    assert foo["share_of_gpu_pct"] == pytest.approx(100 * 100 / 140)
    assert kernels["share_of_gpu_pct"].sum() == pytest.approx(100)


@pytest.mark.parametrize("full_name, short", [
    (FOO_KERNEL, "foo"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1>)", "vectorized_elementwise_kernel"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
     "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<"
     "float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, "
     "at::native::gpu_kernel_impl_nocast<float>::{lambda(int)#1})", "elementwise_kernel"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>("
     "cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4::Params)",
     "cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::"
     "GemmShape<128, 128, 32>, float> >(cutlass::gemm::kernel::GemmUniversal<float>::Params)",
     "GemmUniversal"),
    ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"
     "segment_k_off_kernel__5x_cublas",
     "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32..."),
])
def test_short_kernel_names(full_name, short):
    assert short_kernel_name(full_name) == short
    assert len(short_kernel_name(full_name)) <= 60


# ---- the speedup decomposition ----

def test_decomposition_golden_and_additive():
    breakdown = decompose_speedup(analyse_trace(eager_trace(), "eager"),
                                  analyse_trace(graph_trace(), "graph"))
    assert list(breakdown.columns) == BREAKDOWN_COLUMNS
    assert breakdown["mode"].tolist() == ["graph"] * 5  # the other mode's block of breakdown.csv
    rows = breakdown.set_index("component")
    assert rows.index.tolist() == ["gpu_busy", "gpu_idle", "total_span", "cpu_launch",
                                   "cpu_other"]
    assert rows["eager_us"].tolist() == [70, 60, 130, 19, 81]
    assert rows["mode_us"].tolist() == [39, 31, 70, 23, 27]
    assert rows["saving_us"].tolist() == [31, 29, 60, -4, 54]
    assert rows.loc["total_span", "share_of_saving_pct"] == 100
    assert rows.loc["gpu_busy", "share_of_saving_pct"] == pytest.approx(31 / 60 * 100)
    assert rows.loc["cpu_other", "share_of_saving_pct"] == pytest.approx(90)


def test_any_modes_block_is_labelled_with_that_mode():
    """The runner decomposes every profiled mode against eager and stacks the blocks: each is
    labelled with its mode (``TraceAnalysis.mode``, or ``mode=`` from medians, never a default)."""
    eager = analyse_trace(eager_trace(), "eager")
    other = analyse_trace(graph_trace(), "compile_ro")
    block = decompose_speedup(eager, other)
    assert block["mode"].tolist() == ["compile_ro"] * 5
    from_medians = decompose_medians(eager.summary(), other.summary(), mode="compile_ro")
    pd.testing.assert_frame_equal(from_medians, block)
    with pytest.raises(TypeError):
        decompose_medians(eager.summary(), other.summary())  # the mode is required
    with pytest.raises(TypeError):
        decompose_medians(eager.summary(), other.summary(), "graph")  # keyword only


def analysis_with_split(spans, busy):
    split = pd.DataFrame({
        "mode": "m", "iteration": range(len(spans)), "span_us": spans, "cpu_launch_us": 0.0,
        "cpu_other_us": 0.0, "gpu_busy_us": busy,
        "gpu_idle_us": [span - b for span, b in zip(spans, busy)], "launches": 0, "kernels": 0,
        "launch_delay_us": float("nan"),
    }, columns=LAUNCH_SPLIT_COLUMNS)
    kernels = pd.DataFrame(columns=KERNEL_COLUMNS)
    return TraceAnalysis("m", split, kernels, "profiler_steps", (), 0)


def test_busy_and_idle_rows_add_up_to_the_span_even_when_medians_do_not():
    # median span 100, median busy 50, but median of idle times (10, 60, 70) is 60.
    eager = analysis_with_split([100.0, 80.0, 120.0], [90.0, 20.0, 50.0])
    graph = analysis_with_split([40.0, 40.0, 40.0], [30.0, 30.0, 30.0])
    rows = decompose_speedup(eager, graph).set_index("component")
    assert eager.summary()["gpu_idle_us"] == 60
    assert rows.loc["gpu_idle", "eager_us"] == 50
    assert rows.loc["gpu_busy", "saving_us"] + rows.loc["gpu_idle", "saving_us"] == \
        rows.loc["total_span", "saving_us"] == 60


def test_no_span_saving_gives_nan_shares():
    same = analyse_trace(eager_trace(), "eager")
    breakdown = decompose_speedup(same, same)
    assert breakdown["saving_us"].tolist() == [0, 0, 0, 0, 0]
    assert breakdown["share_of_saving_pct"].isna().all()


# ---- report and files ----

def test_report_names_source_launch_apis_and_kernels():
    report = format_report(analyse_trace(graph_trace(), mode="graph"))
    assert "mode 'graph'" in report
    assert "step markers (ProfilerStep#N)" in report
    assert "cudaGraphLaunch, cudaMemcpyAsync" in report
    assert "gpu_busy" in report and "39.0 us" in report
    for short_name in ("foo", "add_kernel", "sm90_xmma_gemm"):
        assert short_name in report
    graph_launch_report = format_report(analyse_trace(trace_of([
        api_call("cudaGraphLaunch", 0, 20, 1), gpu_event(FOO_KERNEL, 25, 10, 1)])))
    assert "each cudaGraphLaunch is one iteration" in graph_launch_report
    whole_report = format_report(analyse_trace(trace_of(eager_iteration(0, 10))))
    assert "whole trace as one window" in whole_report


def test_report_lists_at_most_ten_kernels():
    events = [step_marker(1, 0, 1000)]
    for index in range(12):
        events += [api_call("cudaLaunchKernel", 10 + index * 10, 2, index),
                   gpu_event(f"kernel_{index:02d}", 100 + index * 10, 1 + index, index)]
    report = format_report(analyse_trace(trace_of(events)))
    assert "Top 10 kernels" in report
    assert "kernel_11" in report and "kernel_02" in report
    assert "kernel_01" not in report and "kernel_00" not in report


def test_write_tables(tmp_path):
    analysis = analyse_trace(eager_trace(), mode="eager")
    paths = write_tables(analysis, tmp_path / "run")
    assert [path.name for path in paths] == ["launch_split.csv", "kernels.csv"]
    launch_split = pd.read_csv(paths[0])
    assert list(launch_split.columns) == LAUNCH_SPLIT_COLUMNS
    assert launch_split["gpu_busy_us"].tolist() == [70, 70]
    assert list(pd.read_csv(paths[1]).columns) == KERNEL_COLUMNS


# ---- loading files ----

@pytest.mark.parametrize("file_name", ["trace.json.gz", "trace_gzipped_without_suffix.json"])
def test_gzipped_trace_round_trip(tmp_path, file_name):
    path = tmp_path / file_name
    path.write_bytes(gzip.compress(json.dumps(eager_trace()).encode()))
    loaded = load_trace(path)
    # the complete events are kept, as analyse_trace reads them from the trace object itself
    assert loaded.entries == len(eager_trace()["traceEvents"])
    assert len(loaded.events) == sum(e["ph"] == "X" for e in eager_trace()["traceEvents"])
    pd.testing.assert_frame_equal(analyse_trace(loaded).launch_split,
                                  analyse_trace(eager_trace()).launch_split)


def test_plain_json_trace_loads(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(graph_trace()))
    assert analyse_trace(load_trace(path)).summary()["gpu_busy_us"] == 39


@pytest.mark.parametrize("content", [
    b'{"traceEvents": [',  # truncated JSON
    b'{"schemaVersion": 1}',  # no traceEvents
    b'{"traceEvents": {"ph": "X"}}',  # not a list
    b"[]",  # a bare event array is not what torch.profiler writes
    b"\x1f\x8b\x08\x00 broken gzip",
    b"\xff\xfe not utf-8",
])
def test_malformed_trace_raises_format_error(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(RunFormatError) as caught:
        load_trace(path)
    assert caught.value.hint


def test_missing_trace_file_raises_format_error(tmp_path):
    with pytest.raises(RunFormatError, match="cannot read trace"):
        load_trace(tmp_path / "absent.json")


def test_analyse_rejects_a_dict_without_events():
    with pytest.raises(RunFormatError):
        analyse_trace({"events": []})


# ---- a real trace from torch.profiler (CPU only) ----

def test_real_cpu_only_trace_from_torch_profiler(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    path = tmp_path / "cpu_trace.json"
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda prof: prof.export_chrome_trace(str(path))) as prof:
        for _ in range(5):
            model(torch.randn(2, 8)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()

    analysis = analyse_trace(load_trace(path), mode="eager")
    split = analysis.launch_split
    assert analysis.iteration_source == "profiler_steps"
    assert len(split) == 3
    assert (split["span_us"] > 0).all()
    assert (split["gpu_busy_us"] == 0).all()
    assert (split["gpu_idle_us"] == split["span_us"]).all()
    assert (split["cpu_other_us"] == split["span_us"]).all()
    assert (split["launches"] == 0).all() and (split["kernels"] == 0).all()
    assert split["launch_delay_us"].isna().all()
    assert analysis.gpu_event_count == 0
    assert analysis.kernels.empty and list(analysis.kernels.columns) == KERNEL_COLUMNS
    assert "profiler's step markers" in format_report(analysis)
