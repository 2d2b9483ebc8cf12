"""The figures the README and the docs quote of the bundled sample run are its own (issue 28: the
README said 6.73x and "13 steps" while the sample showed 6.29x and 12 steps). Every expected value
is read from ``dashboard/sample_run/`` as the dashboard reads it, so the checks hold for whatever
sample is there and fail, naming the sentence, when the text was not updated with it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from dashboard import analysis
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.cli import parser as cli
from profiler_core.spec.config import preset_label, preset_text
from profiler_core.storage.results import RunResult

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "dashboard" / "sample_run"
pytestmark = pytest.mark.skipif(not (SAMPLE / "summary.json").is_file(),
                                reason="dashboard/sample_run/ is not in this checkout")


@pytest.fixture(scope="module")
def sample() -> RunResult:
    return RunResult.load(SAMPLE)


def _text(name: str) -> str:
    """A page's text with its line breaks as spaces (a sentence may wrap anywhere)."""
    return re.sub(r"\s+", " ", (ROOT / name).read_text(encoding="utf-8"))


def _gpu(sample: RunResult) -> str:
    return str(sample.environment["gpu_name"]).replace("NVIDIA ", "")


def test_the_sample_is_described_as_what_it_ran(sample):
    gpu, date = _gpu(sample), str(sample.environment["started_at"])[:10]
    readme, dashboard = _text("README.md"), _text("docs/dashboard.md")
    label, dtype = preset_label(sample.config), sample.config.dtype
    assert f"bundled sample run ({label} step, {dtype}, recorded on an {gpu})" in readme
    assert f"a real run recorded with this tool on an {gpu} (`dashboard/sample_run/`)" in readme
    assert f"`dashboard/sample_run/` ({preset_text(sample.config)}, recorded on an {gpu} on {date})" \
        in dashboard
    recorded = json.loads((SAMPLE / "summary.json").read_text())["schema_version"]
    assert f"The bundled `dashboard/sample_run/` is a schema {recorded} run" in _text("docs/cli.md")


def test_the_documented_way_to_record_the_sample_records_its_settings(sample):
    """docs/dashboard.md's command and tests/gpu/session.sh's sample part run the sample's
    settings (its precision and modes among them)."""
    documented = re.search(r"To refresh it, on a GPU machine: `python -m profiler_core (run [^`]+)`",
                           _text("docs/dashboard.md")).group(1)
    session = re.search(r"sample\)\s+rm -rf [^\n]+\n\s+timeout \d+ python3 -m profiler_core (run .+?)"
                        r" --out", (ROOT / "tests/gpu/session.sh").read_text(), re.S).group(1)
    for command in (documented, session.replace("\\\n", " ")):
        argv = [a for a in shlex.split(command) if a not in ("--overwrite",)]
        if "--out" not in argv:
            argv += ["--out", "x"]
        config = cli.config_from_args(cli.parse(argv))
        assert config.to_dict() == sample.config.to_dict(), command


def test_the_readmes_predict_example_uses_the_samples_eager_time(sample):
    given = re.search(r"predict dashboard/sample_run/trace_eager\.json\.gz --eager-ms ([0-9.]+)",
                      _text("README.md")).group(1)
    assert given == f"{sample.pair.eager_ms:.2f}"


def test_the_profilers_overhead_quoted_is_the_samples(sample):
    overheads = analysis.profiler_overheads(sample.table("metrics"), sample.table("stats"),
                                            sample.table("latency")).set_index("mode")
    eager = round(float(overheads.at["eager", "overhead_pct"]))
    for page in ("docs/dashboard.md", "docs/how-it-measures.md"):
        quoted = re.findall(r"bundled sample(?: run)?, eager ran (\d+)% slower under the profiler",
                            _text(page))
        assert quoted == [str(eager)], page


def test_the_break_even_quoted_is_the_samples(sample):
    pay = analysis.pay_back(sample.figures, sample.table("modes"), "graph")
    assert f"(the bundled sample: {pay.short})" in _text("docs/dashboard.md")


def test_the_sample_traces_size_quoted_is_its_own():
    trace = load_trace(SAMPLE / "trace_eager.json.gz")
    events = trace.events
    steps = int(((events["cat"].astype(str) == "user_annotation")
                 & events["name"].astype(str).str.startswith("ProfilerStep#")).sum())
    texts = set().union(*(set(events[column].astype(str)) for column in ("name", "cat", "pid", "tid")))
    assert (f"The bundled sample's {steps} profiled steps hold {trace.entries:,} entries and "
            f"{len(texts):,} names.") in _text("docs/reliability.md")


def test_every_readme_picture_is_one_the_screenshot_script_takes():
    """docs/images/*.png come from tests/screenshots.py: one per page of the navigation, and
    the README shows each of them (docs/development.md says how to take them again)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "tests" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    taken = {f"docs/images/{name}.png" for name, *_ in script.PAGES.values()}
    shown = set(re.findall(r"!\[[^\]]*\]\((docs/images/[^)]+\.png)\)", _text("README.md")))
    app = (ROOT / "dashboard" / "app.py").read_text(encoding="utf-8")
    assert list(script.PAGES) == re.findall(r'st\.Page\("views/[^"]+", title="([^"]+)"', app)
    assert shown == taken and all((ROOT / image).is_file() for image in taken)
    assert "tests/screenshots.py" in _text("docs/development.md")
