"""The user's own step on the CPU: the loader's one-line errors (CLI exit 2), the worked example
end to end, and the capture-readiness checks on purpose-built bad steps."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
import torch

from profiler_core.cli.main import main
from profiler_core.engine.readiness import FIXES, check_step
from profiler_core.engine.user_workload import build_parts, find_function
from profiler_core.spec.errors import WorkloadError
from profiler_core.storage.results import RunResult
from tests import bad_steps

CPU = ["--device", "cpu", "--replays", "8", "--parity-steps", "0", "--progress", "none"]


@pytest.mark.parametrize("spec, message", [
    ("no_such_package.module:build", "cannot import 'no_such_package.module'"),
    ("tests.bad_steps_import:build", "importing 'tests.bad_steps_import' raised ValueError"),
    ("profiler_core.examples.user_step:nope", "has no function 'nope' (its functions: "),
    ("tests.bad_steps:NOT_A_FUNCTION", "is a int, not a function"),
    ("tests.bad_steps:returns_list", "returned a list, not a dict"),
    ("tests.bad_steps:no_model", "returned no 'model'"),
    ("tests.bad_steps:model_not_module", "'model' is a str, not a torch.nn.Module"),
    ("tests.bad_steps:batch_not_callable", "'batch' is a list, not a function"),
    ("tests.bad_steps:bad_optimizer", "'optimizer' is a str, not a torch.optim.Optimizer"),
    ("tests.bad_steps:bad_loss", "'loss' is a int, not a function"),
    ("tests.bad_steps:unknown_key", "unknown key 'scheduler'"),
    ("tests.bad_steps:takes_no_arguments", "must take one argument"),
])
def test_a_bad_workload_is_one_line_and_exit_2(spec, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--workload", spec, "--out", str(out), *CPU]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()  # refused before anything ran


@pytest.mark.parametrize("spec", ["nocolon", "a:b:c", "1module:f", "mod:", "../x:y", "x.:y"])
def test_a_malformed_reference_is_refused_by_the_parser(spec, capsys):
    assert main(["run", "--workload", spec, "--out", "unused", *CPU]) == 2
    assert "package.module:function" in capsys.readouterr().err
    with pytest.raises(WorkloadError):
        find_function(spec)


def test_the_worked_example_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "mine"
    assert main(["run", "--workload", "profiler_core.examples.user_step:build", "--out", str(out),
                 *CPU]) == 0
    printed = capsys.readouterr()
    assert "your step profiler_core.examples.user_step:build" in printed.out
    assert "capture readiness" not in printed.err  # nothing in the example would break capture
    run = RunResult.load(out)
    assert run.config.workload == "profiler_core.examples.user_step:build"
    assert run.headline["counters_match"] is True and run.pair.eager_ms > 0
    assert run.headline["readiness_findings"] == 0


def _expected(function) -> set[tuple[str, int]]:
    """(kind, line) from the '# expect:' comments of the code a bad step runs."""
    path = Path(bad_steps.__file__)
    expected = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = re.search(r"# expect: ([a-z-]+)", line)
        if match:
            expected.add((match.group(1), number))
    return expected


def _findings(name: str) -> set[tuple[str, int]]:
    builder = getattr(bad_steps, name)
    parts = build_parts(f"tests.bad_steps:{name}", torch.device("cpu"))
    return {(f.kind, f.line) for f in check_step(builder, parts.model, parts.loss, parts.optimizer,
                                                  parts.step, parts.after_step)}


def test_each_bad_step_is_flagged_on_its_lines_and_nowhere_else():
    found = set()
    for name in ("host_sync", "cpu_tensor", "dynamic_shapes", "frozen_counter", "scheduled_adam",
                 "whole_step_scaled"):
        found |= _findings(name)
    assert found == _expected(bad_steps)
    assert {kind for kind, _ in found} == set(FIXES)  # every kind of check is exercised


def test_a_clean_step_has_no_findings():
    assert _findings("clean") == set()
    example = build_parts("profiler_core.examples.user_step:build", torch.device("cpu"))
    assert check_step(find_function("profiler_core.examples.user_step:build"), example.model,
                      example.loss, example.optimizer) == []


def test_findings_name_file_line_code_and_fix(capsys, tmp_path):
    assert main(["run", "--workload", "tests.bad_steps:host_sync", "--out", str(tmp_path / "r"),
                 *CPU]) == 0  # on the CPU nothing is captured: the findings are warnings
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("capture readiness")]
    assert len(lines) == 3
    assert all("bad_steps.py:" in line and "(fix: read values after replay()" in line for line in lines)
    assert any("`scale = y.abs().max().item()  # expect: host-sync`" in line for line in lines)
    notes = RunResult.load(tmp_path / "r").notes
    assert sum("capture readiness" in n for n in notes) == 3


# ----------------------------------------------------------------------------- the user's code fails


def _line(tag: str) -> int:
    """The line of tests/bad_steps.py marked ``# raises: <tag>``."""
    lines = Path(bad_steps.__file__).read_text().splitlines()
    return next(n for n, line in enumerate(lines, start=1) if line.endswith(f"# raises: {tag}"))


def _error_line(err: str) -> str:
    """The run's one error line (the last line; a kept partial run and the user's own warnings may
    come before it), checked to be the only one and no traceback."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and err.rstrip("\n").endswith(errors[0]), err
    return errors[0]


@pytest.mark.parametrize("name, tag, function, raised", [
    ("raises_in_forward", "forward", "forward", "raised ValueError: forward is broken"),
    ("raises_in_build", "build", "raises_in_build", "raised ZeroDivisionError: division by zero"),
    ("type_error_in_build", "build-type-error", "type_error_in_build", "raised TypeError: object "),
    ("raises_in_batch", "batch", "batch", "raised RuntimeError: no data"),
    ("raises_in_loss", "loss", "loss", "raised AttributeError: 'Tensor' object has no attribute"),
    ("exits_3_in_forward", "exit", "forward", "called sys.exit(3)"),
    ("exits_0_in_build", "exit-build", "exits_0_in_build", "called sys.exit(0)"),
    ("base_exception_in_batch", "base", "batch",
     "raised Abort (a BaseException, not an Exception): stop everything"),
])
def test_an_error_in_the_users_code_names_their_line_and_exits_2(name, tag, function, raised,
                                                                 tmp_path, capsys):
    """Build, batch, loss or forward raising, calling sys.exit or raising a BaseException: one line
    with the user's file, line and function, exit 2 (never the exit code of another meaning)."""
    assert main(["run", "--workload", f"tests.bad_steps:{name}", "--out", str(tmp_path / "r"),
                 *CPU]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"error: your step tests.bad_steps:{name} {raised}"), line
    assert f"bad_steps.py:{_line(tag)} in {function} " in line, line


def test_a_torch_loss_that_fails_names_the_tools_call(tmp_path, capsys):
    """No frame of the user's own: the line says which call of the tool ran their part."""
    assert main(["run", "--workload", "tests.bad_steps:torch_loss_fails", "--out",
                 str(tmp_path / "r"), *CPU]) == 2
    line = _error_line(capsys.readouterr().err)
    assert "raised RuntimeError:" in line and "while the tool ran `loss = loss_fn(" in line


@pytest.mark.parametrize("name, message", [
    ("batch_three_values", "batch(generator) returned 3 values, not 2 (input, target)"),
    ("batch_generator", "batch(generator) returned a generator, not an (input, target) pair"),
    ("batch_not_tensors", "batch(generator)'s input is a list, not a tensor"),
])
def test_a_batch_of_the_wrong_shape_is_refused_before_anything_runs(name, message, tmp_path,
                                                                    capsys):
    out = tmp_path / "r"
    assert main(["run", "--workload", f"tests.bad_steps:{name}", "--out", str(out), *CPU]) == 2
    err = capsys.readouterr().err
    assert message in _error_line(err) and err.count("\n") == 1
    assert not out.exists()  # checked up front: no run folder


@pytest.mark.parametrize("source, message", [
    ("import sys\nsys.exit(0)\n", "called sys.exit(0) at {name}.py:2 in <module>"),
    ("import sys\nsys.exit(3)\n", "called sys.exit(3) at {name}.py:2 in <module>"),
    ("import sys\nsys.exit(6)\n", "called sys.exit(6) at {name}.py:2 in <module>"),
    ("class Stop(BaseException):\n    pass\n\n\nraise Stop('no')\n",
     "raised Stop (a BaseException, not an Exception): no at {name}.py:5 in <module>"),
])
def test_a_module_that_exits_at_import_is_refused_with_exit_2(source, message, tmp_path,
                                                             monkeypatch, capsys):
    name = f"exits_at_import_{abs(hash(source))}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "--workload", f"{name}:build", "--out", str(tmp_path / "r"), *CPU]) == 2
    line = _error_line(capsys.readouterr().err)
    assert f"importing '{name}' {message.format(name=name)}" in line, line
    assert not (tmp_path / "r").exists()


# ----------------------------------------------------------------------------- the time limit


@pytest.mark.parametrize("source, line", [
    ("x = 0\nwhile True:\n    x += 1\n", 3),  # a loop
    ("import time\n\ntime.sleep(3600)\n", 3),  # a wait
])
def test_a_hang_while_importing_the_users_module_ends_at_the_time_limit(source, line, tmp_path,
                                                                        monkeypatch, capsys):
    name = f"hangs_at_import_{line}_{len(source)}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    assert main(["run", "--workload", f"{name}:build", "--out", str(tmp_path / "r"), *CPU,
                 "--timeout", "0.5"]) == 124
    assert time.monotonic() - started < 30
    error = _error_line(capsys.readouterr().err)
    assert error.startswith("error: no result within the time limit of 0.5 s (--timeout); it was "
                            f"loading your step {name}:build; it was in your code at {name}.py:")
    assert "(pass a larger --timeout, or --timeout 0 for no limit)" in error
    assert name not in sys.modules  # the half-imported module is not left behind


def test_a_hang_in_forward_ends_at_the_time_limit_and_keeps_the_run(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--workload", "tests.bad_steps:hangs_in_forward", "--out", str(out), *CPU,
                 "--timeout", "1.5"]) == 124
    err = capsys.readouterr().err
    assert f"The incomplete run was kept in {out}" in err
    lines = f"({_line('hang')}|{_line('hang') + 1})"  # the loop's two lines
    assert re.search(rf"; it was in your code at tests/bad_steps.py:{lines} in forward \(",
                     _error_line(err)), err
    run = RunResult.load(out)
    assert run.complete is False
    assert any("no result within the time limit of 1.5 s" in note for note in run.notes), run.notes
