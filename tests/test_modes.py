"""The modes beside eager and the article's graph, on the CPU: choosing them (config, CLI), the
modes table, and what a CPU run does with modes that need CUDA. torch.compile runs with its
``eager`` backend here so the tests take seconds (the compiler itself is measured on the GPU)."""

from __future__ import annotations

import pytest
import torch

from profiler_core.analysis import metrics
from profiler_core.cli import parser as cli
from profiler_core.cli.main import main
from profiler_core.engine import modes
from profiler_core.orchestration.command import config_to_argv
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ConfigError
from profiler_core.storage import runtables
from profiler_core.storage.results import RunResult

TINY = ["--device", "cpu", "--batch", "8", "--d-in", "16", "--hidden", "32", "--d-out", "4",
        "--replays", "20", "--trials", "4", "--progress", "none"]


@pytest.fixture
def fast_compile(monkeypatch):
    compile_ = torch.compile
    monkeypatch.setattr(modes.torch, "compile",
                        lambda model, mode=None, dynamic=None: compile_(model, backend="eager",
                                                                        mode=None, dynamic=dynamic))


def test_modes_are_chosen_after_eager_and_graph():
    args = cli.parse(["run", "--out", "x", "--modes", "compile_ro, compile"])
    assert cli.config_from_args(args).modes == ("eager", "graph", "compile_ro", "compile")
    config = RunConfig(modes=("eager", "graph", "compile"))
    assert RunConfig.from_dict(config.to_dict()) == config and config.extra_modes == ("compile",)
    assert cli.config_from_args(cli.parse(["run", "--out", "x", *config_to_argv(config)])) == config
    with pytest.raises(ConfigError):
        RunConfig(modes=("graph", "eager"))


def test_an_unknown_mode_is_one_line_and_exit_2(capsys):
    assert main(["run", "--out", "x", "--modes", "compile,fast", *TINY]) == 2
    err = capsys.readouterr().err
    assert "expected modes among eager, graph, graphed_callables, compile, compile_ro" in err
    assert err.count("\n") == 1


def test_a_cpu_run_times_compile_beside_eager_and_skips_what_needs_cuda(tmp_path, capsys,
                                                                        fast_compile):
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--modes", "compile,compile_ro,graphed_callables",
                 *TINY]) == 0
    assert "Every mode" in capsys.readouterr().out
    run = RunResult.load(out)
    table = run.table("modes").set_index("mode")
    assert list(table.index) == ["eager", "compile"]
    assert table.loc["eager", "speedup"] == pytest.approx(1.0)
    assert table.loc["compile", "one_time_ms"] > 0 and table.loc["compile", "median_ms"] > 0
    assert table.loc["compile", "speedup_ci_low"] <= table.loc["compile", "speedup"] <= \
        table.loc["compile", "speedup_ci_high"]
    latency = run.table("latency")
    assert set(latency["mode"]) == {"eager", "compile"}
    assert (latency["mode"] == "compile").sum() == (latency["mode"] == "eager").sum() == 16
    assert any("compile_ro, graphed_callables need a CUDA device" in n for n in run.notes)
    phases = set(run.table("phases")["phase"])
    assert {"compile preparation", "compile warm-up", "compile timed"} <= phases
    assert run.headline["modes"] == ["eager", "compile"]
    figures = run.table("metrics").set_index(["mode", "metric"])
    assert figures.loc[("compile", "median_ms"), "value"] == table.loc["compile", "median_ms"]
    assert figures.loc[("compile", "median_ms"), "eager_value"] == table.loc["eager", "median_ms"]
    assert figures.loc[("compile", "steady_wall_speedup"), "value"] > 0  # every method vs eager


def test_the_registry_holds_every_mode_in_run_order_eager_first():
    from profiler_core.spec.modes import CUDA_ONLY_MODES, MODE_LABELS, MODE_NAMES

    assert tuple(modes.REGISTRY) == MODE_NAMES and MODE_NAMES[0] == "eager"
    assert {name: spec.label for name, spec in modes.REGISTRY.items()} == MODE_LABELS
    config = RunConfig(replays=30, capture_iters=3)
    iterations = {name: spec.timed_iterations(config) for name, spec in modes.REGISTRY.items()}
    assert iterations == {"eager": 90, "graph": 30, "graphed_callables": 90, "compile": 90,
                          "compile_ro": 90}  # as many training steps in every mode
    assert CUDA_ONLY_MODES == ("graph", "graphed_callables", "compile_ro")


# Every registry of per-mode code: its module, its name there, and the modes it has no entry for.
PER_MODE_REGISTRIES = (("profiler_core.engine.modes", "REGISTRY", ()),
                       ("profiler_core.engine.ddp_step", "RANK_PREPARATION", ()),
                       ("profiler_core.engine.parity", "CANDIDATES", ("eager",)))


@pytest.mark.parametrize("module_name, registry, without", PER_MODE_REGISTRIES)
def test_every_registry_of_per_mode_code_has_every_declared_mode_in_run_order(
        module_name, registry, without):
    import importlib

    from profiler_core.spec.modes import MODE_NAMES

    entries = getattr(importlib.import_module(module_name), registry)
    assert tuple(entries) == tuple(name for name in MODE_NAMES if name not in without)


@pytest.mark.parametrize("module_name, registry, without", PER_MODE_REGISTRIES)
def test_a_mode_declared_without_its_code_in_a_registry_stops_the_import_saying_what_to_add(
        module_name, registry, without, monkeypatch):
    """A new ModeSpec with no entry in the single-process registry, the data-parallel one or
    parity's: importing that module fails, naming the mode, the registry and what to add."""
    import dataclasses
    import importlib.util
    import sys

    from profiler_core.spec import modes as declared

    new = dataclasses.replace(declared.SPECS["compile"], name="new_mode")
    monkeypatch.setattr(declared, "SPECS", {**declared.SPECS, "new_mode": new})
    monkeypatch.setattr(declared, "MODE_NAMES", (*declared.MODE_NAMES, "new_mode"))
    found = importlib.util.find_spec(module_name)
    assert found is not None and found.loader is not None
    fresh = importlib.util.module_from_spec(found)  # a copy: the imported module stays as it is
    monkeypatch.setitem(sys.modules, module_name, fresh)
    with pytest.raises(declared.UndeclaredModeError) as raised:
        found.loader.exec_module(fresh)
    message = str(raised.value)
    assert message.startswith("mode new_mode is declared in spec/modes.py but has no entry in ")
    module_file = module_name.removeprefix("profiler_core.").replace(".", "/") + ".py"
    assert f" in {module_file}'s " in message and ": add a" in message


def test_a_registry_entry_for_a_mode_nothing_declares_is_refused():
    from profiler_core.spec.modes import UndeclaredModeError, per_mode

    entries = {name: name for name in modes.REGISTRY}
    assert per_mode(entries, "here", "an entry") == entries
    with pytest.raises(UndeclaredModeError, match="here has an entry for gone, which spec/modes.py "
                                                  "does not declare: add its ModeSpec to MODES"):
        per_mode({**entries, "gone": "gone"}, "here", "an entry")
    with pytest.raises(UndeclaredModeError, match="here has an entry for eager, which it never uses"):
        per_mode(entries, "here", "an entry", without=("eager",))
    with pytest.raises(UndeclaredModeError, match="mode compile is declared .* add an entry for it"):
        per_mode({k: v for k, v in entries.items() if k != "compile"}, "here", "an entry")


def test_each_modes_facts_are_declared_once_and_read_everywhere():
    from profiler_core import MODES, ModeSpec
    from profiler_core.engine import cpu_time
    from profiler_core.spec import fields
    from profiler_core.spec import modes as declared

    assert all(isinstance(mode, ModeSpec) for mode in MODES)
    assert declared.MODE_NAMES == tuple(mode.name for mode in MODES)
    assert declared.ALWAYS_MEASURED == ("eager", "graph") == RunConfig().modes
    for name, implementation in modes.REGISTRY.items():  # the engine reads the declaration
        assert implementation.spec is declared.SPECS[name]
        assert implementation.cuda_only == declared.SPECS[name].cuda_only
    assert cpu_time.COMPILED_MODES is declared.COMPILED_MODES == ("compile", "compile_ro")
    spec = fields.spec("modes")  # the CLI's and the dashboard's help name every extra mode
    assert spec.choices == declared.EXTRA_MODES == ("graphed_callables", "compile", "compile_ro")
    for name in declared.EXTRA_MODES:
        assert name in spec.option_help and declared.SPECS[name].help in spec.help
    assert spec.cpu_note.startswith("On the CPU only torch.compile can run")


def test_every_mode_is_prepared_through_the_registry_with_its_phases_and_one_time_cost(fast_compile):
    from profiler_core.engine.telemetry import PhaseRecorder
    from profiler_core.engine.workloads import make_batches
    from profiler_core.spec.progress import ProgressCounter

    config = RunConfig(device="cpu", batch=4, d_in=8, hidden=16, d_out=2, capture_iters=2)
    batches = make_batches(config, 3, torch.device("cpu"))
    phases, seen = PhaseRecorder(0.0), []
    prep = modes.Preparation(config, torch.device("cpu"), batches, phases,
                             ProgressCounter(100, seen.append))
    prepared = {name: modes.REGISTRY[name].prepare(prep) for name in ("eager", "compile")}
    assert [ready.mode.name for ready in prepared.values()] == ["eager", "compile"]
    assert prepared["eager"].one_time_ms == 0 and prepared["compile"].one_time_ms > 0
    assert prepared["eager"].mode.steps == prepared["compile"].mode.steps == 1
    for ready in prepared.values():
        ready.mode.run(0)  # one iteration each, ready to time
    assert {"setup", "compile preparation"} <= set(phases.frame()["phase"])
    assert {p.phase for p in seen} >= {"setup", "compile preparation"}


def test_skip_reasons_are_collected_from_inductors_and_dynamos_logs():
    import logging

    with modes.SkipReasons().watching() as watcher:
        log = logging.getLogger("torch._inductor.cudagraph_utils.__anything")
        log.warning("skipping cudagraphs due to mutated inputs (1 instances)")
        log.warning("skipping cudagraphs due to mutated inputs (1 instances)")
        log.warning("something else")
        log.warning("CUDAGraph supports dynamic shapes by recording a new graph for each distinct "
                    "input size. Recording too many CUDAGraphs may lead to extra overhead. We have "
                    "observed 9 distinct sizes. Please consider the following options")
        dynamo = logging.getLogger("torch._dynamo.convert_frame")
        for _ in range(2):
            dynamo.warning("torch._dynamo hit config.%s (%s)\n   function: %s\n   last reason: %s",
                           "recompile_limit", 8, "'forward' (model.py:12)", "size mismatch")
    assert watcher.reasons == [
        "skipping cudagraphs due to mutated inputs (1 instances)",
        "CUDAGraph supports dynamic shapes by recording a new graph for each distinct input size. "
        "Recording too many CUDAGraphs may lead to extra overhead.",
        "torch._dynamo hit config.recompile_limit (8); function: 'forward' (model.py:12)"]
    assert all(watcher not in logging.getLogger(name).handlers for name in modes.COMPILE_LOGGERS)
    # without CUDA (or a torch that does not say) the count is a number or NaN, never an error
    assert isinstance(modes.cuda_graphs_recorded(torch.device("cuda", 0)), float)
    assert isinstance(modes.cuda_graphs_recorded(torch.device("cuda"), frozenset()), float)
    assert modes.graph_functions(torch.device("cuda")) in (None, frozenset())


def test_what_torch_warns_while_a_mode_is_prepared_becomes_a_note_of_the_run(monkeypatch):
    import warnings

    from profiler_core.engine import runner
    from profiler_core.engine.telemetry import PhaseRecorder
    from profiler_core.engine.workloads import make_batches
    from profiler_core.spec.progress import ProgressCounter

    real = modes.REGISTRY["eager"]

    def warn_then_prepare(prep):
        warnings.warn("The AccumulateGrad node's stream does not match. This may incur sync.", stacklevel=2)
        warnings.warn("The AccumulateGrad node's stream does not match. Again.", stacklevel=2)
        warnings.warn("not torch's kind", DeprecationWarning, stacklevel=2)
        return real.prepare(prep)

    monkeypatch.setitem(modes.REGISTRY, "eager", modes.ModeImplementation("eager", warn_then_prepare))
    config = RunConfig(device="cpu", batch=4, d_in=8, hidden=16, d_out=2)
    prep = modes.Preparation(config, torch.device("cpu"), make_batches(config, 2, torch.device("cpu")),
                             PhaseRecorder(0.0), ProgressCounter(100))
    runner._prepare_modes(["eager"], prep)
    assert prep.notes == ["eager: torch warned while preparing it: The AccumulateGrad node's "
                          "stream does not match"]


def test_the_summary_keeps_no_figure_and_the_index_names_them_as_the_headline_did():
    """The runner's summary headline holds the timing method and how each window found its
    iterations, no figure (every mode's figures are in metrics.csv); the index's filters name
    eager's and the graph's as the headline once did (<mode>_<metric>, or the older name), and
    other modes' as <mode>_<metric>."""
    assert runtables.headline_facts({"eager": "profiler_steps", "compile": "profiler_steps"}) == {
        "timing_method": "steady_trial", "eager_iteration_source": "profiler_steps"}
    figures = {"eager": {"span_us": 900.0, "peak_bytes": 10},
               "graph": {"capture_ms": 12.0, "pool_bytes": 64, "break_even_iters": 3.0,
                         "span_us": 300.0},
               "compile": {"span_us": 450.0}}
    names = {metrics.headline_key(mode, metric): value
             for mode, by_metric in figures.items() for metric, value in by_metric.items()}
    assert names == {"eager_span_us": 900.0, "eager_peak_bytes": 10, "capture_ms": 12.0,
                     "graph_pool_bytes": 64, "break_even_iters": 3.0, "graph_span_us": 300.0,
                     "compile_span_us": 450.0}
