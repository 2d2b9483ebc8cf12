"""Steps whose shapes change, on the CPU: every strategy that runs there (eager on the exact
shapes, padding to the largest and a graph per bucket run eagerly, torch.compile without
graphs) on one seeded sequence, the figures computed and read back, padding that does not change
the answer, and an own step given its shapes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from profiler_core.cli.main import main
from profiler_core.engine import shaped
from profiler_core.engine.workloads import TrainingStep
from profiler_core.spec import shapes
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ConfigError
from profiler_core.storage.results import RunResult

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--device", "cpu", "--preset", "transformer", "--dtype", "fp32", "--batch", "2",
         "--hidden", "16", "--heads", "2", "--hidden-layers", "1", "--d-out", "4",
         "--replays", "24", "--progress", "none"]


@pytest.fixture(scope="module")
def shaped_run(tmp_path_factory):
    """One CPU run of changing shapes (its compile strategy takes most of a minute), and what
    the command printed."""
    out = tmp_path_factory.mktemp("shaped") / "runs" / "shapes"
    done = subprocess.run([sys.executable, "-m", "profiler_core", "run", *SMALL, "--vary",
                           "seq_len=6,12,20:2", "--buckets", "pow2", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def test_a_cpu_run_of_changing_shapes_times_every_cpu_strategy_and_reads_back(shaped_run):
    out, printed = shaped_run
    assert "Every strategy over one sequence of 24 steps" in printed and "Verdict: " in printed
    run = RunResult.load(out)
    strategies = run.table("strategies").set_index("strategy")
    assert list(strategies.index) == list(shaped.CPU_STRATEGIES)
    assert strategies.at["eager", "speedup"] == pytest.approx(1.0)
    # pow2 buckets of 6, 12 and 20: 8, 16, 32 (the largest); padding to 32 pads more
    assert run.headline["shapes_buckets"] == "8,16,32"  # no bucket below every value
    assert strategies.at["pad_max", "padded_share"] > strategies.at["buckets", "padded_share"] > 0
    assert strategies.at["compile_dynamic", "one_time_ms"] > 0
    for name in ("pad_max", "buckets"):  # padding does not change the answer
        assert strategies.at[name, "parity_matches"] == 1.0, run.notes
    steps = run.table("shape_steps")
    assert len(steps) == len(shaped.CPU_STRATEGIES) * 24 and steps["ms"].notna().all()
    by_step = steps.groupby("step")["shape"].nunique()
    assert (by_step == 1).all()  # every strategy ran the same sequence
    assert set(steps["shape"]) <= {6, 12, 20}
    assert set(steps.loc[steps["strategy"] == "buckets", "bucket"]) <= {8, 16, 32}
    assert run.headline["shapes_verdict"] and run.pair.eager_ms > 0


def _step_loss(config: RunConfig, batch) -> torch.Tensor:
    step = TrainingStep(config, torch.device("cpu"), graphed=False)
    step.zero_grad(set_to_none=True)
    x, y, *rest = batch
    weights = rest[0] if rest else None
    key = rest[1] if len(rest) > 1 else None
    prediction = step.model(x) if key is None else step.model(x, key)
    if weights is None:
        return step.loss_fn(prediction.float(), y)
    return step.workload.masked_loss(prediction, y, weights)


@pytest.mark.parametrize("workload, vary, same", [
    ("transformer", "seq_len=5,11", True), ("transformer", "batch=3,7", True),
    ("mlp", "batch=3,7", True), ("conv", "batch=3,7", False)])
def test_a_padded_batch_gives_the_exact_batchs_loss(workload, vary, same):
    """The masked loss of a padded batch equals the loss of the exact one (the attention ignores
    padded tokens; padded rows count for nothing), so padding does not change the answer; but
    BatchNorm's batch statistics see padded rows, so for the conv workload it does (its parity
    check says so, and the verdict does not pick a padded strategy there)."""
    config = RunConfig(workload=workload, device="cpu", batch=4, hidden=16, heads=2, d_in=8,
                       d_out=4, channels=4, image_size=8, seq_len=8, hidden_layers=1,
                       dropout1=0.0, dropout2=0.0, vary=vary, buckets="16")
    plan = shaped.plan(config.replace(eager_iters=8))
    source = shaped.ShapeSource(config, plan.vary, plan.sequence, plan.top, torch.device("cpu"))
    for i in range(4):
        exact, padded = _step_loss(config, source.exact(i)), _step_loss(config, source.padded(i, 16))
        assert (padded.item() == pytest.approx(exact.item(), rel=1e-5, abs=1e-6)) is same


def test_an_own_step_is_given_its_shapes_and_the_pad_length(tmp_path):
    out = tmp_path / "own"
    assert main(["run", "--workload", "tests.own_steps:shaped", "--device", "cpu", "--replays", "16",
                 "--vary", "seq_len=uniform:3:20", "--buckets", "8,16,24", "--progress", "none",
                 "--out", str(out)]) == 0
    run = RunResult.load(out)
    strategies = run.table("strategies").set_index("strategy")
    assert {"eager", "pad_max", "buckets"} <= set(strategies.index)
    assert strategies.at["buckets", "parity_matches"] == 1.0, run.notes
    assert math.isfinite(strategies.at["buckets", "sum_ms"])


def test_the_strategies_asked_for_are_timed_and_bench_asks_for_the_bare_loops(tmp_path, capsys):
    out = tmp_path / "two"
    assert main(["run", "--workload", "tests.own_steps:shaped", "--device", "cpu", "--replays", "8",
                 "--vary", "seq_len=uniform:3:20", "--buckets", "8,16,24", "--progress", "none",
                 "--strategies", "buckets, eager", "--out", str(out)]) == 0
    run = RunResult.load(out)
    assert list(run.table("strategies")["strategy"]) == ["eager", "buckets"]
    assert run.config.strategies == "eager,buckets"
    assert "compile" not in capsys.readouterr().out.split("Every strategy")[1].split("Verdict")[0]
    from profiler_core.cli import parser as cli
    from profiler_core.cli.main import _bench_configs
    from profiler_core.orchestration.bench import BENCH_CONFIGS, SHAPED_STRATEGIES

    [config] = _bench_configs(cli.parse(["bench", "--workload", "tests.own_steps:shaped", "--vary",
                                         "seq_len=uniform:3:20"]), BENCH_CONFIGS).values()
    assert shaped.timed_strategies(config) == tuple(
        name for name in shaped.CPU_STRATEGIES if name in SHAPED_STRATEGIES.values())


def test_a_run_stopped_after_its_timing_keeps_every_strategy_timed(tmp_path, monkeypatch):
    """On an H200 a shaped run stopped in its prediction kept an empty strategies.csv: what was
    timed is in the run from the end of the timed trials on, and the verdict with it."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shaped, "parity_checks", interrupted)
    out = tmp_path / "stopped"
    assert main(["run", "--workload", "tests.own_steps:shaped", "--device", "cpu", "--replays", "8",
                 "--vary", "seq_len=uniform:3:20", "--buckets", "8,16,24", "--progress", "none",
                 "--out", str(out)]) == 130
    run = RunResult.load(out)
    assert not run.complete and any("stopped during parity" in note for note in run.notes), run.notes
    strategies = run.table("strategies").set_index("strategy")
    assert {"eager", "pad_max", "buckets"} <= set(strategies.index)
    assert strategies["sum_ms"].map(math.isfinite).all()
    assert strategies["parity_matches"].isna().all()  # never checked, not "differs"
    assert len(run.table("shape_steps")) == 8 * len(strategies)
    assert run.headline["shapes_steps"] == 8


def test_an_own_step_whose_batch_takes_no_such_keyword_says_so(tmp_path, capsys):
    assert main(["run", "--workload", "tests.own_steps:accumulating", "--device", "cpu",
                 "--replays", "8", "--vary", "seq_len=4,8", "--progress", "none",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "give batch a keyword parameter seq_len" in err and "Traceback" not in err


@pytest.mark.parametrize("changes, said", [
    ({"workload": "mlp", "vary": "seq_len=uniform:4:8"}, "the mlp workload cannot vary seq_len"),
    ({"vary": "batch=gamma:1:2"}, "unknown distribution"),
    ({"vary": "batch=4,8", "buckets": "fast"}, "buckets must be pow2, quantiles:N"),
    ({"vary": "batch=4,8", "nproc_per_node": 2}, "cannot be combined with --nproc-per-node"),
    ({"vary": "batch=4,8", "strategies": "eager,compile"}, "no strategy is called 'compile'"),
    ({"vary": "batch=4,8", "strategies": "eager,pad_max"}, "leaves out buckets"),
    ({"strategies": "eager,buckets"}, "strategies are chosen for a run of changing shapes"),
])
def test_a_bad_shape_setting_is_refused_in_one_line(changes, said):
    with pytest.raises(ConfigError, match=said):
        RunConfig(**changes)


@pytest.mark.usefixtures("fresh_app_state")
def test_every_page_reads_a_run_of_changing_shapes_and_the_shapes_page_draws_it(shaped_run):
    from streamlit.testing.v1 import AppTest

    from dashboard import state

    out, _ = shaped_run
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=90)
    at.session_state[state.RUNS_DIR] = str(out.parent)
    at.run()
    at.session_state[state.OPEN_RUN] = str(out.resolve())
    for page in ("overview", "counters", "latency", "launch_split", "gpu", "kernels", "runs",
                 "ranks", "shapes"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
    charts = {element.key: json.loads(element.proto.spec) for element in at.get("plotly_chart")}
    assert {"shapes_distribution", "shapes_times", "shapes_padded", "shapes_steps"} <= set(charts)
    lines = [shape for shape in charts["shapes_distribution"]["layout"]["shapes"]
             if shape.get("type") == "line"]
    assert sorted(round(line["x0"]) for line in lines) == [8, 16, 32]  # the buckets
    names = {trace.get("name") for trace in charts["shapes_steps"]["data"]}
    assert {"eager", "pad_max", "buckets", "compile_dynamic", "seq_len"} <= names
    assert any("pays most" in s.value or "No strategy beats eager" in s.value for s in at.success)
    # "Pays most" names a strategy only when it beats eager (a CPU run's 0.87x was shown as such)
    pays = next(m for m in at.metric if m.label == "Pays most")
    saved = RunResult.load(out)
    best = saved.headline.get("shapes_best_speedup")
    low = saved.table("strategies").set_index("strategy").at[saved.headline["shapes_best"],
                                                             "speedup_ci_low"]
    assert (pays.value == "eager") == (not shapes.beats_eager(best, low)), (pays.value, best, low)
    table = next(df.value for df in at.dataframe if "strategy" in df.value.columns)
    assert list(table["strategy"]) == list(shaped.CPU_STRATEGIES)


def test_the_verdict_names_the_least_costly_of_the_strategies_as_fast_as_the_fastest():
    """Measured on an H200: a graph per bucket in pools of their own at 3.519x, in one shared
    pool at 3.514x (interval 2.98x-4.04x) with 1 GiB less memory: the verdict names the shared
    pool and says the other measured the same within the run's interval."""
    import pandas as pd

    from profiler_core.spec import schema

    config = RunConfig(workload="transformer", vary="seq_len=lognormal:128:0.6:512")
    rows = [("eager", 1.0, math.nan, math.nan, math.nan, 0.0),
            ("pad_max", 1.95, 1.65, 2.17, 1214.0, 70.0),
            ("buckets", 3.514, 2.98, 4.04, 1576.0, 281.0),
            ("buckets_own_pools", 3.519, 2.98, 4.03, 2600.0, 286.0),
            ("compile_ro", 2.43, 2.10, 2.94, math.nan, 59787.0)]
    table = pd.DataFrame([{column: math.nan for column in schema.STRATEGY_COLUMNS}
                          | {"strategy": name, "label": shaped.LABELS[name], "speedup": speedup,
                             "speedup_ci_low": low, "speedup_ci_high": high,
                             "pool_bytes": pool * 2**20, "one_time_ms": once,
                             "break_even_steps": 40.0, "padded_share": 0.3,
                             "parity_matches": 1.0}
                          for name, speedup, low, high, pool, once in rows])
    facts = shaped.shaped_headline(config, shaped.plan(config), table)
    assert facts["shapes_best"] == "buckets"
    assert "a pool each measured 3.52x, the same within this run's interval, 1,024 MiB less " \
           "pool memory" in facts["shapes_verdict"]
    # one clearly fastest: it is named, whatever its memory
    table.loc[table["strategy"] == "buckets_own_pools", ["speedup", "speedup_ci_low"]] = [5.0, 4.5]
    facts = shaped.shaped_headline(config, shaped.plan(config), table)
    assert facts["shapes_best"] == "buckets_own_pools" and "the same within" not in facts["shapes_verdict"]


SHAPES_SAMPLE = REPO / "dashboard" / "sample_runs" / "shapes-transformer-lognormal"


@pytest.mark.skipif(not SHAPES_SAMPLE.is_dir(), reason="the bundled H200 run of changing shapes "
                                                        "is not in this checkout")
def test_the_bundled_h200_run_of_changing_shapes_opens_from_the_run_picker_on_every_page():
    """The sample measured on an H200 (the transformer, seq_len log-normal): in the sidebar's
    run picker as a bundled sample, every page opens it, and its figures hold together: each
    interval holds its speedup, the shared pool holds less than pools of their own, both
    torch.compile strategies counted their recordings, the verdict names a graph per bucket."""
    from streamlit.testing.v1 import AppTest

    from dashboard import state

    run = RunResult.load(SHAPES_SAMPLE)
    table = run.table("strategies").set_index("strategy")
    assert list(table.index) == list(shaped.STRATEGIES)
    graphed = table.drop(index="eager")
    assert ((graphed["speedup_ci_low"] <= graphed["speedup"])
            & (graphed["speedup"] <= graphed["speedup_ci_high"])).all()
    assert table.at["buckets", "pool_bytes"] < table.at["buckets_own_pools", "pool_bytes"]
    assert (table.loc[["compile_ro", "compile_dynamic"], "graphs"] >= 1).all()
    assert run.headline["shapes_best"] in ("buckets", "buckets_own_pools")
    assert run.environment["gpu_name"].startswith("NVIDIA")
    # its trials hold different shapes: their spread (21% here) is no instability to warn of
    from profiler_core.cli.main import format_summary
    from profiler_core.timing import stability

    assert stability.unstable_timing(run.table("stats"))  # what the summary would have said
    assert "Warning:" not in format_summary(run)

    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=90)
    at.run()
    key = str(SHAPES_SAMPLE.resolve())
    assert key in state.run_options()
    at.session_state[state.OPEN_RUN] = key
    for page in ("overview", "counters", "latency", "launch_split", "gpu", "kernels", "runs",
                 "ranks", "shapes"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
    assert any("Bundled sample run" in caption.value for caption in at.caption)
    assert any("pays most" in s.value for s in at.success)
