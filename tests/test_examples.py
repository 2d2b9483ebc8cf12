"""The real-model examples (``profiler_core/examples``) on the CPU at tiny sizes: torchvision's
ResNet-50 and a transformers GPT-2, each in the whole-step form with its settings.

They need torchvision and transformers, whose PyPI wheels want a CUDA build of torch: CI runs
this file in an environment of its own (``bash .ci/setup --examples``, ``.venv-examples``), with
``EXAMPLES_REQUIRED=1`` so that a missing library fails instead of skipping. Where a library is
missing, the example says in one line how to install it (tested here too).
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from profiler_core.cli.main import main
from profiler_core.storage.results import RunResult

CPU = ["--device", "cpu", "--replays", "4", "--progress", "none"]
RESNET = "profiler_core.examples.resnet50_step:build"
CAUSAL_LM = "profiler_core.examples.causal_lm_step:build"
TINY = {
    RESNET: ["batch=2", "image_size=64", "classes=10", "clip=1.0"],
    CAUSAL_LM: ["batch=2", "seq_len=16", "layers=2", "width=64", "heads=2", "vocab=128",
                "bf16=on"],
}
LIBRARY = {RESNET: "torchvision", CAUSAL_LM: "transformers"}


def _have(library: str) -> bool:
    return importlib.util.find_spec(library) is not None


def _require(library: str) -> None:
    if not _have(library):
        if os.environ.get("EXAMPLES_REQUIRED") == "1":
            pytest.fail(f"{library} is not installed, and EXAMPLES_REQUIRED=1 (CI) needs it")
        pytest.skip(f"{library} is not installed here (bash .ci/setup --examples makes an "
                    "environment with it)")


def _settings(spec: str) -> list[str]:
    return [part for setting in TINY[spec] for part in ("--workload-arg", setting)]


@pytest.mark.parametrize("spec", [RESNET, CAUSAL_LM])
def test_the_example_runs_its_whole_step_on_the_cpu(spec, tmp_path, capsys):
    _require(LIBRARY[spec])
    out = tmp_path / "run"
    assert main(["run", "--workload", spec, *_settings(spec), "--out", str(out), *CPU]) == 0
    printed = capsys.readouterr()
    assert "capture readiness" not in printed.err, printed.err  # nothing would break capture
    run = RunResult.load(out)
    assert run.headline["counters_match"] is True and run.pair.eager_ms > 0
    assert run.headline["readiness_findings"] == 0
    settings = run.config.settings
    assert settings["batch"] == 2 and isinstance(settings["batch"], int)
    assert "numerics" in run.environment


@pytest.mark.parametrize("spec", [RESNET, CAUSAL_LM])
def test_a_missing_library_is_one_line_saying_how_to_install_it(spec, tmp_path, capsys):
    if _have(LIBRARY[spec]):
        pytest.skip(f"{LIBRARY[spec]} is installed here")
    assert main(["run", "--workload", spec, "--out", str(tmp_path / "run"), *CPU]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"this example needs {LIBRARY[spec]}: pip install {LIBRARY[spec]}" in err
    assert f"install {LIBRARY[spec]} in this Python environment" in err


def test_the_causal_lm_examples_lengths_can_vary_and_padding_keeps_its_loss(tmp_path):
    """A GPT-style own step over lengths from a file (as from a user's dataset): every CPU
    strategy runs, and a graph per bucket's padding matches eager on the exact lengths."""
    _require("transformers")
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("5\n9\n12\n16\n7\n")
    out = tmp_path / "run"
    settings = [part for setting in TINY[CAUSAL_LM] if not setting.startswith("bf16")
                for part in ("--workload-arg", setting)]
    assert main(["run", "--workload", CAUSAL_LM, *settings, "--workload-arg", "positions=32",
                 "--vary", f"seq_len=file:{lengths}", "--buckets", "8,16", "--out", str(out),
                 *CPU, "--replays", "6", "--parity-steps", "3"]) == 0
    run = RunResult.load(out)
    strategies = run.table("strategies").set_index("strategy")
    assert {"eager", "pad_max", "buckets"} <= set(strategies.index)
    assert strategies.at["buckets", "parity_matches"] == 1.0, run.notes
    assert strategies.at["pad_max", "padded_share"] > strategies.at["buckets", "padded_share"] > 0
