"""Golden figures from small real traces recorded on an NVIDIA H200 with this tool.

tests/data/h200_launch_bound/: N=64, 512 -> 512 -> 256, fp32, SGD, dropout 0.2/0.1, torch 2.11,
4 profiled iterations per mode (``python -m profiler_core run --batch 64 --d-in 512 --hidden 512
--d-out 256 --replays 20 --trials 2 --profile-iters 4 ...``). The eager trace is stored gzipped.
"""

from pathlib import Path

import pytest

from profiler_core.analysis.trace import analyse_trace, decompose_speedup
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.cli.main import main

DATA = Path(__file__).parent / "data" / "h200_launch_bound"


@pytest.fixture(scope="module")
def eager():
    return analyse_trace(load_trace(DATA / "trace_eager.json.gz"), mode="eager")


@pytest.fixture(scope="module")
def graph():
    return analyse_trace(load_trace(DATA / "trace_graph.json"), mode="graph")


def test_iterations_come_from_the_step_markers(eager, graph):
    assert eager.iteration_source == graph.iteration_source == "profiler_steps"
    assert len(eager.launch_split) == len(graph.launch_split) == 4


def test_eager_golden_figures(eager):
    split = eager.launch_split
    assert list(split["launches"]) == [21] * 4 and list(split["kernels"]) == [21] * 4
    assert split.loc[1, "span_us"] == pytest.approx(1299.42, abs=0.01)
    assert split.loc[1, "cpu_launch_us"] == pytest.approx(193.224, abs=0.001)
    assert split.loc[1, "gpu_busy_us"] == pytest.approx(61.79, abs=0.01)
    assert eager.gpu_event_count == 84
    assert set(eager.launch_api_names) == {"cuLaunchKernel", "cudaLaunchKernel", "cudaLaunchKernelExC"}


def test_graph_golden_figures(graph):
    split = graph.launch_split
    # One cudaGraphLaunch plus the two RNG seed/offset fills that replay() issues with dropout;
    # the graph's 21 kernels and the 2 fills are linked to those 3 launches by correlation id.
    assert list(split["launches"]) == [3] * 4 and list(split["kernels"]) == [23] * 4
    assert split.loc[2, "span_us"] == pytest.approx(139.01, abs=0.01)
    assert split.loc[2, "gpu_busy_us"] == pytest.approx(67.61, abs=0.01)
    assert split.loc[2, "cpu_launch_us"] == pytest.approx(38.983, abs=0.001)
    assert "cudaGraphLaunch" in graph.launch_api_names
    # The input copies made before each replay lie outside the iteration markers.
    assert (split["gpu_busy_us"] < 70).all()


def test_graph_removes_idle_time_not_kernel_time(eager, graph):
    breakdown = decompose_speedup(eager, graph).set_index("component")
    assert breakdown.loc["gpu_idle", "saving_us"] == pytest.approx(1392.79, abs=0.01)
    assert breakdown.loc["gpu_busy", "saving_us"] == pytest.approx(-5.84, abs=0.01)
    total = breakdown.loc["total_span", "saving_us"]
    assert breakdown.loc["gpu_idle", "saving_us"] + breakdown.loc["gpu_busy", "saving_us"] == pytest.approx(total)
    assert breakdown.loc["cpu_launch", "eager_us"] > 4 * breakdown.loc["cpu_launch", "mode_us"]


def test_kernel_tables(eager, graph):
    top = eager.kernels.iloc[0]
    assert top["kernel"] == "cutlass_80_simt_sgemm_64x64_8x5_tn_align1"
    assert top["calls_per_iter"] == 2.0 and top["total_us"] == pytest.approx(54.305)
    assert eager.kernels["share_of_gpu_pct"].sum() == pytest.approx(100.0)
    assert (len(eager.kernels), len(graph.kernels)) == (14, 15)


def test_trace_stats_command_on_a_recorded_trace(tmp_path, capsys):
    assert main(["trace-stats", str(DATA / "trace_graph.json"), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "step markers" in printed and "cudaGraphLaunch" in printed
    assert (tmp_path / "launch_split.csv").is_file() and (tmp_path / "kernels.csv").is_file()


def test_trace_stats_on_a_malformed_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert main(["trace-stats", str(bad)]) == 2
    assert "error:" in capsys.readouterr().err


def test_each_kernel_names_the_operator_that_launched_it(eager, graph):
    """The innermost CPU op around each kernel's launch call (linked by correlation id), as the
    PyTorch profiler and HTA attribute kernels to operators."""
    ops = {(row.kernel, row.operator) for row in eager.kernels.itertuples()}
    assert ("cutlass_80_simt_sgemm_64x64_8x5_tn_align1", "aten::addmm") in ops
    assert ("multi_tensor_apply_kernel<BinaryOpListAlphaFunctor>", "aten::_foreach_add_") in ops
    assert ("fused_dropout_kernel_vec", "aten::native_dropout") in ops
    assert ("vectorized_elementwise_kernel<FillFunctor>", "aten::fill_") in ops
    assert ("reduce_kernel<MeanOps>", "aten::mean") in ops
    assert (eager.kernels["operator"] != "").all()
    # four vectorized_elementwise_kernel rows, each named apart and by its operator
    vectorized = eager.kernels[eager.kernels["kernel"].str.startswith("vectorized_elementwise")]
    assert len(vectorized) == 4 and vectorized["kernel"].nunique() == 4
    assert set(vectorized["operator"]) == {"aten::native_dropout_backward", "aten::fill_",
                                           "aten::mse_loss", "aten::add_"}
    # a graph's kernels were launched by its replay; the seed and offset fills by aten::fill_
    launched = graph.kernels.set_index("kernel")["operator"]
    assert launched["cutlass_80_simt_sgemm_64x64_8x5_tn_align1"] == "CUDA graph replay"
    assert set(graph.kernels["operator"]) == {"CUDA graph replay", "aten::fill_"}
