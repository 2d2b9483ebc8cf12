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
                           or line.startswith("Every strategy") or "parity" in line))
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
    assert strategies.at["compile_ro", "graphs"] >= 1
