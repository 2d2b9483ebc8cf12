"""The user's own step on the CPU: the loader's one-line errors (CLI exit 2), the worked example
end to end, and the capture-readiness checks on purpose-built bad steps."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from profiler_core.__main__ import main
from profiler_core.readiness import FIXES, check_step
from profiler_core.results import RunResult
from profiler_core.user_workload import WorkloadError, build_parts, find_function
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
    assert run.headline["counters_match"] is True and run.headline["eager_median_ms"] > 0
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
    return {(f.kind, f.line) for f in check_step(builder, parts.model, parts.loss, parts.optimizer)}


def test_each_bad_step_is_flagged_on_its_lines_and_nowhere_else():
    found = set()
    for name in ("host_sync", "cpu_tensor", "dynamic_shapes", "frozen_counter", "scheduled_adam"):
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
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("capture readiness")]
    assert len(lines) == 3
    assert all("bad_steps.py:" in l and "(fix: read values after replay()" in l for l in lines)
    assert any("`scale = y.abs().max().item()  # expect: host-sync`" in l for l in lines)
    notes = RunResult.load(tmp_path / "r").notes
    assert sum("capture readiness" in n for n in notes) == 3
