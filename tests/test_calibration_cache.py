"""The calibration cache (``engine.calibration_cache``), on the CPU with the fake GPU of
tests/test_predict.py: graph costs measured once per (GPU, driver, torch, CUDA), read on later
runs, a damaged file ignored and rewritten, ``PROFILER_CORE_RECALIBRATE=1`` measuring again, and
nothing written but the tool's own file."""

from __future__ import annotations

import json
import math
import os
import stat
from types import SimpleNamespace

import pytest
from conftest import stored_figures

from profiler_core.analysis import predict
from profiler_core.engine import calibration as engine_calibration
from profiler_core.engine.calibration_cache import CACHE_FILE_NAME, CalibrationCache, cache_path
from profiler_core.spec.bytecode import CACHE_FOLDER_NAME
from tests.test_predict import _fake_gpu


@pytest.fixture
def fake_setup(monkeypatch, tmp_path):
    """A fake GPU of 132 SMs with driver 580.1, and the user's cache folder in ``tmp_path``."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(multi_processor_count=132))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(engine_calibration.RECALIBRATE_ENV, raising=False)
    monkeypatch.setattr(engine_calibration, "driver_version", lambda: "580.1")
    copied, profiled = _fake_gpu(monkeypatch, busy_per_node_us=1.2)
    return profiled


def _batch():
    import torch

    return (torch.zeros(4, 3), torch.zeros(4))


def test_the_cache_lives_in_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path() == tmp_path / "xdg" / CACHE_FOLDER_NAME / CACHE_FILE_NAME
    for unset in ("", "relative/path"):  # not set, or not absolute (the XDG rule): ~/.cache
        monkeypatch.setenv("XDG_CACHE_HOME", unset)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert cache_path() == tmp_path / "home" / ".cache" / CACHE_FOLDER_NAME / CACHE_FILE_NAME


def test_the_graph_costs_are_measured_once_then_read_and_the_batch_copy_timed_each_run(fake_setup):
    profiled = fake_setup
    first = engine_calibration.cached_calibration("cuda:0", _batch())
    assert first.source == "measured" and len(profiled) == 1
    assert first.costs.source.startswith("measured on Fake GPU in this process: CUDA events")
    path = cache_path()
    stored = json.loads(path.read_text())
    assert [entry["key"] for entry in stored["entries"].values()] == [
        {"gpu": "Fake GPU", "sms": "132", "driver": "580.1", "torch": _torch_version(),
         "cuda": _cuda_version()}]

    again = engine_calibration.cached_calibration("cuda:0", _batch())
    assert again.source == "cached" and len(profiled) == 1  # no second profiled window
    assert again.measured_at == first.measured_at != ""
    assert (again.costs.launch_us, again.costs.per_node_us) == pytest.approx(
        (first.costs.launch_us, first.costs.per_node_us))
    assert (again.replay_us, again.busy_us, again.node_counts) == (
        first.replay_us, first.busy_us, first.node_counts)
    assert again.copy_us == 11.0  # the run's own batch copy, timed again
    assert f"at {first.measured_at}, read from the calibration cache {path}" in again.costs.source
    assert "CUDA events around" in again.costs.source


def test_the_run_records_whether_its_constants_were_measured_or_cached(fake_setup):
    headline = {"eager_gpu_busy_us": 200.0, "eager_kernels": 10.0, "eager_median_ms": 1.0,
                "graph_median_ms": 0.25}
    measured = engine_calibration.calibrate_and_predict("cuda:0", _batch(), 1, headline,
                                                         stored_figures(headline))
    cached = engine_calibration.calibrate_and_predict("cuda:0", _batch(), 1, headline,
                                                         stored_figures(headline))
    assert set(measured) == set(cached) == set(predict.HEADLINE_KEYS)
    assert measured["prediction_calibration_source"] == "measured"
    assert cached["prediction_calibration_source"] == "cached"
    assert cached["prediction_calibrated_at"] == measured["prediction_calibrated_at"]
    assert cached["predicted_graph_ms"] == pytest.approx(measured["predicted_graph_ms"])


def test_another_driver_or_torch_measures_again_and_keeps_both(fake_setup, monkeypatch):
    profiled = fake_setup
    engine_calibration.cached_calibration("cuda:0")
    monkeypatch.setattr(engine_calibration, "driver_version", lambda: "590.2")
    assert engine_calibration.cached_calibration("cuda:0").source == "measured"
    assert engine_calibration.cached_calibration("cuda:0").source == "cached"
    assert len(profiled) == 2
    drivers = {e["key"]["driver"] for e in json.loads(cache_path().read_text())["entries"].values()}
    assert drivers == {"580.1", "590.2"}


def test_recalibrate_measures_again_and_rewrites_the_entry(fake_setup, monkeypatch):
    profiled = fake_setup
    engine_calibration.cached_calibration("cuda:0")
    monkeypatch.setenv(engine_calibration.RECALIBRATE_ENV, "1")
    assert engine_calibration.cached_calibration("cuda:0").source == "measured"
    assert len(profiled) == 2
    assert len(json.loads(cache_path().read_text())["entries"]) == 1


def test_without_a_driver_version_nothing_is_read_or_written(fake_setup, monkeypatch):
    monkeypatch.setattr(engine_calibration, "driver_version", lambda: None)
    assert engine_calibration.cached_calibration("cuda:0").source == "measured"
    assert engine_calibration.cached_calibration("cuda:0").source == "measured"
    assert not os.path.lexists(cache_path())


def _damaged_entries(valid: dict) -> list:
    """The valid file's text damaged in ways a disk, an editor or another version could."""
    entry_name, entry = next(iter(valid["entries"].items()))

    def with_entry(**changes):
        return json.dumps({**valid, "entries": {entry_name: {**entry, **changes}}})

    return [
        b"\x00\xff not json",
        "{\"format\": 1, \"entries\": ",  # cut short
        json.dumps([1, 2, 3]),
        json.dumps({**valid, "format": 999}),
        json.dumps({**valid, "entries": "nope"}),
        with_entry(launch_us=float("nan")),
        with_entry(per_node_us=1e300),
        with_entry(launch_us="1.0"),
        with_entry(node_counts=[1, 2]),
        with_entry(replay_us=[1.0]),
        with_entry(elements=-5),
        with_entry(recorded="yes"),
        with_entry(device_name=None),
        with_entry(timed=None),
        "[" * 100_000,  # nested too deeply to parse
    ]


def test_a_damaged_cache_file_is_ignored_and_rewritten(fake_setup):
    profiled = fake_setup
    engine_calibration.cached_calibration("cuda:0")
    path = cache_path()
    valid = json.loads(path.read_text())
    for number, damage in enumerate(_damaged_entries(valid)):
        if isinstance(damage, bytes):
            path.write_bytes(damage)
        else:
            path.write_text(damage)
        assert engine_calibration.cached_calibration("cuda:0").source == "measured", number
        assert len(profiled) == number + 2
        rewritten = json.loads(path.read_text())
        assert len(rewritten["entries"]) == 1, number
        assert engine_calibration.cached_calibration("cuda:0").source == "cached", number
    assert sorted(os.listdir(path.parent)) == [CACHE_FILE_NAME]  # no temporary file left behind


def test_nothing_but_the_tools_own_file_is_written(fake_setup, tmp_path):
    """Other files in the cache folder stay as they are; a cache path that is a folder or a link
    is neither read nor replaced (the run still gets its constants, measured)."""
    path = cache_path()
    path.parent.mkdir(parents=True)
    neighbour = path.parent / "notes.txt"
    neighbour.write_text("mine")
    engine_calibration.cached_calibration("cuda:0")
    assert neighbour.read_text() == "mine"
    assert sorted(os.listdir(path.parent)) == [CACHE_FILE_NAME, "notes.txt"]

    path.unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("someone else's file")
    path.symlink_to(elsewhere)
    assert engine_calibration.cached_calibration("cuda:0").source == "measured"
    assert path.is_symlink() and elsewhere.read_text() == "someone else's file"
    path.unlink()
    path.mkdir()
    assert engine_calibration.cached_calibration("cuda:0").source == "measured"
    assert path.is_dir() and os.listdir(path) == []


def test_an_unwritable_cache_folder_costs_only_a_measurement(fake_setup, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # its "folder" is a file
    assert engine_calibration.cached_calibration("cuda:0").source == "measured"
    assert CalibrationCache(cache_path()).write({"gpu": "x"}, _some_fit()) is False
    assert blocker.read_text() == ""


def _some_fit():
    from profiler_core.engine.calibration_cache import GraphFit

    return GraphFit(launch_us=1.0, per_node_us=0.1, node_counts=(1, 32, 256), timed=(100, 100, 25),
                    replay_us=(1.1, 4.2, 26.6), busy_us=(math.nan, math.nan, math.nan),
                    recorded=False, elements=1024, held="back to back", device_name="Fake GPU",
                    measured_at="2026-12-01T18:00:00+00:00")


def test_an_entry_without_busy_times_round_trips(tmp_path):
    cache = CalibrationCache(tmp_path / "calibration.json")
    key = {"gpu": "Fake GPU", "driver": "1", "torch": "2", "cuda": "3"}
    assert cache.write(key, _some_fit())
    back = cache.read(key, (1, 32, 256))
    assert back is not None and back.replay_us == (1.1, 4.2, 26.6)
    assert all(math.isnan(v) for v in back.busy_us)
    assert cache.read(key, (1, 64)) is None  # another method's graphs: not this entry


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _cuda_version() -> str:
    import torch

    return str(torch.version.cuda)


def _stored(tmp_path, **changes):
    """A cache holding one entry written by the tool, then edited by ``changes`` (entry fields,
    or ``file_format``: the file's own format field); returns the cache and the entry's key."""
    path = tmp_path / "calibration.json"
    cache = CalibrationCache(path)
    key = {"gpu": "Fake GPU", "driver": "1", "torch": "2", "cuda": "3"}
    assert cache.write(key, _some_fit())
    content = json.loads(path.read_text())
    if "file_format" in changes:
        content["format"] = changes.pop("file_format")
    next(iter(content["entries"].values())).update(changes)
    path.write_text(json.dumps(content))
    return cache, key


@pytest.mark.parametrize("changes", [
    {"launch_us": 10**400}, {"per_node_us": -(10**400)}, {"replay_us": [10**400, 4.2, 26.6]},
    {"busy_us": [10**400, 1.0, 1.0]}, {"elements": 10**400}, {"timed": [10**400, 100, 25]},
    {"launch_us": -1e6}, {"per_node_us": -0.5}, {"replay_us": [-1.1, 4.2, 26.6]},
    {"busy_us": [-1.0, math.nan, math.nan]},
])
def test_an_entry_out_of_range_is_read_as_missing_and_reading_never_raises(tmp_path, changes):
    """A 400-digit number overflowed a float in the range check (OverflowError); negative
    constants, which the options refuse, gave a negative predicted graph time."""
    cache, key = _stored(tmp_path, **changes)
    assert cache.read(key, (1, 32, 256)) is None


@pytest.mark.parametrize("file_format", [True, 1.0, "1", None])
def test_a_file_whose_format_is_not_the_whole_number_1_is_not_read(tmp_path, file_format):
    cache, key = _stored(tmp_path, file_format=file_format)
    assert cache.read(key, (1, 32, 256)) is None


def test_a_cache_folder_that_is_a_link_is_neither_read_nor_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    CalibrationCache(elsewhere / CACHE_FILE_NAME).write({"gpu": "x"}, _some_fit())
    before = (elsewhere / CACHE_FILE_NAME).read_bytes()
    (tmp_path / "xdg").mkdir()
    linked = tmp_path / "xdg" / CACHE_FOLDER_NAME
    linked.symlink_to(elsewhere)
    cache = CalibrationCache(linked / CACHE_FILE_NAME)
    assert cache.read({"gpu": "x"}, (1, 32, 256)) is None
    assert cache.write({"gpu": "y"}, _some_fit()) is False
    assert os.listdir(elsewhere) == [CACHE_FILE_NAME]
    assert (elsewhere / CACHE_FILE_NAME).read_bytes() == before


def test_a_cache_folder_others_may_write_to_is_neither_read_nor_written(tmp_path):
    folder = tmp_path / "xdg" / CACHE_FOLDER_NAME
    cache = CalibrationCache(folder / CACHE_FILE_NAME)
    assert cache.write({"gpu": "x"}, _some_fit())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # made private
    before = (folder / CACHE_FILE_NAME).read_bytes()
    folder.chmod(0o777)
    assert cache.read({"gpu": "x"}, (1, 32, 256)) is None  # another user may have written it
    assert cache.write({"gpu": "y"}, _some_fit()) is False
    assert (folder / CACHE_FILE_NAME).read_bytes() == before
