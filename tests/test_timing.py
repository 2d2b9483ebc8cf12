"""profiler_core.timing.trials with a fake clock: steady-state event pairs between consecutive iterations,
the cold start, the article's loop, and the interleaving; and the runner's tables built on them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from profiler_core.analysis import metrics
from profiler_core.analysis.figures import Figures, Headline
from profiler_core.engine import pipeline
from profiler_core.spec import schema
from profiler_core.spec.config import RunConfig
from profiler_core.storage import runtables
from profiler_core.timing import trials as timing
from profiler_core.timing.trials import Mode


class FakeDevice:
    """A device clock that advances only when work "runs"; marks read the time when recorded.

    Every call is logged, so a test can check what ran between two marks.
    """

    device_timestamps = True

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.log: list[str] = []
        self.made = 0

    def marks(self, count: int) -> list[dict]:
        self.made += count
        return [{"ms": math.nan} for _ in range(count)]

    def record(self, mark: dict) -> None:
        self.log.append("record")
        mark["ms"] = self.now_ms

    def elapsed_ms(self, start: dict, end: dict) -> float:
        return end["ms"] - start["ms"]

    def synchronize(self) -> None:
        self.log.append("sync")

    def work(self, label: str, ms: float) -> None:
        self.log.append(label)
        self.now_ms += ms

    def wall(self) -> float:  # seconds, as perf_counter
        return self.now_ms / 1e3


def mode_with(device: FakeDevice, run_ms: list[float], copy_ms: float | None = None,
              name: str = "graph", steps: int = 1, interrupt_at: int | None = None) -> Mode:
    def run(i: int) -> None:
        if i == interrupt_at:
            raise KeyboardInterrupt
        device.work(f"run{i}", run_ms[i])

    load = None if copy_ms is None else (lambda i: device.work(f"load{i}", copy_ms))
    return Mode(name, steps, run, load)


def test_steady_block_times_each_iteration_between_consecutive_marks():
    device = FakeDevice()
    mode = mode_with(device, [9.0, 1.0, 2.0, 3.0], name="eager")
    rows: list[tuple] = []
    timing.steady_block(mode, 0, 4, trial=2, clock=device, rows=rows)
    frame = pd.DataFrame(rows, columns=schema.LATENCY_COLUMNS)
    # the first iteration starts from an idle device: run, not kept
    assert frame["iteration"].tolist() == [1, 2, 3]
    assert frame["gpu_ms"].tolist() == [1.0, 2.0, 3.0]
    assert frame["wall_ms"].isna().all()
    assert set(frame["method"]) == {"steady"} and set(frame["trial"]) == {2}
    # one synchronise at each end of the block, and nothing but the step between two marks
    assert device.log == ["sync", "record", "run0", "record", "run1", "record", "run2", "record",
                          "run3", "record", "sync"]


def test_steady_graph_iteration_includes_the_batch_copy_with_no_mark_between():
    device = FakeDevice()
    mode = mode_with(device, [5.0] * 11 + [0.5, 0.5], copy_ms=0.25, steps=3)
    rows: list[tuple] = []
    timing.steady_block(mode, 10, 3, trial=0, clock=device, rows=rows)
    frame = pd.DataFrame(rows, columns=schema.LATENCY_COLUMNS)
    assert frame["iteration"].tolist() == [11, 12]
    assert frame["gpu_ms"].tolist() == [0.75, 0.75]  # copy + replay: what a training loop pays
    assert frame["steps"].tolist() == [3, 3]
    # one mark per iteration: a mark between copy and replay would cost the loop a launch
    assert device.log[:5] == ["sync", "record", "load10", "run10", "record"]


def test_the_batch_copy_is_timed_alone_behind_held_device_work():
    device = FakeDevice()
    held = []
    mode = mode_with(device, [1.0], copy_ms=0.125)
    copy_ms = timing.input_copy_ms(mode, 8, device, lambda: held.append(device.log[-1]))
    assert copy_ms == 0.125
    assert held == ["sync"]  # the device is held after the synchronise, before the first mark
    assert device.log == ["sync", "record"] + [f"load{i}" for i in range(8)] + ["record", "sync"]
    assert math.isnan(timing.input_copy_ms(Mode("eager", 1, print), 8, device, lambda: None))


def test_an_interrupted_steady_block_keeps_the_iterations_it_finished():
    device = FakeDevice()
    mode = mode_with(device, [1.0, 2.0, 3.0, 4.0, 5.0], name="eager", interrupt_at=3)
    rows: list[tuple] = []
    with pytest.raises(KeyboardInterrupt):
        timing.steady_block(mode, 0, 5, trial=0, clock=device, rows=rows)
    assert [(r[3], r[5]) for r in rows] == [(1, 2.0), (2, 3.0)]
    assert device.log[-1] == "sync"


def test_on_the_host_clock_the_time_goes_to_wall_ms():
    calls = []
    mode = Mode("eager", 1, lambda i: calls.append(i))
    rows: list[tuple] = []
    timing.steady_block(mode, 0, 3, trial=0, clock=timing.HostClock(), rows=rows)
    assert calls == [0, 1, 2]
    assert [r[3] for r in rows] == [1, 2]
    assert all(math.isnan(r[5]) and r[6] >= 0 for r in rows)


def test_cold_iteration_synchronises_first_and_leaves_the_copy_out():
    device = FakeDevice()
    mode = mode_with(device, [0.0, 0.5], copy_ms=0.25)
    row = timing.cold_iteration(mode, 1, trial=4, clock=device, wall_clock=device.wall)
    assert device.log == ["load1", "sync", "record", "run1", "record", "sync"]
    assert row[:5] == ("graph", "cold", 4, 1, 1)
    assert row[5] == 0.5 and row[6] == pytest.approx(0.5)


def test_article_loop_without_sync_sees_only_the_enqueue():
    device = FakeDevice()

    class Async(FakeDevice):
        """Work is enqueued instantly (host time does not move) and runs on synchronise."""

    clock = Async()
    pending = []

    def run(i: int) -> None:
        clock.work("enqueue", 0.01)  # 10 us of CPU per launch
        pending.append(1.0)  # 1 ms of GPU work

    def synchronize() -> None:
        clock.now_ms += sum(pending)
        pending.clear()

    clock.synchronize = synchronize
    loop = timing.article_loop(Mode("eager", 1, run), 10, clock, wall_clock=clock.wall)
    assert loop.enqueue_ms == pytest.approx(0.01)
    assert loop.synchronised_ms == pytest.approx(1.01)
    assert device.made == 0


def test_interleaving_is_abba_and_blocks_split_evenly():
    a, b = Mode("eager", 1, print), Mode("graph", 1, print)
    order = [(trial, mode.name) for trial, mode in timing.interleaved([a, b], 4)]
    assert order == [(0, "eager"), (0, "graph"), (1, "graph"), (1, "eager"),
                     (2, "eager"), (2, "graph"), (3, "graph"), (3, "eager")]
    assert timing.split_evenly(7, 3) == [3, 2, 2]
    assert sum(timing.split_evenly(200, 10)) == 200


@pytest.mark.parametrize("replays, eager, expected", [(200, None, 10), (7, None, 3), (1, None, 1),
                                                      (200, 6, 3), (19, None, 9)])
def test_trials_default_to_what_the_iterations_allow(replays, eager, expected):
    config = RunConfig(replays=replays, eager_iters=eager, warmup_iters=2, capture_iters=4,
                       device="cpu")
    assert config.trials is None and config.trial_count == expected
    assert RunConfig(replays=replays, trials=1).trial_count == 1  # an explicit value wins


def test_runner_stats_and_headline_use_the_steady_state_by_default():
    device = FakeDevice()
    rows: list[tuple] = []
    rng = np.random.default_rng(0)
    eager = mode_with(device, list(1.0 + 0.01 * rng.standard_normal(41)), name="eager")
    graph = mode_with(device, list(np.full(41, 0.2)), copy_ms=0.01)
    for trial in range(4):
        timing.steady_block(eager, 0, 41, trial, device, rows)
        timing.steady_block(graph, 0, 41, trial, device, rows)
    for i in range(20):  # cold start: slower, each pays a launch
        rows.append(timing.cold_iteration(
            mode_with(device, [1.1] * 20, name="eager"), i, 0, device, wall_clock=device.wall))
        rows.append(timing.cold_iteration(mode_with(device, [0.3] * 20), i, 0, device,
                                          wall_clock=device.wall))
    latency = runtables.latency_table(rows)
    loops = pd.DataFrame([("eager", "article_no_sync", 0.7), ("graph", "article_no_sync", 0.03),
                          ("eager", "block_sync", 1.0), ("graph", "block_sync", 0.21)],
                         columns=["mode", "method", "ms_per_step"])
    table = runtables.stats_table(latency, loops, {"graph": 0.01})
    assert set(zip(table["mode"], table["method"])) == {
        ("eager", "steady_trial"), ("graph", "steady_trial"),
        ("eager", "steady_event"), ("graph", "steady_event"), ("graph", "input_copy"),
        ("eager", "cold_event"), ("graph", "cold_event"), ("eager", "cold_wall"),
        ("graph", "cold_wall"), ("eager", "article_no_sync"), ("graph", "article_no_sync"),
        ("eager", "block_sync"), ("graph", "block_sync")}
    trials = table.set_index(["mode", "method"]).loc[("eager", "steady_trial")]
    assert trials["count"] == 4  # one sample per trial: its mean time per step
    assert runtables.headline_facts({}) == {"timing_method": "steady_trial"}
    # the pair's figures as the runner stores them: modes.csv, then metrics.csv
    prepared = {name: SimpleNamespace(one_time_ms=1.0, memory_bytes=0, graphs_recorded=math.nan)
                for name in ("eager", "graph")}
    modes_table = pipeline._modes_table(RunConfig(), latency, table, prepared)
    figures = Figures.from_table(metrics.build(modes_table, table, {}))
    pair = Headline.of(figures, runtables.headline_facts({}))
    assert pair.timing_method == "steady_trial"
    assert pair.graph_ms == pytest.approx(0.21)  # replay + batch copy
    assert figures.get("graph", "input_copy_median_ms") == pytest.approx(0.01)
    assert pair.eager_ms == pytest.approx(1.0, abs=0.01)
    assert pair.speedup == pytest.approx(pair.eager_ms / 0.21)
    assert pair.speedup_ci_low <= pair.speedup <= pair.speedup_ci_high
    assert figures.get("graph", "cold_event_speedup") == pytest.approx(1.1 / 0.3)
    assert figures.get("graph", "article_no_sync_speedup") == pytest.approx(0.7 / 0.03)
