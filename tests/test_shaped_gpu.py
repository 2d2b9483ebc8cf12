"""Steps whose shapes change, on a GPU: the transformer's sequence length drawn log-normally,
every strategy timed; a graph per bucket beats eager and padding to the largest pads more; the
graphs in one shared pool hold no more memory than in pools of their own; padding keeps the
answer; each graph strategy is predicted before capture. Figures are printed for the notes."""

from __future__ import annotations

import pytest
import torch

from profiler_core.cli.main import main
from profiler_core.engine import shaped
from profiler_core.storage.results import RunResult

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="needs a CUDA GPU")]


def test_every_strategy_on_a_lognormal_sequence_of_lengths(tmp_path, capsys):
    out = tmp_path / "shapes"
    assert main(["run", "--preset", "transformer", "--vary", "seq_len=lognormal:128:0.6:512",
                 "--buckets", "pow2", "--replays", "300", "--progress", "none", "--no-nvml",
                 "--out", str(out)]) == 0
    print("\n" + "\n".join(line for line in capsys.readouterr().out.splitlines()
                           if line.strip().startswith(shaped.STRATEGIES) or "Verdict" in line
                           or line.startswith("Every strategy") or "parity" in line
                           or "compile" in line or "rehears" in line))
    run = RunResult.load(out)
    strategies = run.table("strategies").set_index("strategy")
    assert list(strategies.index) == list(shaped.STRATEGIES)
    assert strategies.at["buckets", "speedup"] > 1.0
    assert strategies.at["pad_max", "padded_share"] > strategies.at["buckets", "padded_share"]
    assert strategies.at["buckets", "pool_bytes"] <= strategies.at["buckets_own_pools", "pool_bytes"]
    for name in shaped.PADDED:
        assert strategies.at[name, "parity_matches"] == 1.0, run.notes
    predicted = strategies.loc[list(shaped.GRAPHED), "predicted_speedup"]
    measured = strategies.loc[list(shaped.GRAPHED), "speedup"]
    print("predicted / measured:", (predicted / measured).round(3).to_dict())
    assert ((predicted / measured - 1).abs() < 0.25).all()
    assert strategies.at["compile_ro", "graphs"] >= 1, run.notes
    # the untimed rehearsal before the graph strategies: the same captures cost about the same
    # whichever strategy makes them first
    shared, own = (strategies.at[name, "one_time_ms"] for name in ("buckets", "buckets_own_pools"))
    assert 1 / 3 < shared / own < 3


def test_the_bare_loop_pads_an_own_step_over_the_tools_sequence(tmp_path):
    """bench's bare loop over a sequence of shapes (``bare_loop.py --sequence``): the user's
    step eager on the exact shapes, one graph at the largest bucket and a graph per bucket,
    each a time per step; a tiny launch-bound step, so the graphs are faster than eager."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from profiler_core.cli import parser as cli
    from profiler_core.orchestration import bench

    config = cli.config_from_args(cli.parse(
        ["run", "--preset", "seed", "--workload", "tests.own_steps:shaped", "--replays", "60",
         "--vary", "seq_len=uniform:3:40", "--buckets", "pow2", "--out", "x"]))
    argv = bench.shaped_bare_options(config, tmp_path / "sequence.txt")
    done = subprocess.run([sys.executable, str(bench.BARE_LOOP), *argv], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(figures)
    assert all(figures[f"{name}_ms"] > 0 for name in ("eager", "pad_max", "buckets"))
    assert figures["buckets_ms"] < figures["eager_ms"]
