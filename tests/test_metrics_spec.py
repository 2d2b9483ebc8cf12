"""The declared figures (``spec.metrics``) and headline facts (``spec.headline``): every name the
code asks for is declared, a misspelt one is an error, the recorded runs hold only declared names,
and docs/cli.md's list of figures is the declarations' (a new figure: its row as the failing
test prints it).
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from profiler_core.analysis import metrics
from profiler_core.analysis.figures import Figures
from profiler_core.spec import headline as facts
from profiler_core.spec import metrics as declared
from profiler_core.spec.errors import ConfigError
from profiler_core.spec.modes import MODE_NAMES
from profiler_core.storage import index, index_query, runfolder
from profiler_core.storage.results import RunResult, empty_table

ROOT = Path(__file__).resolve().parents[1]

DOC = ROOT / "docs" / "cli.md"
DOC_START = "<!-- figures: from profiler_core/spec/metrics.py (tests/test_metrics_spec.py) -->"
DOC_END = "<!-- end of figures -->"
# Every recorded run the project ships: the bundled sample, the sweeps' points, the test data.
RECORDED = sorted({path.parent for pattern in ("dashboard/**/summary.json", "tests/data/**/summary.json")
                   for path in ROOT.glob(pattern)})


def _figure_names_asked_for() -> list[tuple[str, int, str]]:
    """(file, line, metric) of every literal metric name the code of profiler_core/ and dashboard/
    asks a run's figures for: ``<...figures...>.get/has/holds(mode, "<name>")``,
    ``headline_key(mode, "<name>")``, and the figures a mode's preparation writes
    (``figures={"<name>": ...}``, ``<...>.figures["<name>"] = ...``)."""
    found = []
    for package in ("profiler_core", "dashboard"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            where = str(path.relative_to(ROOT))
            for node in ast.walk(tree):
                names: list[ast.expr] = []
                if isinstance(node, ast.Call):
                    func = node.func
                    if (isinstance(func, ast.Attribute) and func.attr in ("get", "has", "holds")
                            and "figures" in ast.unparse(func.value) and len(node.args) >= 2):
                        names.append(node.args[1])
                    if isinstance(func, ast.Name) and func.id == "headline_key" and len(node.args) == 2:
                        names.append(node.args[1])
                    for keyword in node.keywords:
                        if keyword.arg == "figures" and isinstance(keyword.value, ast.Dict):
                            names.extend(key for key in keyword.value.keys if key is not None)
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute)
                                and target.value.attr == "figures"):
                            names.append(target.slice)
                found += [(where, name.lineno, name.value) for name in names
                          if isinstance(name, ast.Constant) and isinstance(name.value, str)]
    return found


def test_every_figure_name_the_code_asks_for_is_declared():
    asked = _figure_names_asked_for()
    assert len(asked) >= 60, asked  # the scan sees the call sites (57 reads when it was written)
    undeclared = [f"{file}:{line}: {name}" for file, line, name in asked
                  if name not in declared.SPECS]
    assert not undeclared, "undeclared figure names:\n" + "\n".join(undeclared)


def test_a_misspelt_figure_is_an_error_and_a_declared_one_a_run_lacks_reads_nan():
    figures = Figures({"graph": {"capture_ms": 12.5, "speedup": math.nan}})
    with pytest.raises(declared.UndeclaredMetricError, match="did you mean capture_ms"):
        figures.get("graph", "capture_msx")
    for ask in (figures.has, figures.holds):
        with pytest.raises(declared.UndeclaredMetricError):
            ask("graph", "captur_ms")
    assert figures.get("graph", "capture_ms") == 12.5
    assert math.isnan(figures.get("compile", "capture_ms"))  # declared, this mode has none
    assert math.isnan(figures.get("eager", "warmup_ms")) and figures.get("eager", "warmup_ms", 0) == 0
    assert figures.holds("graph", "speedup") and not figures.has("graph", "speedup")
    assert not figures.holds("eager", "speedup")


def test_the_writer_refuses_an_undeclared_figure_and_an_older_run_keeps_what_it_stored():
    modes, stats = empty_table("modes"), empty_table("stats")
    with pytest.raises(declared.UndeclaredMetricError, match="declare a new figure"):
        metrics.build(modes, stats, {"graph": {"capture_time_ms": 1.0}})
    written = metrics.build(modes, stats, {"graph": {"capture_ms": 1.0}})
    assert written[["mode", "metric", "value"]].values.tolist() == [["graph", "capture_ms", 1.0]]
    older = metrics.build(modes, stats, {"graph": {"capture_time_ms": 1.0}}, from_older_run=True)
    assert older["metric"].tolist() == ["capture_time_ms"]


def test_every_timing_method_of_the_summary_is_declared_with_its_figures():
    assert declared.SHOWN_METHODS and declared.HEADLINE_METHOD in declared.STEP_METHOD_LABELS
    for spec in declared.TIMING_METHODS:
        if spec.name != declared.HEADLINE_METHOD:
            assert f"{spec.name}_median_ms" in declared.SPECS
            assert (f"{spec.name}_speedup" in declared.SPECS) == spec.has_speedup
    for spec in declared.METRICS:
        assert spec.modes and set(spec.modes) <= set(MODE_NAMES), spec
        assert spec.repeats in declared.REPEATS_WORDS and spec.ranks in declared.RANKS_WORDS, spec


@pytest.mark.parametrize("run", RECORDED, ids=lambda path: str(path.relative_to(ROOT)))
def test_the_recorded_runs_hold_only_declared_figures_and_facts(run):
    summary = runfolder.read_summary(run)
    stored = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    if summary.version >= 4:
        facts.check_written(summary.headline)  # every fact declared, of its declared type
        assert summary.headline == runfolder._from_json_safe(stored["headline"])
    else:  # an older headline also held the figures: its facts are declared too
        assert not [key for key in summary.headline if facts.fact_type(key) is None]
    for mode, metric, _ in runfolder.read_figures(run, summary).items():
        assert metric in declared.SPECS, (mode, metric)
        assert mode in declared.SPECS[metric].modes, (mode, metric)


def test_the_headline_is_checked_on_read_and_on_write(tmp_path):
    read = facts.read_facts({"timing_method": {"a": 1}, "counters_match": "yes", "parity_steps": 3,
                             "prediction_node_counts": [1, 2, "x"], "modes": ["eager", "graph"],
                             "injected_delay_ms_rank1": 2.0, "injected_delay_ms_rank2": "slow",
                             "a_fact_of_another_version": [1]})
    assert read == {"parity_steps": 3, "modes": ["eager", "graph"], "injected_delay_ms_rank1": 2.0,
                    "a_fact_of_another_version": [1]}
    with pytest.raises(facts.UndeclaredFactError, match="did you mean counters_match"):
        facts.check_written({"counters_matched": True})
    with pytest.raises(TypeError, match="parity_steps"):
        facts.check_written({"parity_steps": "three"})
    result = RunResult.load(ROOT / "dashboard" / "sample_run")
    result.headline["graph_speedup_typo"] = 1.0  # type: ignore[typeddict-unknown-key]
    with pytest.raises(facts.UndeclaredFactError):
        result.save(tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_index_takes_every_declared_figure_and_refuses_a_misspelt_one(tmp_path):
    for spec in declared.METRICS:
        for mode in spec.modes:
            assert index_query.is_figure(metrics.headline_key(mode, spec.name)), (mode, spec.name)
    assert index_query.is_figure("predicted_speedup") and index_query.is_figure("world_size")
    assert not index_query.is_figure("eager_median_msx")
    (tmp_path / "runs").mkdir()
    with index.open_index(tmp_path / "runs") as ix:
        assert ix.runs([index_query.parse_where("compile_ro_one_time_ms=1..")]) == []
        with pytest.raises(ConfigError, match="did you mean eager_median_ms"):
            ix.runs([index_query.parse_where("eager_median_msx=1..")])


def _modes_words(modes: tuple[str, ...]) -> str:
    if modes == declared.ALL_MODES:
        return "every mode"
    if modes == declared.BESIDE_EAGER:
        return "every mode but eager"
    return ", ".join(f"`{mode}`" for mode in modes)


def figures_doc() -> str:
    """docs/cli.md's list of metrics.csv's figures, from the declarations."""
    lines = [DOC_START, "| figure | unit | modes | what it is | `--repeats` | data-parallel run |",
             "|---|---|---|---|---|---|"]
    for spec in declared.METRICS:
        lines.append(f"| `{spec.name}` | {spec.unit or '-'} | {_modes_words(spec.modes)} | "
                     f"{spec.label} | {declared.REPEATS_WORDS[spec.repeats]} | "
                     f"{declared.RANKS_WORDS[spec.ranks]} |")
    return "\n".join([*lines, DOC_END])


def _doc_section(text: str) -> str:
    start, end = text.index(DOC_START), text.index(DOC_END) + len(DOC_END)
    return text[start:end]


def test_docs_cli_lists_exactly_the_declared_figures():
    text = DOC.read_text(encoding="utf-8")
    assert DOC_START in text and DOC_END in text, "docs/cli.md has no list of figures"
    assert _doc_section(text) == figures_doc(), \
        "docs/cli.md's list of figures is not the declarations'; it should read:\n" + figures_doc()
    listed = [line.split("`")[1] for line in _doc_section(text).splitlines()[3:-1]]
    assert listed == list(declared.METRIC_NAMES)


def test_the_figures_of_a_frame_are_read_whatever_their_names():
    """A run on disk may hold a figure this version does not declare (another version's): it is
    read and listed, only asking for it by name is refused."""
    table = pd.DataFrame({"mode": ["graph"], "metric": ["retired_figure_ms"], "value": [1.0]})
    figures = Figures.from_table(table)
    assert list(figures.items()) == [("graph", "retired_figure_ms", 1.0)]
    with pytest.raises(declared.UndeclaredMetricError):
        figures.get("graph", "retired_figure_ms")

