"""A process with a rank's variables but not started by torchrun (issue 27, item 4): RANK,
LOCAL_RANK and WORLD_SIZE set, as in a SLURM or torchrun shell, without the rendezvous torchrun
gives its ranks. ``run`` refuses it in one line, exit 2, instead of torch's traceback."""

from __future__ import annotations

import pytest

from profiler_core.cli.main import main
from profiler_core.spec.distributed import missing_rendezvous

RANK = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}


@pytest.mark.parametrize("given", [{}, {"MASTER_ADDR": "localhost"}, {"MASTER_PORT": "29500"},
                                   {"MASTER_ADDR": "localhost", "MASTER_PORT": "port"},
                                   {"MASTER_ADDR": "", "MASTER_PORT": "29500"},
                                   {"MASTER_ADDR": "localhost", "MASTER_PORT": "99999"}])
def test_rank_variables_without_torchruns_rendezvous_are_refused_in_one_line(given, tmp_path,
                                                                             monkeypatch, capsys):
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**RANK, **given}.items():
        monkeypatch.setenv(name, value)
    assert main(["run", "--device", "cpu", "--batch", "8", "--out", str(tmp_path / "r")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --nproc-per-node: "), lines
    assert "torchrun" in lines[0] and "MASTER_" in lines[0] and "unset RANK" in lines[0]
    assert not (tmp_path / "r").exists()


def test_torchruns_rendezvous_is_enough():
    assert missing_rendezvous({**RANK, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}) == []
    assert missing_rendezvous(RANK) == ["MASTER_ADDR", "MASTER_PORT"]
