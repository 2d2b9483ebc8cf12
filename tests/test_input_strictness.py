"""Values the command line used to take too leniently (issue 27, item 15): a CPU list naming no CPU,
digits other than ASCII, a straggler delay without data-parallel ranks, and more data-parallel
ranks than the machine has cores, GPUs or memory for. Each is refused in one line, exit 2 (5 for
memory), before anything runs."""

from __future__ import annotations

import pytest

from profiler_core.cli import ddp
from profiler_core.cli import parser as cli
from profiler_core.cli.main import main
from profiler_core.spec import fields, hostinfo
from profiler_core.spec.errors import ConfigError, UsageError
from profiler_core.storage.index_query import parse_number

CPU = ["--device", "cpu"]


def _one_error_line(capsys) -> str:
    """The one error line, last on stderr (a note such as the small CPU step's may come first)."""
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:], lines
    return errors[0]


@pytest.mark.parametrize("value", [",", " ", "", " , ", ",,"])
def test_a_cpu_list_naming_no_cpu_is_refused(value, tmp_path, capsys):
    assert main(["run", *CPU, "--cpu-affinity", value, "--out", str(tmp_path / "r")]) == 2
    assert "--cpu-affinity" in _one_error_line(capsys)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("option, value", [
    ("--cpu-affinity", "\u0660"),  # ARABIC-INDIC DIGIT ZERO
    ("--cpu-affinity", "\uff11"),  # FULLWIDTH DIGIT ONE
    ("--cpu-affinity", "\U0001d7ce"),  # MATHEMATICAL BOLD DIGIT ZERO
    ("--cpu-affinity", "\u00b2"),  # SUPERSCRIPT TWO: isdigit() but not int()
    ("--cpu-affinity", "0-\uff11"),
    ("--repeats", "\u0663"),
    ("--batch", "\uff11\uff16"),
    ("--timeout", "\u0665"),
    ("--nvml-interval-ms", "\uff11\uff10"),
    ("--device", "cuda:\u0661"),
    ("--inject-delay-ms", "\u0660:5"),
    ("--inject-delay-ms", "0:\u0665"),
])
def test_only_ascii_digits_are_numbers(option, value):
    with pytest.raises(UsageError) as info:
        cli.parse(["run", "--out", "x", option, value])
    message = str(info.value)
    assert option in message and "\n" not in message
    assert "invalid literal" not in message, message  # the project's words, not Python's


def test_the_readers_refuse_other_digits_too():
    with pytest.raises(ValueError, match="expected a whole number"):
        fields.read_whole_number("\u0663")
    with pytest.raises(ValueError, match="expected a number"):
        fields.read_number("\u0663.5")
    with pytest.raises(ValueError, match="expected CPU numbers"):
        hostinfo.parse_cpu_list("\u00b2")
    with pytest.raises(ConfigError):
        fields.parse_value("cpu_affinity", ",")
    assert fields.parse_value("cpu_affinity", "") is None  # the sidebar's empty: not pinned
    assert parse_number("\u0662") is None and parse_number("2") == 2.0


def test_a_delay_needs_data_parallel_ranks(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("profiler_core.cli.main._run_config",
                        lambda *args, **kwargs: pytest.fail("the run started"))
    assert main(["run", *CPU, "--inject-delay-ms", "0:5", "--out", str(tmp_path / "r")]) == 2
    assert "--inject-delay-ms" in _one_error_line(capsys)


def _no_torchrun(monkeypatch):
    monkeypatch.setattr("profiler_core.orchestration.torchrun.run_torchrun",
                        lambda *args, **kwargs: pytest.fail("torchrun was started"))


def test_a_delay_for_a_rank_the_run_does_not_have_is_refused(tmp_path, capsys, monkeypatch):
    _no_torchrun(monkeypatch)
    assert main(["run", *CPU, "--nproc-per-node", "2", "--inject-delay-ms", "2:5",
                 "--out", str(tmp_path / "r")]) == 2
    error = _one_error_line(capsys)
    assert "--inject-delay-ms" in error and "rank 2" in error


def test_more_gloo_ranks_than_cores_are_refused_before_any_starts(tmp_path, capsys, monkeypatch):
    _no_torchrun(monkeypatch)
    monkeypatch.setattr(hostinfo, "available_cpus", lambda: (0, 1))
    assert main(["run", *CPU, "--nproc-per-node", "64", "--out", str(tmp_path / "r")]) == 2
    error = _one_error_line(capsys)
    assert "--nproc-per-node" in error and "2 CPU" in error
    assert not (tmp_path / "r").exists()


def test_ranks_that_would_not_fit_in_memory_are_refused_before_any_starts(tmp_path, capsys,
                                                                          monkeypatch):
    from profiler_core.engine import memory

    _no_torchrun(monkeypatch)
    monkeypatch.setattr(hostinfo, "available_cpus", lambda: tuple(range(8)))
    monkeypatch.setattr(memory, "host_memory_available", lambda: 2**30)
    assert main(["run", *CPU, "--nproc-per-node", "4", "--out", str(tmp_path / "r")]) == 5
    error = _one_error_line(capsys)
    assert "4 ranks" in error and "memory" in error


def test_more_gpu_ranks_than_gpus_are_refused_before_any_starts(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    config = cli.config_from_args(cli.parse(["run", "--out", "x", "--nproc-per-node", "2"]))
    with pytest.raises(ConfigError, match="1 GPU") as info:
        ddp.check_ranks_fit(config)
    assert info.value.field == "nproc_per_node"
