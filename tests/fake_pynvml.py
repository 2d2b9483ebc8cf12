"""A stand-in for ``pynvml`` (the part telemetry uses), for CPU tests.

Tests build :class:`FakePynvml` objects and pass them to ``Nvml(module=...)``. Imported as a
module (``--nvml-module tests.fake_pynvml``, the NVML sampler process), it behaves as a GPU whose
every metric answers, through a default instance.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

MIB = 2**20
VALUE_FIELDS = ["dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal"]


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"fake NVML error {value}")
        self.value = value


def sample(timestamp_us: int, field: str, value: float) -> SimpleNamespace:
    """A c_nvmlSample_t look-alike whose union fields all differ, so the field choice shows."""
    fields = {name: -1000 - i for i, name in enumerate(VALUE_FIELDS)}
    fields[field] = value
    return SimpleNamespace(timeStamp=timestamp_us, sampleValue=SimpleNamespace(**fields))


class FakePynvml:
    """The part of pynvml that telemetry uses. ``failing`` holds function names, or
    (function name, last argument) pairs, that raise NVML_ERROR_NOT_SUPPORTED."""

    NVMLError = FakeNVMLError
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_GPU_UTILIZATION_SAMPLES = 1
    NVML_MEMORY_UTILIZATION_SAMPLES = 2
    NVML_VALUE_TYPE_DOUBLE = 0
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
    NVML_VALUE_TYPE_SIGNED_INT = 5
    NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6

    def __init__(self, failing=(), init_error=None, samples=None, polls_wanted=1) -> None:
        self.failing = set(failing)
        self.init_error = init_error
        self.samples = samples or {}  # sampling type -> (value type, samples) or error code
        self.init_calls = 0
        self.samples_since: list[int] = []
        self.polls = 0
        self.polls_wanted = polls_wanted
        self.polled = threading.Event()

    def _check(self, name: str, *args) -> None:
        if name in self.failing or (args and (name, args[-1]) in self.failing):
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if index >= 2:
            raise FakeNVMLError(2)
        return f"handle{index}"

    def nvmlDeviceGetName(self, handle: str):
        return b"NVIDIA H200" if handle == "handle0" else "NVIDIA H100"

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:
        self.polls += 1
        if self.polls >= self.polls_wanted:
            self.polled.set()
        self._check("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo", handle)
        return SimpleNamespace(used=3072 * MIB, free=140_000 * MIB, total=143_771 * MIB)

    def nvmlDeviceGetClockInfo(self, handle: str, clock_type: int) -> int:
        self._check("nvmlDeviceGetClockInfo", handle, clock_type)
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 2619}[clock_type]

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        self._check("nvmlDeviceGetPowerUsage", handle)
        return 540_000

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", handle, sensor)
        return 55

    def nvmlDeviceGetSamples(self, handle: str, sampling_type: int, since_us: int):
        self.samples_since.append(since_us)
        answer = self.samples.get(sampling_type, self.NVML_ERROR_NOT_FOUND)
        if isinstance(answer, int):
            raise FakeNVMLError(answer)
        return answer


_default = FakePynvml()
NVMLError = FakeNVMLError


def __getattr__(name: str):
    return getattr(_default, name)
