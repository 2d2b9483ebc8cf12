"""The one declaration of every ``RunConfig`` field (``profiler_core.spec.fields``): each field is
declared exactly once, and both the command line and the sidebar offer every declared field, so
a new field cannot be forgotten in one of them. Also reading a field's value from text."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import controls, devices, state
from profiler_core.cli import parser as cli
from profiler_core.orchestration.command import config_to_argv
from profiler_core.spec import fields, workload_kinds
from profiler_core.spec.config import FLOAT_LIMITS, INT_LIMITS, RunConfig
from profiler_core.spec.errors import ConfigError
from tests.test_dashboard import ONE_GPU

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
RUN_ONLY_OPTIONS = {"-h", "--help", "--out", "--overwrite", "--progress", "--timeout", "--timings",
                    "--inject-delay-ms"}  # not settings of a run
WIDGET_KINDS = ("number_input", "selectbox", "toggle", "multiselect", "text_input")

# Every field away from its default but the preset label (a field added to RunConfig must be
# added here too, which is the point: the round trips below then cover it).
EVERY_FIELD_CHANGED = RunConfig(
    batch=48, d_in=40, hidden=64, d_out=12, hidden_layers=2, heads=4, seq_len=16, channels=8,
    image_size=12, dropout1=0.05, dropout2=0.3, dtype="bf16", optimizer="adamw", warmup_iters=2,
    capture_iters=2, replays=30, eager_iters=50, count_warmup=False, seed=7, device="cuda:1",
    trials=3, profile=False, profile_iters=4, nvml=False, nvml_interval_ms=12.5, parity_steps=0,
    modes=("eager", "graph", "compile"), workload="transformer", preset="custom", repeats=4,
    cpu_affinity="0,2-3", nproc_per_node=2)


def _config_field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(RunConfig)]


def test_every_runconfig_field_is_declared_exactly_once():
    declared = [spec.name for spec in fields.FIELDS]
    assert sorted(declared) == sorted(_config_field_names())
    assert len(declared) == len(set(declared))


def test_declarations_are_complete_and_ranges_come_from_config():
    for spec in fields.FIELDS:
        assert spec.kind in fields.KINDS and spec.label and spec.help and spec.option_help, spec.name
        assert spec.section in (*fields.SECTIONS, fields.ABOVE_SECTIONS, fields.CHANGING_SHAPES,
                                fields.COMMAND_LINE_ONLY), spec.name
        # every field applies to some built-in workload, but an own step's settings to own steps only
        assert (any(spec.applies_to(name) for name in fields.BUILT_IN_WORKLOADS)
                or spec.kind == fields.SETTINGS and spec.applies_to("mine.step:build")), spec.name
        if spec.kind in (fields.CHOICE, fields.LIST, fields.WORKLOAD, fields.PRESET):
            assert spec.choices, spec.name
        if spec.cpu_value is not None:  # only a control the CPU cannot use is fixed there
            assert spec.graph_only, spec.name
            RunConfig(**{spec.name: spec.cpu_value}, device="cpu")
    assert workload_kinds.SIZE_FIELDS <= set(fields.SPECS)  # every size field is declared
    assert {s.name for s in fields.FIELDS if s.kind == fields.INT} == set(INT_LIMITS)
    assert {s.name for s in fields.FIELDS if s.kind == fields.FLOAT} == set(FLOAT_LIMITS)
    assert all(fields.spec(name).limits is INT_LIMITS[name] for name in INT_LIMITS)
    assert all(fields.spec(name).limits is FLOAT_LIMITS[name] for name in FLOAT_LIMITS)
    # the fields that may be None (automatic) are exactly the ones declared with an "empty" text
    assert {s.name for s in fields.FIELDS if s.empty} == {
        name for name, default in dataclasses.asdict(RunConfig()).items() if default is None}


def test_each_workloads_size_fields_are_the_ones_its_object_declares():
    """``workload_kinds`` says which fields shape each built-in workload (the transformer uses
    only the first dropout, the conv classifier only the second); the sidebar shows exactly those."""
    for name, workload in workload_kinds.BUILT_IN.items():
        shown = {s.name for s in fields.in_section(fields.MODEL)
                 if s.kind in (fields.INT, fields.FLOAT) and s.applies_to(name)}
        assert shown == set(workload.size_fields), name


def test_the_command_line_offers_every_declared_field_and_nothing_undeclared():
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = commands.choices["run"]
    offered = {option for action in run._actions for option in action.option_strings}
    declared = set(fields.options())
    assert declared <= offered
    negations = {"--no-" + s.cli_option[2:] for s in fields.FIELDS if s.kind == fields.BOOL}
    assert offered - declared - negations == RUN_ONLY_OPTIONS
    assert cli.OPTION_OF_FIELD == {s.name: s.cli_option for s in fields.FIELDS}


# The own step's settings, as the command line gives them (text: the run converts each to its
# kind from the build function's signature, ``user_workload.check_settings``).
OWN_STEP_SETTINGS = RunConfig(workload="profiler_core.examples.user_step:build", preset="custom",
                              workload_args=(("batch", "8"), ("bf16", "on")))
# Shapes that change from step to step (not with data parallelism, which the first config has).
SHAPED = RunConfig(workload="transformer", preset="custom", vary="seq_len=lognormal:128:0.6:512",
                   buckets="quantiles:3", strategies="eager,buckets,compile_ro")


def test_every_field_survives_the_worker_command_line():
    default = RunConfig()  # its preset label is custom too: a changed run keeps that label
    # every field but the own step's settings and the shapes (tested below: only an own step has
    # settings, and shapes cannot vary in a data-parallel run)
    assert [n for n in _config_field_names()
            if getattr(EVERY_FIELD_CHANGED, n) == getattr(default, n)] == [
        "preset", "workload_args", "vary", "buckets", "strategies"]
    for config in (EVERY_FIELD_CHANGED, RunConfig(), OWN_STEP_SETTINGS, SHAPED,
                   RunConfig(workload="profiler_core.examples.user_step:build", preset="custom")):
        argv = config_to_argv(config)
        assert cli.config_from_args(cli.parse(["run", "--out", "x", *argv])) == config
    # one option per field (two values for --dropout), plus the negative forms of the toggles;
    # an own step's settings take one option each
    argv = config_to_argv(EVERY_FIELD_CHANGED)
    assert [a for a in argv if a.startswith("--")] == [
        o if specs[0].kind != fields.BOOL else "--no-" + o[2:] for o, specs in fields.options().items()
        if specs[0].kind != fields.SETTINGS and specs[0].name not in ("vary", "strategies")]
    assert config_to_argv(OWN_STEP_SETTINGS).count("--workload-arg") == 2


@pytest.mark.parametrize("name", _config_field_names())
def test_parse_value_reads_back_what_format_value_writes(name):
    for config in (EVERY_FIELD_CHANGED, RunConfig(), OWN_STEP_SETTINGS, SHAPED):
        value = getattr(config, name)
        assert fields.parse_value(name, fields.format_value(name, value)) == value


def test_parse_value_reads_the_command_lines_spellings():
    assert fields.parse_value("batch", "1_024") == 1024
    assert fields.parse_value("dropout1", "0.25") == 0.25
    assert fields.parse_value("device", "1") == "cuda:1"
    assert fields.parse_value("device", "CPU") == "cpu"
    assert fields.parse_value("modes", "compile_ro, compile") == ("eager", "graph", "compile_ro",
                                                                  "compile")
    assert fields.parse_value("profile", "off") is False
    assert fields.parse_value("count_warmup", "yes") is True
    assert fields.parse_value("trials", "auto") is None and fields.parse_value("eager_iters", "") is None
    assert fields.parse_value("workload", "pkg.mod:build") == "pkg.mod:build"


@pytest.mark.parametrize("name, text, said", [
    ("batch", "lots", "expected a whole number, got 'lots'"),
    ("batch", "", "expected a whole number"),  # only an automatic field may be empty
    ("dropout2", "half", "expected a number"),
    ("dtype", "fp8", "expected one of fp32, fp32-ieee, tf32, bf16, fp16"),
    ("modes", "fast", "expected modes among eager, graph"),
    ("device", "gpu", "expected 'cpu' or a CUDA index"),
    ("workload", "my model", "package.module:function"),
    ("nvml", "maybe", "expected on or off"),
    ("preset", "lesson9", "expected one of seed"),
])
def test_parse_value_refuses_bad_text_in_one_line_naming_the_field(name, text, said):
    with pytest.raises(ConfigError) as caught:
        fields.parse_value(name, text)
    assert caught.value.field == name and said in caught.value.message
    assert caught.value.message.startswith(f"{name}: ") and "\n" not in str(caught.value)


def test_parse_value_refuses_an_unknown_field():
    with pytest.raises(ConfigError, match="unknown setting 'width'"):
        fields.parse_value("width", "8")


def test_the_declarations_import_neither_torch_nor_streamlit():
    code = ("import sys, profiler_core.spec.fields; "
            "print(sorted(m for m in ('torch', 'streamlit', 'argparse') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "[]"


def _sidebar_app(monkeypatch, tmp_path, gpus) -> AppTest:
    """The dashboard drawn once with ``gpus`` as the visible devices and its runs in tmp_path."""
    monkeypatch.setattr(devices, "list_devices", lambda: gpus)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(tmp_path)
    at.run()
    return at


def _sidebar_widgets(at: AppTest) -> dict[str, object]:
    return {w.key: w for kind in WIDGET_KINDS for w in getattr(at.sidebar, kind) if w.key}


TWO_GPUS = (pd.concat([ONE_GPU[0], ONE_GPU[0].assign(device="cuda:1", index=1)],
                     ignore_index=True), "")


@pytest.mark.usefixtures("fresh_app_state")
def test_the_sidebar_draws_every_declared_field_with_its_label(monkeypatch, tmp_path):
    """Every field has its control (device and preset above the sections), under its label; a
    workload's size controls appear with that workload only, the number of GPUs for a
    data-parallel run where more than one GPU is visible (two here); the shapes have a section
    of their own (tests/test_dashboard_shapes.py), last."""
    at = _sidebar_app(monkeypatch, tmp_path, TWO_GPUS)
    drawn: set[str] = set()
    for workload in fields.BUILT_IN_WORKLOADS:
        at.sidebar.selectbox(key=controls.key("workload")).select(workload).run()
        assert not at.exception
        widgets = _sidebar_widgets(at)
        for spec in fields.FIELDS:
            shown = controls.key(spec.name) in widgets
            assert shown == (spec.applies_to(workload) and spec.section not in (
                fields.COMMAND_LINE_ONLY, fields.CHANGING_SHAPES)), (workload, spec.name)
            if shown:
                assert widgets[controls.key(spec.name)].label == spec.label_with_unit
                drawn.add(spec.name)
    command_line_only = {s.name for s in fields.FIELDS if s.section == fields.COMMAND_LINE_ONLY}
    # an own step's settings (no built-in has them) and the strategies of a run of changing
    # shapes (every one from the sidebar)
    assert command_line_only == {"workload_args", "strategies"}
    shapes = {s.name for s in fields.FIELDS if s.section == fields.CHANGING_SHAPES}
    assert shapes == {"vary", "buckets"}
    assert drawn == set(_config_field_names()) - command_line_only - shapes
    assert [e.label for e in at.sidebar.expander if not e.label.startswith("Runs folder")] == [
        *fields.SECTIONS, fields.CHANGING_SHAPES]


@pytest.mark.usefixtures("fresh_app_state")
def test_the_number_of_gpus_is_offered_only_beside_another_gpu(monkeypatch, tmp_path):
    at = _sidebar_app(monkeypatch, tmp_path, ONE_GPU)
    assert not at.exception
    widgets = _sidebar_widgets(at)
    assert controls.key("nproc_per_node") not in widgets and controls.key("batch") in widgets


@pytest.mark.usefixtures("fresh_app_state")
def test_on_the_cpu_every_graph_only_control_is_off_and_says_why(monkeypatch, tmp_path):
    at = _sidebar_app(monkeypatch, tmp_path, ONE_GPU)
    at.sidebar.selectbox(key=controls.DEVICE_KEY).select("cpu").run()
    widgets = _sidebar_widgets(at)
    for spec in fields.FIELDS:
        widget = widgets.get(controls.key(spec.name))
        if widget is None or spec.kind in (fields.DEVICE, fields.PRESET):
            continue  # another workload's size control; the selectors above the sections
        assert bool(getattr(widget, "disabled", False)) == spec.graph_only, spec.name
        assert widget.help.startswith(spec.cpu_reason), spec.name
        if spec.cpu_value is not None:
            assert widget.value == spec.cpu_value, spec.name


def test_the_cpus_small_step_is_declared_once_on_each_workload(monkeypatch):
    """The dashboard's CPU sizes and ``run --device cpu``'s small step are the same declaration."""
    for name, kind in workload_kinds.BUILT_IN.items():
        assert set(kind.cpu_sizes) <= set(kind.size_fields) | {"eager_iters", "replays", "trials"}
        assert fields.cpu_step_values(name) == {**kind.cpu_sizes, **fields.CPU_FIXED}
        session = {controls.key("workload"): name}
        monkeypatch.setattr(controls.st, "session_state", session)
        controls.apply_cpu_sizes()  # what the sidebar sets when the CPU is chosen
        assert {field: session[controls.key(field)] for field in kind.cpu_sizes} == kind.cpu_sizes
    assert fields.cpu_step_values("broken-host-sync") == fields.cpu_step_values("mlp")
    assert fields.cpu_step_values("mine.step:build") == {}


@pytest.mark.usefixtures("fresh_app_state")
def test_the_sidebars_cpu_step_is_what_run_device_cpu_runs(monkeypatch, tmp_path):
    at = _sidebar_app(monkeypatch, tmp_path, ONE_GPU)
    at.sidebar.selectbox(key=controls.DEVICE_KEY).select("cpu").run()
    assert not at.exception
    args = cli.parse(["run", "--out", "x", "--device", "cpu"])
    small = cli.cpu_small_step(args, cli.config_from_args(args))
    for name in RunConfig.__dataclass_fields__:
        if controls.key(name) in at.session_state and name not in ("device", "preset", "modes"):
            assert at.session_state[controls.key(name)] == getattr(small, name), name
    assert small.preset == "custom"  # as the sidebar labels it ("CPU-sized values, not a preset's")
