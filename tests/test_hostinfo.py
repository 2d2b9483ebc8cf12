"""The host's figures that move an eager step between processes, and pinning a run to CPUs
(``profiler_core.spec.hostinfo``; issue 17, item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler_core.cli import parser as cli
from profiler_core.cli.main import main
from profiler_core.orchestration.command import config_to_argv
from profiler_core.spec import hostinfo
from profiler_core.spec.config import PRESETS, RunConfig, changed_from_preset
from profiler_core.spec.errors import ConfigError
from profiler_core.storage.results import RunResult

TINY = ["--batch", "8", "--d-in", "16", "--hidden", "32", "--d-out", "4", "--replays", "20",
        "--trials", "4", "--no-profile", "--no-nvml", "--parity-steps", "0"]
HOST_KEYS = ("cpu_model", "logical_cores", "cpu_affinity", "cpu_governor", "load_avg_start",
             "load_avg_end", "torch_num_threads", "torch_num_interop_threads")


def test_a_single_run_records_the_host_and_pins_itself(tmp_path, monkeypatch):
    import torch

    pinned = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.append(tuple(cpus)))
    cpu = min(os.sched_getaffinity(0))
    out = tmp_path / "one"
    threads = torch.get_num_threads()
    try:
        assert main(["run", "--out", str(out), "--device", "cpu", "--progress", "none", *TINY,
                     "--cpu-affinity", str(cpu)]) == 0
        # torch was imported before the pin (here, as in a warm worker): its threads are capped
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert pinned[0] == (cpu,) and set(pinned) == {(cpu,)}  # this thread, then every thread
    result = RunResult.load(out)
    env = result.environment
    for key in HOST_KEYS:
        assert key in env, key
    assert env["logical_cores"] == os.cpu_count() and env["torch_num_threads"] >= 1
    assert len(env["load_avg_start"]) == 3 and len(env["load_avg_end"]) == 3
    assert result.table("repeats").empty  # one process: no repeats table rows


@pytest.mark.parametrize("text, cpus, compact", [
    ("3", (3,), "3"), ("2-5", (2, 3, 4, 5), "2-5"), ("0,2,4", (0, 2, 4), "0,2,4"),
    ("5,0-2, 3", (0, 1, 2, 3, 5), "0-3,5"), ("", (), ""),
])
def test_cpu_lists_read_like_taskset(text, cpus, compact):
    assert hostinfo.parse_cpu_list(text) == cpus
    assert hostinfo.format_cpu_list(cpus) == compact


@pytest.mark.parametrize("text, said", [("x", "expected CPU numbers"), ("5-2", "runs backwards"),
                                        ("1-", "expected CPU numbers"), ("-1", "expected CPU numbers"),
                                        ("0-99999", "beyond any machine")])
def test_bad_cpu_lists_are_refused(text, said):
    with pytest.raises(ValueError, match=said):
        hostinfo.parse_cpu_list(text)
    with pytest.raises(ConfigError) as caught:
        RunConfig(cpu_affinity=text)
    assert caught.value.field == "cpu_affinity"


def test_the_config_keeps_one_spelling_and_how_it_measures_is_not_a_preset_change():
    assert RunConfig(cpu_affinity="2,3,4").cpu_affinity == "2-4"
    assert RunConfig(cpu_affinity=" ").cpu_affinity is None
    with pytest.raises(ConfigError, match="repeats must be a whole number from 1 to 15"):
        RunConfig(repeats=16)
    assert changed_from_preset(PRESETS["seed"].replace(repeats=5, cpu_affinity="3")) == []
    args = cli.parse(["run", "--out", "x", "--preset", "seed", "--repeats", "5", "--cpu-affinity", "3"])
    config = cli.config_from_args(args)
    assert (config.preset, config.repeats, config.cpu_affinity) == ("seed", 5, "3")
    assert cli.config_from_args(cli.parse(["run", "--out", "x", *config_to_argv(config)])) == config


def test_cpus_this_machine_does_not_have_are_refused_with_a_hint(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert hostinfo.check_cpus("1-2") == (1, 2)
    with pytest.raises(ConfigError) as caught:
        hostinfo.check_cpus("3-5")
    assert caught.value.message == ("CPUs 4-5 are not available to this process (this machine "
                                    "lets it run on 0-3)")
    assert "pick CPUs among 0-3" in caught.value.hint


def test_the_cli_refuses_an_unavailable_cpu_before_anything_runs(tmp_path, capsys):
    beyond = max(os.sched_getaffinity(0)) + 1
    for extra in ([], ["--repeats", "3"]):
        assert main(["run", "--out", str(tmp_path / "r"), "--device", "cpu", *TINY,
                     "--cpu-affinity", str(beyond), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: --cpu-affinity: CPU ") and "not available" in err
        assert len(err.splitlines()) == 1 and not (tmp_path / "r").exists()
    assert os.listdir(tmp_path) == []


def test_host_figures_are_none_where_they_cannot_be_read(monkeypatch, tmp_path):
    monkeypatch.setattr(hostinfo, "_CPUINFO", tmp_path / "no-cpuinfo")
    monkeypatch.setattr(hostinfo, "_CPU_SYSFS", tmp_path / "no-sysfs")
    monkeypatch.setattr(hostinfo.platform, "processor", lambda: "")
    monkeypatch.delattr(os, "sched_getaffinity")

    def no_load():
        raise OSError("not here")

    monkeypatch.setattr(os, "getloadavg", no_load)
    figures = hostinfo.host_environment()
    assert figures == {"cpu_model": None, "logical_cores": os.cpu_count(), "cpu_affinity": None,
                       "cpu_governor": None, "load_avg_start": None}
    with pytest.raises(ConfigError, match="cannot pin"):
        hostinfo.check_cpus("0")


def test_host_figures_read_cpuinfo_and_the_governor(monkeypatch, tmp_path):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU @ 3GHz\n")
    for cpu, governor in ((0, "performance"), (1, "powersave")):
        folder = tmp_path / "sys" / f"cpu{cpu}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_governor").write_text(governor + "\n")
    monkeypatch.setattr(hostinfo, "_CPUINFO", tmp_path / "cpuinfo")
    monkeypatch.setattr(hostinfo, "_CPU_SYSFS", tmp_path / "sys")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    figures = hostinfo.host_environment()
    assert figures["cpu_model"] == "Test CPU @ 3GHz" and figures["cpu_affinity"] == "0-2"
    assert figures["cpu_governor"] == "performance,powersave"  # cpu2 has none: left out


def test_pinning_pins_the_threads_already_running():
    """Linux gives each thread its own affinity: a thread started before the pin (numpy's pool,
    a warm worker's torch threads) is pinned too. In a child process, so that pytest is not."""
    cpu = min(os.sched_getaffinity(0))
    code = ("import os, threading, time\n"
            "from profiler_core.spec import hostinfo\n"
            "ready = threading.Event()\n"
            "def work():\n"
            "    ready.set(); time.sleep(2)\n"
            "thread = threading.Thread(target=work, daemon=True); thread.start(); ready.wait()\n"
            f"hostinfo.pin('{cpu}')\n"
            "print(sorted(os.sched_getaffinity(thread.native_id)), sorted(os.sched_getaffinity(0)))\n")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).resolve().parent.parent, check=True).stdout.split("] [")
    assert shown[0].strip("[]\n ") == str(cpu) and shown[1].strip("[]\n ") == str(cpu)


class _Torch:
    """torch's two thread calls, for fit_cpu_threads."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, count: int) -> None:
        self.threads = count


def test_a_cpu_run_fits_its_threads_to_the_free_cpus_and_keeps_a_users_choice(monkeypatch):
    """Issue 28: on 2 cores at load 9.7 a CPU run kept torch's 2 threads (a hand-written loop of
    the step took 23.7 ms a step with 1 thread, 225-286 ms with 2)."""
    monkeypatch.setattr(hostinfo, "available_cpus", lambda: (0, 1))
    monkeypatch.setattr(hostinfo, "load_average", lambda: [1.8, 1.0, 0.5])
    torch = _Torch(2)
    chosen = hostinfo.fit_cpu_threads(torch, environ={})
    assert torch.threads == 1 and (chosen.threads, chosen.default, chosen.free) == (1, 2, 1)
    assert chosen.set_by == "this tool" and chosen.worth_a_note
    assert chosen.reason == ("1 thread(s) instead of torch's 2: load average 1.8 on 2 CPU(s) "
                                "leaves 1 free (set OMP_NUM_THREADS to choose)")
    torch = _Torch(2)  # never silently changed: the user's (or torchrun's) setting is kept, said
    kept = hostinfo.fit_cpu_threads(torch, environ={"OMP_NUM_THREADS": "2"})
    assert torch.threads == 2 and kept.set_by == "OMP_NUM_THREADS=2" and kept.worth_a_note
    assert "more threads than the 1 CPU(s) the load leaves free" in kept.reason
    assert hostinfo.fit_cpu_threads(_Torch(2), environ={}, pinned=True).set_by == "--cpu-affinity"
    monkeypatch.setattr(hostinfo, "load_average", lambda: [0.2, 0.1, 0.1])
    idle = hostinfo.fit_cpu_threads(_Torch(2), environ={})
    assert (idle.threads, idle.set_by, idle.worth_a_note) == (2, "torch default", False)
    assert [hostinfo.free_cpus(2, load) for load in (None, 0.4, 0.6, 1.4, 9.7)] == [2, 2, 1, 1, 1]


def test_a_cpu_run_records_the_threads_it_chose(tmp_path, monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        assert main(["run", "--device", "cpu", *TINY, "--out", str(tmp_path / "run"),
                     "--progress", "none"]) == 0
    finally:
        torch.set_num_threads(before)
    environment = RunResult.load(tmp_path / "run").environment
    chosen = environment["cpu_threads"]
    assert set(chosen) == {"threads", "default", "cpus", "free", "load_1m", "set_by", "reason"}
    # no thread setting here: never more threads than the CPUs the load left free
    assert environment["torch_num_threads"] == chosen["threads"] <= chosen["free"]
    assert chosen["set_by"] in ("this tool", "torch default")
    notes = [n for n in RunResult.load(tmp_path / "run").notes if n.startswith("torch threads: ")]
    assert notes == ([f"torch threads: {chosen['reason']}"] if chosen["set_by"] == "this tool" else [])
