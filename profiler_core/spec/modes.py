"""The modes a run can time, each declared once: its name, its words, its colour, where it runs.

Scope: facts only, no torch. The config's validation, the command line's help, the engine's
registries (``engine.modes``: how each mode is prepared in one process; ``engine.ddp_step``: how
it is prepared on a data-parallel rank; both refer to these by name and are checked against them
by ``per_mode`` when they are imported) and the dashboard's controls and charts all read them
from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

Entry = TypeVar("Entry")


@dataclass(frozen=True)
class ModeSpec:
    """One way of running a training step."""

    name: str  # as written in configs, tables and file names (trace_<name>.json)
    label: str  # what it is, in the words shown beside it (CLI, dashboard, tables)
    help: str  # how the help offers it ("make_graphed_callables on the model")
    short: str  # its name in running text ("torch.compile", "reduce-overhead")
    color: str  # its colour in every chart (a mid tone that reads on light and dark themes)
    cuda_only: bool  # needs a CUDA device: a CPU run skips it
    always_measured: bool = False  # timed in every run (eager, the baseline, and the article's graph)
    compiles: bool = False  # torch.compile: compiles before its first step (slow on a CPU)


MODES: tuple[ModeSpec, ...] = (  # in run order: eager (every comparison's baseline) first
    ModeSpec("eager", label="eager (the baseline)", help="eager (the baseline)", short="eager",
             color="#E4572E", cuda_only=False, always_measured=True),
    ModeSpec("graph", label="whole-step CUDA graph, manual capture (the article)",
             help="the article's whole-step graph", short="graph", color="#2E86AB",
             cuda_only=True, always_measured=True),
    ModeSpec("graphed_callables", label="torch.cuda.make_graphed_callables on the model",
             help="make_graphed_callables on the model", short="make_graphed_callables",
             color="#8C564B", cuda_only=True),
    ModeSpec("compile", label="torch.compile, no CUDA graphs",
             help="torch.compile without CUDA graphs (its own share)", short="torch.compile",
             color="#17BECF", cuda_only=False, compiles=True),
    ModeSpec("compile_ro", label='torch.compile(mode="reduce-overhead"), CUDA graph trees',
             help="torch.compile(mode='reduce-overhead')", short="reduce-overhead",
             color="#D6378A", cuda_only=True, compiles=True),
)

SPECS: dict[str, ModeSpec] = {spec.name: spec for spec in MODES}
MODE_NAMES = tuple(SPECS)
ALWAYS_MEASURED = tuple(spec.name for spec in MODES if spec.always_measured)
EXTRA_MODES = tuple(spec.name for spec in MODES if not spec.always_measured)  # added on request
CPU_MODES = tuple(spec.name for spec in MODES if not spec.cuda_only)
CUDA_ONLY_MODES = tuple(spec.name for spec in MODES if spec.cuda_only)
COMPILED_MODES = tuple(spec.name for spec in MODES if spec.compiles)
MODE_LABELS = {spec.name: spec.label for spec in MODES}


class UndeclaredModeError(LookupError):
    """A registry of per-mode code that does not match the declared modes (raised at import, so
    a mode added here without its code elsewhere stops the tool at once, naming what to add)."""


def per_mode(entries: Mapping[str, Entry], registry: str, entry: str,
             without: tuple[str, ...] = ()) -> dict[str, Entry]:
    """``entries`` (mode name -> its code) in run order, checked against ``MODES``: every declared
    mode has one but those ``without`` one by design (eager, where it is the reference), and
    nothing else does. ``registry`` names where they live ("engine/ddp_step.py's
    RANK_PREPARATION"), ``entry`` what one is ("a function RankContext -> RankMode"), for the
    error, which says what to add (or remove) there."""
    expected = [name for name in MODE_NAMES if name not in without]
    missing = [name for name in expected if name not in entries]
    if missing:
        raise UndeclaredModeError(
            f"mode {', '.join(missing)} is declared in spec/modes.py but has no entry in "
            f"{registry}: add {entry} for it there")
    undeclared = [name for name in entries if name not in SPECS]
    if undeclared:
        raise UndeclaredModeError(
            f"{registry} has an entry for {', '.join(undeclared)}, which spec/modes.py does not "
            f"declare: add its ModeSpec to MODES, or remove the entry")
    unused = [name for name in entries if name in without]
    if unused:
        raise UndeclaredModeError(f"{registry} has an entry for {', '.join(unused)}, which it "
                                  "never uses: remove it")
    return {name: entries[name] for name in expected}


def _words_or(items: list[str]) -> str:
    """'a', 'a or b', 'a, b, or c'."""
    if len(items) <= 2:
        return " or ".join(items)
    return f"{', '.join(items[:-1])}, or {items[-1]}"


def extra_modes_help() -> str:
    """The sentence offering the modes beside eager and the graph (the dashboard's help)."""
    return (f"Add {_words_or([SPECS[name].help for name in EXTRA_MODES])}; each is timed the same "
            "way, with its one-time cost.")


def extra_modes_choices() -> str:
    """The modes beside eager and the graph as the command line lists them
    ("graphed_callables (make_graphed_callables), compile (torch.compile), ...")."""
    return ", ".join(f"{name} ({SPECS[name].short})" for name in EXTRA_MODES)


def cpu_modes_note() -> str:
    """What a CPU run does with the modes: which of them run there."""
    offered = [SPECS[name].short for name in EXTRA_MODES if name in CPU_MODES]
    return (f"On the CPU only {_words_or(offered)} can run: the graph modes need a CUDA GPU and "
            "are skipped.")
