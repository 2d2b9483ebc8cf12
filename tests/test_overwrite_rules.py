"""What ``--overwrite`` counts as the tool's own (issue 27, items 8 and 9): in a run saved before
manifests, exactly the trace names the tool writes; in a run or sweep with a manifest, each file
with the content it was written with (a SHA-256 in the manifest), not just its size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_output_safety import _quick_run, snapshot
from test_sweep import FakeLauncher, small_plan

from profiler_core.spec.errors import ConfigError
from profiler_core.storage import runfolder
from profiler_core.storage.results import check_output
from profiler_core.sweep import store as sweep_store
from profiler_core.sweep.runner import SweepRunner


def _refused(attempt, root: Path, words: str) -> None:
    before = snapshot(root)
    with pytest.raises(ConfigError) as refused:
        attempt()
    assert words in refused.value.message, refused.value.message
    assert snapshot(root) == before  # nothing removed or changed


@pytest.mark.parametrize("name", ["trace_mine.json", "trace_eager_rank7.json.gz", "trace_x.json",
                                  "trace_graph_old.json", "trace_eager.json.gz.json"])
def test_a_run_saved_before_manifests_keeps_a_users_trace_named_like_ours(name, tmp_path):
    run = _quick_run(tmp_path).save(tmp_path / "runs" / "old")
    (run / "manifest.json").unlink()  # as an earlier version saved it
    (run / name).write_text('{"traceEvents": []}')
    _refused(lambda: check_output(run, overwrite=True), tmp_path,
             f"{name!r} is not a file this tool wrote")


def test_the_legacy_name_rule_is_the_trace_names_the_tool_writes():
    assert runfolder.is_run_file_name("trace_eager.json") and runfolder.is_run_file_name(
        "trace_compile_ro.json.gz")
    assert not runfolder.is_run_file_name("trace_mine.json")
    assert not runfolder.is_run_file_name("trace_eager_rank7.json.gz")  # no rank traces before
    assert runfolder.is_run_file_name("trace_eager_rank7.json.gz", listed=True)  # with a manifest
    assert not runfolder.is_run_file_name("trace_eager_rank07.json", listed=True)
    assert not runfolder.is_run_file_name("trace_mine_rank1.json", listed=True)


def _same_size_edit(path: Path) -> None:
    """Change one character of ``path`` into another: its size stays the same."""
    data = bytearray(path.read_bytes())
    at = next(i for i, byte in enumerate(data) if chr(byte).isdigit())
    data[at] = ord("7") if data[at] != ord("7") else ord("3")
    path.write_bytes(bytes(data))


def test_a_runs_manifest_holds_each_files_content_hash(tmp_path):
    import hashlib

    run = _quick_run(tmp_path).save(tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    assert set(manifest["sha256"]) == set(manifest["files"])
    for name, digest in manifest["sha256"].items():
        assert digest == hashlib.sha256((run / name).read_bytes()).hexdigest()


def test_a_same_size_edit_of_a_runs_table_refuses_overwrite(tmp_path):
    run = _quick_run(tmp_path).save(tmp_path / "runs" / "seed")
    second = _quick_run(tmp_path, "second")
    _same_size_edit(run / "metrics.csv")
    _refused(lambda: check_output(run, overwrite=True), tmp_path,
             "'metrics.csv' was changed after this tool wrote it")
    _refused(lambda: second.save(run, overwrite=True), tmp_path,
             "'metrics.csv' was changed after this tool wrote it")


@pytest.mark.parametrize("edited", ["points.csv", "point-000/stats.csv", "point-001/metrics.csv"])
def test_a_same_size_edit_in_a_sweep_refuses_overwrite(edited, tmp_path):
    folder = tmp_path / "s"
    SweepRunner.create(small_plan("8,16"), folder, launcher=FakeLauncher()).run()
    _same_size_edit(folder / edited)
    _refused(lambda: sweep_store.check_sweep_output(folder, overwrite=True), tmp_path,
             f"{edited!r} was changed after this tool wrote it")


def test_a_manifest_listing_a_hash_that_is_not_one_is_not_the_tools(tmp_path):
    run = _quick_run(tmp_path).save(tmp_path / "runs" / "seed")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["sha256"]["summary.json"] = 5
    (run / "manifest.json").write_text(json.dumps(manifest))
    _refused(lambda: check_output(run, overwrite=True), tmp_path,
             "'manifest.json' is not a manifest of a run")
