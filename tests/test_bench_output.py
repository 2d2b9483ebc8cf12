"""``bench --out`` (issue 27, items 5 and 7): checked before the benchmark runs, and written by the
rules ``run --out`` follows: a new folder, or with ``--overwrite`` one of this tool's benchmark
folders holding nothing else, unchanged; a file, a device, a link, a run folder or a folder of
the user's is refused in one line and left as it was. The benchmark itself is a stand-in here
(it needs a GPU)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from test_output_safety import _quick_run, snapshot

from profiler_core.cli.main import main
from profiler_core.storage.bench_output import BENCH_KIND, bench_files

TABLES = {"rounds": pd.DataFrame({"config": ["seed-fp32"], "eager": [1.0]}),
          "fidelity": pd.DataFrame({"config": ["seed-fp32"], "tool_over_bare": [1.01]}),
          "tool": pd.DataFrame({"config": ["seed-fp32"], "speedup": [5.5]})}


@pytest.fixture
def benchmark(monkeypatch):
    """A GPU and a benchmark that returns TABLES at once; the list of its runs."""
    import torch

    from profiler_core.orchestration import bench

    runs: list[int] = []

    def run_benchmark(rounds, configs, progress, quiet_tool):
        runs.append(rounds)
        return {name: frame.copy() for name, frame in TABLES.items()}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "run_benchmark", run_benchmark)
    return runs


def _bench(out: Path | str, *extra: str) -> int:
    return main(["bench", "--rounds", "1", "--configs", "seed-fp32", "--out", str(out), *extra])


def _what(kind: str, root: Path) -> Path:
    """An --out the benchmark may not write into."""
    target = root / "target"
    if kind == "file":
        target.write_text("mine\n")
    elif kind == "device":
        return Path("/dev/null")
    elif kind == "link":
        (root / "elsewhere").mkdir()
        target.symlink_to(root / "elsewhere")
    elif kind == "run":
        _quick_run(root).save(target)
    elif kind == "users_tables":  # a folder of the user's with a table named as the tool names it
        target.mkdir()
        (target / "bench_fidelity.csv").write_text("config,mine\nx,1\n")
    elif kind == "empty":
        target.mkdir()
    return target


@pytest.mark.parametrize("kind", ["file", "device", "link", "run", "users_tables", "empty"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_an_out_that_is_not_a_new_or_own_bench_folder_is_refused_before_the_benchmark_runs(
        kind, overwrite, tmp_path, benchmark, capsys):
    out = _what(kind, tmp_path)
    before = snapshot(tmp_path)
    assert _bench(out, *(["--overwrite"] if overwrite else [])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: --out: "), err
    assert benchmark == [], "the benchmark ran before its folder was checked"
    assert snapshot(tmp_path) == before


def test_a_new_folder_gets_the_tables_and_a_manifest_and_is_replaced_only_with_overwrite(
        tmp_path, benchmark, capsys):
    out = tmp_path / "bench"
    assert _bench(out) == 0
    assert sorted(os.listdir(out)) == ["bench_fidelity.csv", "bench_rounds.csv", "bench_tool.csv",
                                       "manifest.json"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == BENCH_KIND and set(manifest["sha256"]) == set(manifest["files"])
    assert set(bench_files(out).files) == set(os.listdir(out))
    assert _bench(out) == 2 and "already holds a benchmark" in capsys.readouterr().err
    assert _bench(out, "--overwrite") == 0 and benchmark == [1, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench"]  # nothing left aside


@pytest.mark.parametrize("change", ["extra_file", "edited_table", "linked_table"])
def test_overwrite_refuses_a_bench_folder_holding_anything_else(change, tmp_path, benchmark, capsys):
    out = tmp_path / "bench"
    assert _bench(out) == 0
    if change == "extra_file":
        (out / "notes.txt").write_text("mine")
    elif change == "edited_table":
        table = out / "bench_tool.csv"
        table.write_text(table.read_text().replace("5.5", "6.5"))  # the same size
    else:  # the table a link to a file of the user's
        (tmp_path / "precious.csv").write_text("keep\n")
        (out / "bench_tool.csv").unlink()
        (out / "bench_tool.csv").symlink_to(tmp_path / "precious.csv")
    before = snapshot(tmp_path)
    assert _bench(out, "--overwrite") == 2
    err = capsys.readouterr().err
    assert "holds a benchmark of this tool and more" in err, err
    assert snapshot(tmp_path) == before and benchmark == [1]


def test_tables_that_cannot_be_saved_in_out_are_kept_elsewhere_and_said(tmp_path, benchmark,
                                                                         monkeypatch, capsys):
    import tempfile

    from profiler_core.storage import bench_output

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    written = bench_output._write_into

    def full_disk_in_out(folder, tables):
        if tmp_path / "tmp" not in folder.parents:
            raise OSError(28, "No space left on device")
        written(folder, tables)

    monkeypatch.setattr(bench_output, "_write_into", full_disk_in_out)
    assert _bench(tmp_path / "bench") == 7
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "No space left on device" in error and "they were saved in" in error
    (kept,) = (tmp_path / "tmp").iterdir()
    assert kept.name.startswith(bench_output.UNSAVED_PREFIX) and (kept / "bench_tool.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]  # nothing left beside --out
