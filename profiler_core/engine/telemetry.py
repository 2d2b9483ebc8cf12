"""NVML telemetry and run phases: what the GPU reported while the benchmark ran.

One gate to NVML (:class:`Nvml`; every call may fail on its own, an unread metric is NaN), a
polling sampler in a thread or in a child process (``python -m profiler_core.engine.telemetry``),
a recorder of named wall-clock phases on the same clock, and the GPU list for the dashboard.
Without a GPU or driver everything works and the tables are empty with their columns.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from profiler_core.spec.errors import ConfigError, ProfilerError
from profiler_core.spec.schema import NVML_COLUMNS, NVML_METRICS, PHASE_COLUMNS

NVML_UTILISATION_CAVEAT = (
    "NVML utilisation is the percent of time any kernel ran over the driver's sample period "
    "(1/6 s to 1 s), so it cannot resolve a millisecond step, and 100% does not mean the SMs "
    "are busy; the profiler's GPU busy time is the precise figure."
)

GPU_COLUMNS = ["index", "name", "memory_free_mib", "memory_total_mib"]

# ``str`` is pandas' default text dtype (object on pandas 2, StringDtype on pandas 3), so these
# frames compare equal to the same tables read back from CSV.
_NVML_DTYPES = {"t_s": "float64", "metric": str, "value": "float64", "source": str}
_PHASE_DTYPES = {"phase": str, "start_s": "float64", "end_s": "float64"}
_GPU_DTYPES = {
    "index": "int64", "name": str, "memory_free_mib": "float64", "memory_total_mib": "float64",
}

MIN_INTERVAL_S = 0.001
MAX_INTERVAL_S = 10.0

# Driver sample buffers collected at stop(): NVML sampling-type constant -> (our metric name,
# factor to its unit). They cover the time polling was paused (the timed trials) too.
_DRIVER_SAMPLE_TYPES = {
    "NVML_GPU_UTILIZATION_SAMPLES": ("gpu_util_pct", 1.0),
    "NVML_MEMORY_UTILIZATION_SAMPLES": ("mem_util_pct", 1.0),
    "NVML_TOTAL_POWER_SAMPLES": ("power_w", 1e-3),  # milliwatts
    "NVML_PROCESSOR_CLK_SAMPLES": ("sm_clock_mhz", 1.0),
    "NVML_MEMORY_CLK_SAMPLES": ("mem_clock_mhz", 1.0),
}

# nvmlValueType_t constant -> the c_nvmlValue_t union field holding a sample of that type.
_VALUE_FIELDS = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
}


def _frame(rows: list[tuple], columns: list[str], dtypes: dict[str, Any]) -> pd.DataFrame:
    """Rows -> DataFrame with fixed columns and dtypes (also when there are no rows)."""
    return pd.DataFrame.from_records(rows, columns=columns).astype(dtypes)


def nvml_frame(rows: list[tuple]) -> pd.DataFrame:
    """NVML samples as ``(t_s, metric, value, source)`` rows -> the NVML_COLUMNS frame a sampler
    hands the run (typed, also when there are none)."""
    return _frame(rows, NVML_COLUMNS, _NVML_DTYPES)


class Nvml:
    """The one gate to NVML: imports ``pynvml`` and calls ``nvmlInit`` once, on first use.

    Every NVML call goes through :meth:`query`, which returns a default instead of raising and
    remembers why the call failed (under the metric names it served, else the function name).
    ``module`` replaces ``pynvml`` (tests pass a fake). Thread-safe.
    """

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._init_lock = threading.Lock()
        self._initialised = False
        self._available = False
        self._reason = ""
        self._errors: dict[str, BaseException] = {}

    def _ensure_init(self) -> bool:
        if self._initialised:
            return self._available
        with self._init_lock:
            if not self._initialised:
                self._available, self._reason = self._init()
                self._initialised = True
        return self._available

    def _init(self) -> tuple[bool, str]:
        if self._module is None:
            try:
                self._module = importlib.import_module("pynvml")
            except ImportError as exc:
                return False, f"pynvml is not importable ({exc}); pip install nvidia-ml-py"
        try:
            self._module.nvmlInit()
        except self._module.NVMLError as exc:
            return False, f"NVML could not start: {exc} (is an NVIDIA driver installed?)"
        return True, ""

    @property
    def available(self) -> bool:
        """Whether NVML initialised (initialises it on first access)."""
        return self._ensure_init()

    @property
    def reason(self) -> str:
        """One line saying why NVML is unavailable; empty when it is available."""
        self._ensure_init()
        return self._reason

    def constant(self, name: str) -> Any:
        """An NVML constant by name (``"NVML_CLOCK_SM"``); None when NVML is unavailable."""
        if not self._ensure_init():
            return None
        return getattr(self._module, name, None)

    def query(
        self, function_name: str, *args: Any, default: Any = math.nan,
        metrics: tuple[str, ...] = (),
    ) -> Any:
        """Call ``pynvml.<function_name>(*args)``; on any NVML error return ``default``.

        The error is remembered under each name in ``metrics`` (or under ``function_name`` when
        ``metrics`` is empty); see :attr:`reasons`. A function this pynvml lacks counts as an
        error. Without NVML nothing is called or remembered: :attr:`reason` already says why.
        """
        if not self._ensure_init():
            return default
        try:
            function = getattr(self._module, function_name)
            return function(*args)
        except (self._module.NVMLError, AttributeError) as exc:
            for key in metrics or (function_name,):
                self._errors[key] = exc
            return default

    @property
    def reasons(self) -> dict[str, str]:
        """Why each failed query failed (the latest error), by metric or function name."""
        return {key: str(exc) or type(exc).__name__ for key, exc in dict(self._errors).items()}

    def error_code(self, key: str) -> int | None:
        """The NVML error code of the latest failure remembered under ``key``, if any."""
        return getattr(self._errors.get(key), "value", None)


_default_nvml: Nvml | None = None
_default_lock = threading.Lock()


def default_nvml() -> Nvml:
    """The process-wide gate used when none is passed (created on first call)."""
    global _default_nvml
    with _default_lock:
        if _default_nvml is None:
            _default_nvml = Nvml()
        return _default_nvml


def driver_version() -> str | None:
    """The NVIDIA driver's version from NVML (None where NVML cannot say)."""
    version = default_nvml().query("nvmlSystemGetDriverVersion", default=None)
    return version.decode() if isinstance(version, bytes) else version


@dataclass(frozen=True)
class NvmlCapability:
    """What NVML could report for a device during a sampling session."""

    available: bool  # NVML initialised and the device handle was found
    reason: str  # one line: why NVML is unavailable ("" when available)
    unsupported_metrics: tuple[str, ...]  # NVML_METRICS that failed at least once (NaN there)
    driver_samples: bool  # nvmlDeviceGetSamples answered (the driver's buffered samples)


def read_metrics(nvml: Nvml, handle: Any) -> dict[str, float]:
    """One reading of every metric in ``NVML_METRICS``; a metric that fails alone is NaN."""
    rates = nvml.query(
        "nvmlDeviceGetUtilizationRates", handle, default=None,
        metrics=("gpu_util_pct", "mem_util_pct"),
    )
    memory = nvml.query("nvmlDeviceGetMemoryInfo", handle, default=None, metrics=("mem_used_mib",))
    power_mw = nvml.query("nvmlDeviceGetPowerUsage", handle, metrics=("power_w",))
    return {
        "gpu_util_pct": math.nan if rates is None else float(rates.gpu),
        "mem_util_pct": math.nan if rates is None else float(rates.memory),
        "mem_used_mib": math.nan if memory is None else memory.used / 2**20,
        "sm_clock_mhz": float(nvml.query(
            "nvmlDeviceGetClockInfo", handle, nvml.constant("NVML_CLOCK_SM"),
            metrics=("sm_clock_mhz",),
        )),
        "mem_clock_mhz": float(nvml.query(
            "nvmlDeviceGetClockInfo", handle, nvml.constant("NVML_CLOCK_MEM"),
            metrics=("mem_clock_mhz",),
        )),
        "power_w": power_mw / 1000.0,
        "temperature_c": float(nvml.query(
            "nvmlDeviceGetTemperature", handle, nvml.constant("NVML_TEMPERATURE_GPU"),
            metrics=("temperature_c",),
        )),
    }


class PhaseRecorder:
    """Named wall-clock phases (warm-up, capture, timing...), in seconds since ``origin_s``.

    ``origin_s`` is a ``time.time()`` value, the same origin as :class:`NvmlSampler`'s, so the
    two tables share one time axis. Needs no NVML. Thread-safe.
    """

    def __init__(self, origin_s: float, clock: Callable[[], float] = time.time) -> None:
        self._origin_s = origin_s
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: list[tuple[str, float, float]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the ``with`` block as phase ``name`` (also when the block raises)."""
        start_s = self._clock()
        try:
            yield
        finally:
            self.mark(name, start_s, self._clock())

    def mark(self, name: str, start_s: float, end_s: float) -> None:
        """Record phase ``name`` between two absolute ``time.time()`` values."""
        if not end_s >= start_s:
            raise ProfilerError(
                f"phase {name!r} ends ({end_s}) before it starts ({start_s})",
                "pass absolute time.time() values with start_s <= end_s",
            )
        with self._lock:
            self._rows.append((name, start_s - self._origin_s, end_s - self._origin_s))

    def frame(self) -> pd.DataFrame:
        """The phases (PHASE_COLUMNS) by start, an enclosing phase before the phases it
        contains; empty with columns when none."""
        with self._lock:
            rows = list(self._rows)
        frame = _frame(rows, PHASE_COLUMNS, _PHASE_DTYPES)
        return frame.sort_values(
            ["start_s", "end_s"], ascending=[True, False], kind="stable",
        ).reset_index(drop=True)


def _validate_interval(interval_s: float) -> None:
    if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:  # also rejects NaN
        raise ConfigError(
            "nvml_interval_ms",
            f"NVML polling interval {interval_s * 1000:g} ms is out of range",
            f"use {MIN_INTERVAL_S * 1000:g} to {MAX_INTERVAL_S * 1000:g} ms "
            "(10-50 ms is plenty: NVML utilisation itself updates every 1/6 s to 1 s)",
        )


class NvmlSampler:
    """Polls :func:`read_metrics` on a daemon thread every ``interval_s`` seconds.

    At :meth:`stop` it also fetches the driver's buffered utilisation samples since
    :meth:`start` (``nvmlDeviceGetSamples``). The driver keeps a bounded buffer, so on long runs
    only its most recent samples survive. ``origin_s`` (a ``time.time()`` value, default: the
    moment of :meth:`start`) is time zero of ``t_s``. Without NVML, start/stop do nothing and
    :meth:`frame` is empty; :attr:`capability` says why. Use as a context manager or call
    :meth:`start`/:meth:`stop`; both are idempotent.
    """

    def __init__(
        self, device_index: int, interval_s: float = 0.02, origin_s: float | None = None,
        nvml: Nvml | None = None, clock: Callable[[], float] = time.time,
    ) -> None:
        _validate_interval(interval_s)
        self._device_index = device_index
        self._interval_s = interval_s
        self._origin_s = origin_s
        self._nvml = nvml if nvml is not None else default_nvml()
        self._clock = clock
        self._handle: Any = None
        self._handle_looked_up = False
        self._rows: list[tuple[float, str, float, str]] = []
        self._rows_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_us = 0
        self._driver_samples = False
        self._polling = threading.Lock()
        self._paused = False

    def _device_handle(self) -> Any:
        if not self._handle_looked_up:
            self._handle = self._nvml.query(
                "nvmlDeviceGetHandleByIndex", self._device_index, default=None,
            )
            self._handle_looked_up = True
        return self._handle

    @property
    def capability(self) -> NvmlCapability:
        """Whether NVML works for this device, and which metrics failed so far."""
        if not self._nvml.available:
            return NvmlCapability(False, self._nvml.reason, (), False)
        if self._device_handle() is None:
            why = self._nvml.reasons.get("nvmlDeviceGetHandleByIndex", "no handle")
            return NvmlCapability(False, f"NVML has no GPU {self._device_index}: {why}", (), False)
        reasons = self._nvml.reasons
        unsupported = tuple(metric for metric in NVML_METRICS if metric in reasons)
        return NvmlCapability(True, "", unsupported, self._driver_samples)

    def start(self) -> NvmlSampler:
        """Start polling (no thread when NVML or the device is unavailable)."""
        if self._thread is not None:
            return self
        if self._origin_s is None:
            self._origin_s = self._clock()
        handle = self._device_handle() if self._nvml.available else None
        if handle is None:
            return self
        self._start_us = int(round(self._clock() * 1e6))
        self._stop_event.clear()
        self._thread = threading.Thread(
            target=self._poll, args=(handle, self._origin_s), name="nvml-sampler", daemon=True,
        )
        self._thread.start()
        return self

    def _poll(self, handle: Any, origin_s: float) -> None:
        nvml, clock = self._nvml, self._clock
        rows, lock = self._rows, self._rows_lock
        while True:
            with self._polling:  # pause() waits here until a poll in progress has finished
                if not self._paused:
                    t_s = clock() - origin_s
                    values = read_metrics(nvml, handle)
                    with lock:
                        rows.extend((t_s, metric, value, "poll") for metric, value in values.items())
            if self._stop_event.wait(self._interval_s):
                return

    def pause(self) -> None:
        """Make no NVML call until :meth:`resume`; returns once a poll in progress has finished.
        The driver keeps sampling on its own: :meth:`stop` fetches those samples for the pause too."""
        with self._polling:
            self._paused = True

    def resume(self) -> None:
        with self._polling:
            self._paused = False

    def stop(self) -> None:
        """Stop polling promptly, then append the driver's buffered samples."""
        if self._thread is None:
            return
        self._stop_event.set()
        self._thread.join()
        self._thread = None
        driver_rows = self._driver_rows(self._handle)
        with self._rows_lock:
            self._rows.extend(driver_rows)

    def _driver_rows(self, handle: Any) -> list[tuple[float, str, float, str]]:
        nvml = self._nvml
        not_found = nvml.constant("NVML_ERROR_NOT_FOUND")
        fields = {nvml.constant(name): field for name, field in _VALUE_FIELDS.items()}
        rows: list[tuple[float, str, float, str]] = []
        for type_name, (metric, factor) in _DRIVER_SAMPLE_TYPES.items():
            if nvml.constant(type_name) is None:
                continue  # this pynvml does not know the sampling type
            result = nvml.query(
                "nvmlDeviceGetSamples", handle, nvml.constant(type_name), self._start_us,
                default=None,
            )
            if result is None:
                # NOT_FOUND means the driver answered but has no sample newer than start().
                if nvml.error_code("nvmlDeviceGetSamples") == not_found:
                    self._driver_samples = True
                continue
            self._driver_samples = True
            value_type, samples = result
            field = fields.get(value_type)
            if field is None:
                continue
            rows.extend(
                (sample.timeStamp / 1e6 - self._origin_s, metric,
                 float(getattr(sample.sampleValue, field)) * factor, "driver")
                for sample in samples
            )
        return rows

    def frame(self) -> pd.DataFrame:
        """NVML_COLUMNS in long form: ``poll`` rows, then ``driver`` rows once stopped."""
        with self._rows_lock:
            rows = list(self._rows)
        return nvml_frame(rows)

    def __enter__(self) -> NvmlSampler:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# The sampler process: how long stop() waits for it to write its samples, and how often it looks
# for the end of its standard input (its stop signal) between polls.
SAMPLER_STOP_TIMEOUT_S = 30.0
_SAMPLER_WAKE_S = 0.25
_SAMPLES_FILE = "nvml_samples.json"
SAMPLER_READY_FILE = "ready"  # written beside the samples once the child is polling


class NvmlSamplerProcess:
    """:class:`NvmlSampler` in a child process (``python -m profiler_core.engine.telemetry``).

    A polling thread inside a measured process competes with its launching thread for the
    interpreter lock and slows CPU-bound eager steps; in a child process it cannot. Even from a
    child, polling NVML slows launch-bound steps (docs/h200-history.md, "Telemetry"), so
    :meth:`pause` stops every NVML call for the timed trials and the driver's own buffered
    samples, fetched at the end, cover them. :meth:`start`
    launches the child and returns at once (the child begins polling within about a second);
    :meth:`stop` closes the child's standard input, which tells it to stop, fetch the driver's
    buffered samples and write everything to a private temporary folder; the samples are read
    back and the folder removed. The child also stops cleanly on SIGTERM or SIGINT, and exits when
    its parent dies (its standard input closes). ``t_s`` is on the ``time.time()`` clock from
    ``origin_s``, the same clock as :class:`PhaseRecorder`. ``nvml_module`` names the module to use
    instead of ``pynvml`` (tests pass an importable fake).
    """

    def __init__(self, device_index: int, interval_s: float = 0.02, origin_s: float | None = None,
                 nvml_module: str = "pynvml", python: str = sys.executable) -> None:
        _validate_interval(interval_s)
        self._device_index = device_index
        self._interval_s = interval_s
        self._origin_s = origin_s
        self._nvml_module = nvml_module
        self._python = python
        self._process: subprocess.Popen | None = None
        self._folder: Path | None = None
        self._frame = nvml_frame([])
        self._capability = NvmlCapability(False, "the NVML sampler has not run", (), False)

    def start(self) -> NvmlSamplerProcess:
        if self._process is not None:
            return self
        if self._origin_s is None:
            self._origin_s = time.time()
        self._folder = Path(tempfile.mkdtemp(prefix="profiler_core_nvml_"))
        package_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        argv = [self._python, "-m", "profiler_core.engine.telemetry", "--device-index",
                str(self._device_index), "--interval-s", repr(self._interval_s), "--origin-s",
                repr(self._origin_s), "--out", str(self._folder / _SAMPLES_FILE),
                "--nvml-module", self._nvml_module]
        with open(self._folder / "stderr.txt", "wb") as stderr:
            self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=stderr, env=env)
        return self

    def pause(self, timeout_s: float = SAMPLER_STOP_TIMEOUT_S) -> bool:
        """Stop polling until :meth:`resume` (the driver's own samples still cover the pause).
        Waits for the child to have started and to confirm: when this returns, the child makes
        no NVML call. False if it did not confirm in time (it is then stopped for good)."""
        return self._tell("pause", timeout_s)

    def resume(self, timeout_s: float = SAMPLER_STOP_TIMEOUT_S) -> bool:
        return self._tell("resume", timeout_s)

    def _tell(self, command: str, timeout_s: float) -> bool:
        process = self._process
        if process is None or not self.wait_until_polling(timeout_s):
            return False
        stdin, stdout = process.stdin, process.stdout  # pipes: start() opens both
        if stdin is None or stdout is None:
            return False
        try:
            stdin.write(f"{command}\n".encode())
            stdin.flush()
            readable, _, _ = select.select([stdout], [], [], timeout_s)
            if readable and stdout.readline().strip() == command.encode():
                return True
        except OSError:
            pass
        self.stop()  # a child that does not answer must not sample during what follows
        return False

    def wait_until_polling(self, timeout_s: float) -> bool:
        """Whether the child started polling within ``timeout_s`` (it never has to be waited for)."""
        deadline = time.monotonic() + timeout_s
        while self._folder is not None and time.monotonic() < deadline:
            if (self._folder / SAMPLER_READY_FILE).exists():
                return True
            if self._process is None or self._process.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        """Stop the child and read its samples (idempotent; waits at most ``SAMPLER_STOP_TIMEOUT_S``)."""
        process, self._process = self._process, None
        folder = self._folder
        if process is None or folder is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            pass  # the child is gone already
        try:
            returncode = process.wait(timeout=SAMPLER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            returncode = process.wait()
        try:
            self._read_results(returncode, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self._folder = None

    def _read_results(self, returncode: int, folder: Path) -> None:
        path = folder / _SAMPLES_FILE
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stderr = (folder / "stderr.txt").read_text(encoding="utf-8", errors="replace")
            last = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
            self._capability = NvmlCapability(
                False, f"the NVML sampler process ended with exit code {returncode} before writing "
                       f"its samples ({last})", (), False)
            return
        capability = payload["capability"]
        self._capability = NvmlCapability(
            bool(capability["available"]), str(capability["reason"]),
            tuple(capability["unsupported_metrics"]), bool(capability["driver_samples"]))
        self._frame = nvml_frame([tuple(row) for row in payload["rows"]])

    @property
    def capability(self) -> NvmlCapability:
        return self._capability

    def frame(self) -> pd.DataFrame:
        return self._frame.copy()

    def __enter__(self) -> NvmlSamplerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _sampler_process_main(argv: Sequence[str]) -> int:
    """The child of :class:`NvmlSamplerProcess`: sample until standard input ends or a signal."""
    parser = argparse.ArgumentParser(prog="python -m profiler_core.engine.telemetry")
    parser.add_argument("--device-index", type=int, required=True)
    parser.add_argument("--interval-s", type=float, required=True)
    parser.add_argument("--origin-s", type=float, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--nvml-module", default="pynvml")
    args = parser.parse_args(argv)
    stop_requested = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop_requested.set())
    # pynvml is imported by Nvml itself, which says why when it is missing; another module (a
    # test's fake) must import.
    module = None if args.nvml_module == "pynvml" else importlib.import_module(args.nvml_module)
    sampler = NvmlSampler(args.device_index, interval_s=args.interval_s, origin_s=args.origin_s,
                          nvml=Nvml(module=module))
    sampler.start()
    Path(args.out).with_name(SAMPLER_READY_FILE).touch()  # for whoever waits on the start
    stdin, pending = sys.stdin.buffer.fileno(), b""
    commands = {b"pause": sampler.pause, b"resume": sampler.resume}
    while not stop_requested.is_set():
        try:
            readable, _, _ = select.select([stdin], [], [], _SAMPLER_WAKE_S)
        except InterruptedError:
            continue
        if not readable:
            continue
        data = os.read(stdin, 4096)
        if not data:
            break  # end of input: the parent asked us to stop (or is gone)
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip() in commands:
                commands[line.strip()]()
                sys.stdout.buffer.write(line.strip() + b"\n")  # done: the parent may go on
                sys.stdout.buffer.flush()
    sampler.stop()
    payload = {"capability": dataclasses.asdict(sampler.capability),
               "rows": [list(row) for row in sampler.frame().itertuples(index=False)]}
    staging = Path(args.out + ".partial")
    staging.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(staging, args.out)
    return 0


def list_gpus(nvml: Nvml | None = None) -> pd.DataFrame:
    """The GPUs NVML sees (GPU_COLUMNS); empty with columns when NVML is unavailable."""
    nvml = nvml if nvml is not None else default_nvml()
    rows = []
    for index in range(nvml.query("nvmlDeviceGetCount", default=0)):
        handle = nvml.query("nvmlDeviceGetHandleByIndex", index, default=None)
        if handle is None:
            continue
        name = nvml.query("nvmlDeviceGetName", handle, default="")
        if isinstance(name, bytes):  # older pynvml returns bytes
            name = name.decode(errors="replace")
        memory = nvml.query("nvmlDeviceGetMemoryInfo", handle, default=None)
        free_mib = math.nan if memory is None else memory.free / 2**20
        total_mib = math.nan if memory is None else memory.total / 2**20
        rows.append((index, name, free_mib, total_mib))
    return _frame(rows, GPU_COLUMNS, _GPU_DTYPES)


if __name__ == "__main__":
    sys.exit(_sampler_process_main(sys.argv[1:]))
