"""Facts declared once: error kinds and exit codes come from the exception classes, and each
workload's size fields, small CPU step and sweep axes from its ``Workload`` object."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import pkgutil

import pytest

import profiler_core
from dashboard import controls
from profiler_core.cli import main as cli_main
from profiler_core.cli import parser as cli
from profiler_core.engine import workload_models
from profiler_core.spec import config, errors, fields, workload_kinds
from profiler_core.spec.errors import ERROR_CLASSES, ERROR_KINDS, ProfilerError, TimeLimitReached
from profiler_core.sweep import plan as sweep


def _all_subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_all_subclasses(sub)}
    return found


def test_every_error_class_of_the_tool_is_an_error_kind_with_its_own_exit_code():
    for module in pkgutil.walk_packages(profiler_core.__path__, "profiler_core."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    classes = {cls for cls in _all_subclasses(ProfilerError) if cls.__module__.startswith("profiler_core.")}
    assert classes | {TimeLimitReached} == set(ERROR_CLASSES)
    for cls in ERROR_CLASSES:
        assert cls.kind == ("TimeLimit" if cls is TimeLimitReached else cls.__name__)
        assert ERROR_KINDS[cls.kind] == cls.exit_code, cls
    assert ERROR_KINDS[errors.INTERRUPTED] == errors.INTERRUPTED_EXIT_CODE == 130
    assert len(ERROR_KINDS) == len(ERROR_CLASSES) + 1
    # the user's step failing is exit 2 in run and sweep alike; usage and config errors are refusals
    assert ERROR_KINDS["WorkloadError"] == 2
    assert set(errors.REFUSED_KINDS) == {"UsageError", "ConfigError"}


def _raised(error: BaseException):
    def command(args):
        raise error
    return command


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.kind)
def test_the_command_line_reports_each_error_with_the_kind_and_exit_code_of_its_class(
        cls, monkeypatch, capsys):
    error = cls("batch", "batch is out of range") if cls is errors.ConfigError else cls("it failed")
    monkeypatch.setattr(cli, "parse", lambda argv: argparse.Namespace(command="failing"))
    monkeypatch.setitem(cli_main.COMMANDS, "failing", _raised(error))
    assert cli_main.main(["failing", "--progress", "jsonl"]) == cls.exit_code
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["event"] == "error" and record["kind"] == cls.kind


def test_ctrl_c_is_reported_as_interrupted(monkeypatch, capsys):
    monkeypatch.setattr(cli, "parse", lambda argv: argparse.Namespace(command="failing"))
    monkeypatch.setitem(cli_main.COMMANDS, "failing", _raised(KeyboardInterrupt()))
    assert cli_main.main(["failing", "--progress", "jsonl"]) == 130
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["kind"] == "Interrupted"


def test_a_sweep_of_a_step_that_cannot_load_is_refused_before_any_point(tmp_path, capsys):
    """As ``run`` refuses it: exit 2, one line, and no sweep folder made (no point ran)."""
    out = tmp_path / "sweep"
    assert cli_main.main(["sweep", "--workload", "nosuchmod:build", "--param", "dtype=fp32,bf16",
                          "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: cannot import 'nosuchmod'" in err and "point" not in err
    assert not out.exists()


def test_the_workload_declarations_drive_fields_cpu_sizes_and_sweep_axes():
    assert config.WORKLOADS == tuple(workload_kinds.KNOWN)
    assert fields.BUILT_IN_WORKLOADS == tuple(workload_kinds.BUILT_IN)
    for name, workload in workload_kinds.KNOWN.items():
        # fields: a workload's own size fields, and every field that sizes no workload (but the
        # settings of an own step)
        for spec in fields.FIELDS:
            assert spec.applies_to(name) == (spec.name in workload.size_fields
                                             or spec.name not in workload_kinds.SIZE_FIELDS
                                             and spec.kind != fields.SETTINGS)
        # CPU sizes: the small step a CPU run and the sidebar use
        assert fields.cpu_step_values(name) == {**workload.cpu_sizes, **fields.CPU_FIXED}
        # sweep axes: each parameter sets exactly the fields the workload declares for it
        base = fields.small_cpu_step(config.RunConfig(workload=name))
        for parameter, names in workload.sweep_axes:
            plan = sweep.SweepPlan((sweep.parse_param(f"{parameter}=24,48"),), base=base)
            for point in plan.points():
                assert {n for n in names if getattr(point.config, n) != getattr(base, n)} \
                    == set(names), (name, parameter)
                assert all(getattr(point.config, n) == point.values[0][1] for n in names)
        undeclared = [p for p in ("seq_len", "d_in", "width") if p not in dict(workload.sweep_axes)]
        for parameter in undeclared:
            with pytest.raises(errors.ConfigError, match="changes nothing here"):
                sweep.SweepPlan((sweep.parse_param(f"{parameter}=24,48"),), base=base)
    # the broken steps are the MLP with one flaw: the same sizes, CPU step and sweep axes
    for broken in workload_kinds.BROKEN.values():
        mlp = workload_kinds.BUILT_IN["mlp"]
        assert (broken.size_fields, broken.cpu_step, broken.sweep_axes) == \
            (mlp.size_fields, mlp.cpu_step, mlp.sweep_axes)
        assert type(broken) is workload_kinds.Mlp  # declared as the MLP; its flaw is torch's side
        model = workload_models.MODELS[broken.name]
        assert isinstance(model, workload_models.MlpModel) and type(model) is not workload_models.MlpModel
    # every declared workload has its torch side, and nothing else has one
    assert set(workload_models.MODELS) == set(workload_kinds.KNOWN)
    # the sidebar's caption of the step is the workload's own
    for name, workload in workload_kinds.BUILT_IN.items():
        values = fields.small_cpu_step(config.RunConfig(workload=name)).to_dict()
        assert workload.caption(values) in controls.step_text(values)
    # the user's own step declares nothing: no size field applies, no axis sets a size
    assert not any(fields.spec(n).applies_to("mine.step:build") for n in workload_kinds.SIZE_FIELDS)
    assert fields.cpu_step_values("mine.step:build") == {}


def test_a_workloads_size_fields_are_declared_with_it_and_the_config_limits_and_controls_follow():
    """Each ``SizeField`` (name, limits, label, help) is the one declaration: its ``FieldSpec``
    (the command line's option, the sidebar's control), its limits and its ``RunConfig`` field
    agree with it, and the Model section lists them in ``SIZES``' order."""
    defaults = {f.name: f.default for f in dataclasses.fields(config.RunConfig)}
    for size in workload_kinds.SIZES:
        spec = fields.spec(size.name)
        assert (spec.label, spec.help, spec.option_help, spec.section, spec.cli_option) == (
            size.label, size.help, size.option_help, fields.MODEL,
            size.option or "--" + size.name.replace("_", "-"))
        assert spec.kind == (fields.INT if size.whole else fields.FLOAT)
        assert spec.limits == size.limits
        assert (config.INT_LIMITS if size.whole else config.FLOAT_LIMITS)[size.name] == size.limits
        assert type(defaults[size.name]) is (int if size.whole else float)
        assert size.limits[0] <= defaults[size.name] <= size.limits[1]
    sized = [s.name for s in fields.in_section(fields.MODEL) if s.kind in (fields.INT, fields.FLOAT)]
    assert sized == [size.name for size in workload_kinds.SIZES]
    assert workload_kinds.SIZE_FIELDS == {name for workload in workload_kinds.KNOWN.values()
                                          for name in workload.size_fields}
    # the limits a refusal quotes are the declaration's
    with pytest.raises(errors.ConfigError, match="heads must be a whole number from 1 to 256; got 0"):
        config.RunConfig(workload="transformer", heads=0)


def test_a_size_field_declared_in_one_place_only_stops_the_import_saying_what_to_add(monkeypatch):
    depth = workload_kinds.SizeField("depth", (1, 8), "Depth", "Blocks deep.", "blocks deep")
    deeper = dataclasses.replace(workload_kinds.BUILT_IN["conv"], name="deeper",
                                 sizes=(*workload_kinds.BUILT_IN["conv"].sizes, depth))
    monkeypatch.setitem(workload_kinds.KNOWN, "deeper", deeper)
    with pytest.raises(TypeError, match="workload deeper's size field depth is not in "
                                        "spec/workload_kinds.py's SIZES: add it there"):
        workload_kinds.check_size_declarations()
    monkeypatch.setattr(workload_kinds, "SIZES", (*workload_kinds.SIZES, depth))
    workload_kinds.check_size_declarations()
    monkeypatch.setattr(config, "SIZES", workload_kinds.SIZES)  # as config sees it once imported
    with pytest.raises(TypeError, match="the size field depth .* is not an int field of RunConfig: "
                                        "add 'depth: int = DEFAULT"):
        config.check_size_fields_in_config()
    monkeypatch.delitem(workload_kinds.KNOWN, "deeper")
    with pytest.raises(TypeError, match="SIZES lists depth, which no workload declares"):
        workload_kinds.check_size_declarations()


def test_the_dimensions_a_workload_can_vary_are_declared_with_it():
    assert {name: w.varying for name, w in workload_kinds.BUILT_IN.items()} == {
        "mlp": ("batch",), "transformer": ("batch", "seq_len"), "conv": ("batch",)}
    for name, workload in workload_kinds.KNOWN.items():
        assert set(workload.varying) <= set(workload.size_fields), name
        for size in workload.sizes:
            if not size.whole:
                continue
            vary = f"{size.name}=uniform:4:8"
            if size.name in workload.varying:
                assert config.RunConfig(workload=name, vary=vary).vary == vary
            else:
                with pytest.raises(errors.ConfigError, match=f"the {name} workload cannot vary "
                                                             f"{size.name}"):
                    config.RunConfig(workload=name, vary=vary)
