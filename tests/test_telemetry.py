"""Tests for profiler_core.engine.telemetry on CPU: a fake pynvml drives every path; one test uses the
real pynvml on a machine without a driver."""

from __future__ import annotations

import ctypes.util
import math
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from profiler_core.engine import telemetry
from profiler_core.engine.telemetry import (
    GPU_COLUMNS,
    NVML_UTILISATION_CAVEAT,
    Nvml,
    NvmlSampler,
    NvmlSamplerProcess,
    PhaseRecorder,
    list_gpus,
    read_metrics,
)
from profiler_core.spec.errors import ConfigError, ProfilerError
from profiler_core.spec.schema import NVML_COLUMNS, NVML_METRICS, PHASE_COLUMNS
from tests.fake_pynvml import FakeNVMLError, FakePynvml, sample

REPO = Path(__file__).resolve().parent.parent
EXPECTED = {
    "gpu_util_pct": 87.0, "mem_util_pct": 40.0, "mem_used_mib": 3072.0, "sm_clock_mhz": 1980.0,
    "mem_clock_mhz": 2619.0, "power_w": 540.0, "temperature_c": 55.0,
}


def run_sampler(fake: FakePynvml, **kwargs) -> NvmlSampler:
    """Start a 5 ms sampler on the fake, wait for the wanted polls, stop it."""
    sampler = NvmlSampler(0, interval_s=0.005, nvml=Nvml(module=fake), **kwargs)
    sampler.start()
    assert fake.polled.wait(5.0), "the sampler thread never polled"
    sampler.stop()
    return sampler


def assert_empty_with_columns(frame: pd.DataFrame, columns: list[str]) -> None:
    assert frame.empty
    assert list(frame.columns) == columns


def test_read_metrics_all_present():
    nvml = Nvml(module=FakePynvml())
    handle = nvml.query("nvmlDeviceGetHandleByIndex", 0, default=None)
    assert read_metrics(nvml, handle) == EXPECTED
    assert list(read_metrics(nvml, handle)) == NVML_METRICS
    assert nvml.reasons == {}


def test_nvml_initialises_once_and_lazily():
    fake = FakePynvml()
    nvml = Nvml(module=fake)
    assert fake.init_calls == 0
    for _ in range(3):
        read_metrics(nvml, "handle0")
    assert nvml.available
    assert fake.init_calls == 1


def test_one_metric_failing_alone_is_nan_and_named():
    fake = FakePynvml(failing={("nvmlDeviceGetClockInfo", FakePynvml.NVML_CLOCK_SM)},
                      polls_wanted=2)
    sampler = run_sampler(fake)
    frame = sampler.frame()
    poll = frame[frame["source"] == "poll"]
    nan_metrics = set(poll.loc[poll["value"].isna(), "metric"])
    assert nan_metrics == {"sm_clock_mhz"}
    good = poll[poll["metric"] != "sm_clock_mhz"]
    assert (good["value"] == good["metric"].map(EXPECTED)).all()
    capability = sampler.capability
    assert capability.available and capability.reason == ""
    assert capability.unsupported_metrics == ("sm_clock_mhz",)
    assert "fake NVML error 3" in sampler._nvml.reasons["sm_clock_mhz"]


def test_utilisation_failure_makes_both_utilisation_metrics_nan():
    nvml = Nvml(module=FakePynvml(failing={"nvmlDeviceGetUtilizationRates"}))
    values = read_metrics(nvml, "handle0")
    assert math.isnan(values["gpu_util_pct"]) and math.isnan(values["mem_util_pct"])
    assert values["power_w"] == 540.0
    assert set(nvml.reasons) == {"gpu_util_pct", "mem_util_pct"}


def test_poll_rows_are_long_form_on_the_given_clock():
    fake = FakePynvml(polls_wanted=3)
    sampler = run_sampler(fake, origin_s=1000.0, clock=lambda: 1000.25)
    poll = sampler.frame().query("source == 'poll'")
    assert list(sampler.frame().columns) == NVML_COLUMNS
    assert len(poll) == len(NVML_METRICS) * fake.polls
    assert fake.polls >= 3
    assert set(poll["metric"]) == set(NVML_METRICS)
    assert (poll["t_s"] == 0.25).all()
    assert sampler.frame()["value"].dtype == "float64"


def test_driver_samples_converted_to_seconds_since_origin():
    fake = FakePynvml(samples={
        FakePynvml.NVML_GPU_UTILIZATION_SAMPLES: (
            FakePynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
            [sample(1000_500_000, "uiVal", 70), sample(1001_000_000, "uiVal", 90)],
        ),
        FakePynvml.NVML_MEMORY_UTILIZATION_SAMPLES: (
            FakePynvml.NVML_VALUE_TYPE_DOUBLE, [sample(1000_750_000, "dVal", 12.5)],
        ),
    })
    sampler = run_sampler(fake, origin_s=1000.0, clock=lambda: 1000.25)
    assert fake.samples_since == [1000_250_000, 1000_250_000]  # since start(), in us
    driver = sampler.frame().query("source == 'driver'").reset_index(drop=True)
    expected = pd.DataFrame({
        "t_s": [0.5, 1.0, 0.75],
        "metric": ["gpu_util_pct", "gpu_util_pct", "mem_util_pct"],
        "value": [70.0, 90.0, 12.5],
        "source": ["driver"] * 3,
    })
    pd.testing.assert_frame_equal(driver, expected)
    assert sampler.capability.driver_samples


def test_driver_samples_not_found_means_answered_but_empty():
    sampler = run_sampler(FakePynvml())  # the fake answers NOT_FOUND for both types
    assert sampler.frame().query("source == 'driver'").empty
    assert sampler.capability.driver_samples


def test_driver_samples_unsupported():
    fake = FakePynvml(samples={
        FakePynvml.NVML_GPU_UTILIZATION_SAMPLES: FakePynvml.NVML_ERROR_NOT_SUPPORTED,
        FakePynvml.NVML_MEMORY_UTILIZATION_SAMPLES: FakePynvml.NVML_ERROR_NOT_SUPPORTED,
    })
    sampler = run_sampler(fake)
    assert not sampler.capability.driver_samples
    assert sampler.capability.unsupported_metrics == ()
    assert sampler.frame().query("source == 'driver'").empty


def test_stop_is_prompt_even_with_a_long_interval():
    fake = FakePynvml()
    sampler = NvmlSampler(0, interval_s=10.0, nvml=Nvml(module=fake))
    with sampler:
        assert fake.polled.wait(5.0)
        began = time.perf_counter()
    assert time.perf_counter() - began < 1.0
    assert fake.polls == 1


def test_start_and_stop_are_idempotent():
    fake = FakePynvml()
    sampler = NvmlSampler(0, interval_s=0.005, nvml=Nvml(module=fake))
    sampler.stop()  # before start: nothing to do
    sampler.start()
    thread = sampler._thread
    sampler.start()
    assert sampler._thread is thread
    assert fake.polled.wait(5.0)
    sampler.stop()
    sampler.stop()
    assert not thread.is_alive()


def test_missing_gpu_index_is_unavailable_with_reason():
    sampler = NvmlSampler(5, interval_s=0.005, nvml=Nvml(module=FakePynvml()))
    with sampler:
        pass
    assert sampler._thread is None
    capability = sampler.capability
    assert not capability.available
    assert "GPU 5" in capability.reason
    assert_empty_with_columns(sampler.frame(), NVML_COLUMNS)


def unavailable_nvmls(monkeypatch) -> dict[str, Nvml]:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    return {
        "import": Nvml(),
        "init": Nvml(module=FakePynvml(init_error=FakeNVMLError(12))),
    }


@pytest.mark.parametrize("case", ["import", "init"])
def test_without_nvml_everything_is_empty_with_a_reason(monkeypatch, case):
    nvml = unavailable_nvmls(monkeypatch)[case]
    assert not nvml.available
    assert nvml.reason and "\n" not in nvml.reason
    assert {"import": "pynvml", "init": "fake NVML error 12"}[case] in nvml.reason
    assert nvml.query("nvmlDeviceGetCount", default=-1) == -1
    assert nvml.constant("NVML_CLOCK_SM") is None
    threads_before = threading.active_count()
    sampler = NvmlSampler(0, interval_s=0.005, nvml=nvml)
    sampler.start()
    assert threading.active_count() == threads_before
    sampler.stop()
    frame = sampler.frame()
    assert_empty_with_columns(frame, NVML_COLUMNS)
    assert frame["t_s"].dtype == "float64" and frame["value"].dtype == "float64"
    capability = sampler.capability
    assert capability == telemetry.NvmlCapability(False, nvml.reason, (), False)
    assert_empty_with_columns(list_gpus(nvml), GPU_COLUMNS)


def test_real_pynvml_without_driver_reports_unavailable():
    if ctypes.util.find_library("nvidia-ml") is not None:
        pytest.skip("an NVIDIA driver is installed here; this test is for machines without one")
    nvml = Nvml()
    assert not nvml.available
    assert "NVML" in nvml.reason
    with NvmlSampler(0, interval_s=0.005, nvml=nvml) as sampler:
        pass
    assert not sampler.capability.available
    assert_empty_with_columns(sampler.frame(), NVML_COLUMNS)
    assert_empty_with_columns(list_gpus(nvml), GPU_COLUMNS)


def test_list_gpus_with_fake():
    gpus = list_gpus(Nvml(module=FakePynvml()))
    expected = pd.DataFrame({
        "index": [0, 1],
        "name": ["NVIDIA H200", "NVIDIA H100"],
        "memory_free_mib": [140_000.0, 140_000.0],
        "memory_total_mib": [143_771.0, 143_771.0],
    })
    pd.testing.assert_frame_equal(gpus, expected)


def test_list_gpus_memory_failure_is_nan():
    gpus = list_gpus(Nvml(module=FakePynvml(failing={"nvmlDeviceGetMemoryInfo"})))
    assert list(gpus["name"]) == ["NVIDIA H200", "NVIDIA H100"]
    assert gpus["memory_total_mib"].isna().all()


@pytest.mark.parametrize("interval_s", [0.0, -1.0, 0.0005, 10.5, float("nan")])
def test_interval_out_of_range_is_a_config_error(interval_s):
    with pytest.raises(ConfigError) as info:
        NvmlSampler(0, interval_s=interval_s, nvml=Nvml(module=FakePynvml()))
    assert info.value.field == "nvml_interval_ms"
    assert info.value.hint


@pytest.mark.parametrize("interval_s", [0.001, 0.02, 10.0])
def test_interval_in_range_is_accepted(interval_s):
    NvmlSampler(0, interval_s=interval_s, nvml=Nvml(module=FakePynvml()))


class FakeClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_phases_order_and_bounds():
    clock = FakeClock(500.0)
    recorder = PhaseRecorder(origin_s=500.0, clock=clock)
    assert_empty_with_columns(recorder.frame(), PHASE_COLUMNS)
    clock.advance(1.0)
    with recorder.phase("warmup"):
        clock.advance(2.0)
    with recorder.phase("timing"):
        clock.advance(0.5)
        with recorder.phase("profile"):  # nested: recorded first, listed after its parent
            clock.advance(0.25)
        clock.advance(0.25)
    recorder.mark("capture", 503.0, 503.0)  # starts with "timing"; the longer one comes first
    expected = pd.DataFrame({
        "phase": ["warmup", "timing", "capture", "profile"],
        "start_s": [1.0, 3.0, 3.0, 3.5],
        "end_s": [3.0, 4.0, 3.0, 3.75],
    })
    pd.testing.assert_frame_equal(recorder.frame(), expected)


def test_phase_is_recorded_when_its_block_raises():
    clock = FakeClock(10.0)
    recorder = PhaseRecorder(origin_s=10.0, clock=clock)
    with pytest.raises(RuntimeError):
        with recorder.phase("capture"):
            clock.advance(0.5)
            raise RuntimeError("capture failed")
    assert recorder.frame().to_dict("records") == [
        {"phase": "capture", "start_s": 0.0, "end_s": 0.5}]


def test_phase_ending_before_it_starts_is_rejected():
    recorder = PhaseRecorder(origin_s=0.0)
    with pytest.raises(ProfilerError) as info:
        recorder.mark("bad", 2.0, 1.0)
    assert info.value.hint


def test_phases_from_many_threads():
    recorder = PhaseRecorder(origin_s=time.time())

    def work(n: int) -> None:
        for i in range(50):
            with recorder.phase(f"t{n}-{i}"):
                pass

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    frame = recorder.frame()
    assert len(frame) == 200 and frame["phase"].is_unique
    assert (frame["end_s"] >= frame["start_s"]).all()
    assert frame["start_s"].is_monotonic_increasing


def test_caveat_names_the_sample_period_and_the_precise_figure():
    assert "1/6 s to 1 s" in NVML_UTILISATION_CAVEAT
    assert "busy time" in NVML_UTILISATION_CAVEAT


# ----------------------------------------------------------------------------- sampler process


def test_sampler_process_returns_the_childs_samples_on_the_shared_clock(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the child imports tests.fake_pynvml
    origin_s = time.time()
    threads_before = threading.active_count()
    sampler = NvmlSamplerProcess(0, interval_s=0.01, origin_s=origin_s,
                                 nvml_module="tests.fake_pynvml").start()
    assert threading.active_count() == threads_before  # nothing samples in this process
    assert sampler.wait_until_polling(60.0)
    time.sleep(0.1)
    sampler.stop()
    elapsed_s = time.time() - origin_s
    frame = sampler.frame()
    assert list(frame.columns) == NVML_COLUMNS
    poll = frame[frame["source"] == "poll"]
    assert set(poll["metric"]) == set(NVML_METRICS)
    assert len(poll) >= len(NVML_METRICS)  # at least the poll made on start
    assert (poll["value"] == poll["metric"].map(EXPECTED)).all()
    assert poll["t_s"].between(0.0, elapsed_s).all()  # seconds since this process's origin
    capability = sampler.capability
    assert capability.available and capability.driver_samples and capability.reason == ""


def test_sampler_process_without_nvml_reports_why_and_leaves_nothing(monkeypatch, tmp_path):
    if ctypes.util.find_library("nvidia-ml") is not None:
        pytest.skip("an NVIDIA driver is installed here; this test is for machines without one")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(telemetry.tempfile, "tempdir", None)  # honour TMPDIR in this process
    with NvmlSamplerProcess(0, interval_s=0.02) as sampler:
        pass
    assert not sampler.capability.available
    assert "NVML" in sampler.capability.reason
    assert_empty_with_columns(sampler.frame(), NVML_COLUMNS)
    assert list(tmp_path.iterdir()) == []  # its temporary folder is gone


def test_sampler_process_that_fails_says_so(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    sampler = NvmlSamplerProcess(0, interval_s=0.02, nvml_module="tests.no_such_module").start()
    sampler.stop()
    capability = sampler.capability
    assert not capability.available
    assert "exit code 1" in capability.reason and "no_such_module" in capability.reason
    assert_empty_with_columns(sampler.frame(), NVML_COLUMNS)


def test_sampler_process_stops_cleanly_on_sigterm(monkeypatch):
    """The dashboard's Cancel sends SIGTERM to the whole process group, the child included."""
    import signal

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    sampler = NvmlSamplerProcess(0, interval_s=0.01, nvml_module="tests.fake_pynvml").start()
    assert sampler.wait_until_polling(60.0)
    sampler._process.send_signal(signal.SIGTERM)
    sampler._process.wait(timeout=10)
    sampler.stop()
    assert sampler.capability.available
    assert not sampler.frame().empty


def test_sampler_process_pauses_polling_and_resumes(monkeypatch):
    """Paused, the child makes no NVML call (the timed trials); resumed, it polls again."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    origin_s = time.time()
    sampler = NvmlSamplerProcess(0, interval_s=0.01, origin_s=origin_s,
                                 nvml_module="tests.fake_pynvml").start()
    assert sampler.pause(60.0)
    paused_at = time.time() - origin_s
    time.sleep(0.5)
    resumed_at = time.time() - origin_s
    assert sampler.resume(60.0)
    time.sleep(0.1)
    sampler.stop()
    polls = sampler.frame().query("source == 'poll' and metric == 'power_w'")["t_s"]
    assert not polls.between(paused_at, resumed_at).any()  # nothing polled while paused
    assert (polls < paused_at).any() and (polls > resumed_at).any()
    assert not sampler.pause(1.0)  # a stopped sampler cannot pause


def test_a_pause_without_a_child_is_refused_at_once():
    sampler = NvmlSamplerProcess(0, interval_s=0.02)
    assert sampler.pause(1.0) is False and sampler.resume(1.0) is False
