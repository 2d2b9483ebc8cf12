"""Numerical parity: does each mode train to the parameters eager trains to, as closely as eager
matches itself?

Every replica is built from the run's seed and trained on the same batches for the same steps:
two eager replicas (the reference and a control) and one per mode. Eager against eager is the
step's own run-to-run difference (cuDNN's nondeterministic kernels, atomics in backward; 0 for a
deterministic step); a mode whose difference from eager stays within it (``NOISE_FACTOR`` times
it, plus rounding of ``FLOOR_RELATIVE`` of the largest parameter) matches, one beyond it changed
the numerics, and the worst parameter is named. The random generators are seeded afresh before
every iteration of every replica, so dropout draws the same masks in eager and in a graph's
replay (which reads the generator's state at each replay); the built-in workloads' dropout is
off here too. ``torch.compile`` draws its masks from a random stream of its own, and
graphed_callables' own warm-up draws from the generator, so with dropout those two differ by it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from profiler_core.engine.batches import Batch
from profiler_core.engine.modes import (
    PREPARE_ITERS,
    new_graphed_step,
    prepare_compiled,
    prepare_graphed_callables,
)
from profiler_core.engine.workloads import TrainingStep
from profiler_core.spec.config import RunConfig, is_user_spec
from profiler_core.spec.modes import per_mode

# A mode matches eager when its largest parameter difference is at most NOISE_FACTOR times
# eager's against itself, plus FLOOR_RELATIVE of the largest parameter (rounding of a few steps).
NOISE_FACTOR = 2.0
FLOOR_RELATIVE = 1e-6
_RESEED_BASE = 1_000_003  # seeds of the compared iterations: base + iteration (apart from the run's)
# What changes the numerics in each mode, for the verdict.
CHANGED_BY = {"graph": "capture", "graphed_callables": "capture", "compile": "compilation",
              "compile_ro": "compilation", "pad_max": "padding or capture",
              "buckets": "padding or capture", "buckets_own_pools": "padding or capture",
              "compile_dynamic": "compilation"}


@dataclass(frozen=True)
class ParityCheck:
    """One mode against eager after ``steps`` training steps."""

    mode: str
    steps: int
    max_abs_diff: float  # largest |parameter difference|, mode against the eager reference
    max_rel_diff: float  # the same over the largest |parameter| (NaN when every parameter is 0)
    noise_abs_diff: float  # largest |difference| of a second eager replica against the reference
    worst_parameter: str  # the parameter with the largest difference ("" when none differs)
    scale: float  # largest |parameter| of the reference
    floor_relative: float = FLOOR_RELATIVE  # what counts as rounding, of ``scale``
    noise_label: str = "eager against a second eager replica"  # what ``noise_abs_diff`` compares
    within: str = "as closely as eager matches itself"  # the verdict's words for "within noise"

    @property
    def matches(self) -> bool:
        return judge(self.max_abs_diff, self.noise_abs_diff, self.scale, self.floor_relative)

    def verdict(self) -> str:
        """One sentence: matches as closely as eager matches itself, or differs beyond it."""
        figures = (f"largest parameter difference {self.max_abs_diff:.3g} after {self.steps} steps; "
                   f"{self.noise_label}: {self.noise_abs_diff:.3g}")
        if self.matches:
            return f"{self.mode} matches eager {self.within} ({figures})"
        cause = CHANGED_BY.get(self.mode, "the mode")
        return (f"{self.mode} differs from eager beyond eager's own run-to-run difference: {cause} "
                f"changed the numerics (worst parameter {self.worst_parameter}; {figures})")

    def headline(self) -> dict[str, object]:
        """The graph's check as the headline's facts (the other modes' go to metrics.csv)."""
        return {"parity_steps": self.steps, "parity_max_abs_diff": self.max_abs_diff,
                "parity_max_rel_diff": self.max_rel_diff,
                "parity_noise_abs_diff": self.noise_abs_diff, "parity_matches": self.matches,
                "parity_worst_parameter": self.worst_parameter, "parity_verdict": self.verdict()}

    def figures(self) -> dict[str, float]:
        """The check as metrics.csv figures of its mode (1.0/0.0 for whether it matches)."""
        return {"parity_steps": float(self.steps), "parity_max_abs_diff": self.max_abs_diff,
                "parity_max_rel_diff": self.max_rel_diff,
                "parity_noise_abs_diff": self.noise_abs_diff,
                "parity_matches": 1.0 if self.matches else 0.0}


def judge(max_abs_diff: float, noise_abs_diff: float, scale: float,
          floor_relative: float = FLOOR_RELATIVE) -> bool:
    """Whether a difference is within eager's own (``NOISE_FACTOR`` times it, plus the floor)."""
    if not (math.isfinite(max_abs_diff) and math.isfinite(noise_abs_diff)):
        return False
    floor = floor_relative * scale if math.isfinite(scale) else 0.0
    return max_abs_diff <= NOISE_FACTOR * noise_abs_diff + floor


def _reseed(iteration: int) -> None:
    torch.manual_seed(_RESEED_BASE + iteration)  # every device's default generator


def _difference(reference: TrainingStep, candidate: TrainingStep) -> tuple[float, str]:
    """(largest |difference| of a parameter, its name) between two replicas of one step."""
    worst, name = 0.0, ""
    for (label, mine), (_, theirs) in zip(reference.named_parameters(),
                                          candidate.named_parameters()):
        difference = float((mine.detach().float() - theirs.detach().float()).abs().max())
        if not math.isfinite(difference):
            return math.inf, label
        if difference > worst:
            worst, name = difference, label
    return worst, name


def _scale(step: TrainingStep) -> float:
    values = [float(p.detach().abs().max()) for _, p in step.named_parameters() if p.numel()]
    return max(values, default=0.0)


class _Candidate:
    """A replica of one mode, prepared, and how it runs one iteration (one replay of
    ``steps_per_iteration`` steps for the graph, one step otherwise)."""

    def __init__(self, step: TrainingStep, run: Callable[[int], None], steps_per_iteration: int,
                 pre_steps: int, graphed_optimizer: bool) -> None:
        self.step, self.run = step, run
        self.steps_per_iteration, self.pre_steps = steps_per_iteration, pre_steps
        self.graphed_optimizer = graphed_optimizer


def _graph_candidate(config: RunConfig, device: torch.device, batches: list[Batch]) -> _Candidate:
    graphed = new_graphed_step(config, device, batches)
    for i in range(config.warmup_iters):  # the article's side-stream warm-up, reseeded as eager is
        _reseed(-1 - i)
        graphed.warm_up([batches[i % len(batches)]], count=False)
    graphed.capture(config.capture_iters, 0.0)

    def replay(i: int) -> None:
        graphed.load(*batches[i % len(batches)])
        graphed.replay()
    return _Candidate(graphed.step, replay, config.capture_iters, config.warmup_iters, True)


def _step_candidate(step: TrainingStep, batches: list[Batch], pre_steps: int) -> _Candidate:
    """A mode that trains by calling its step (its model graphed or compiled), one step an
    iteration, after ``pre_steps`` steps of preparation."""
    return _Candidate(step, lambda i: step.eager_step(*batches[i % len(batches)], count=False),
                      1, pre_steps, False)


def _graphed_callables_candidate(config: RunConfig, device: torch.device,
                                 batches: list[Batch]) -> _Candidate:
    step = prepare_graphed_callables(config, device, batches).step
    # graphed_callables of a whole step runs one more step to see how the step calls its model
    return _step_candidate(step, batches, PREPARE_ITERS + (1 if step.whole_step else 0))


def _compiled_candidate(config: RunConfig, device: torch.device, batches: list[Batch],
                        reduce_overhead: bool) -> _Candidate:
    step = prepare_compiled(config, device, batches, reduce_overhead=reduce_overhead).step
    return _step_candidate(step, batches, PREPARE_ITERS)


# How each declared mode but eager (the reference) is prepared for the check; a mode declared in
# ``spec.modes`` without an entry here stops the import with an error saying what to add.
CANDIDATES: dict[str, Callable[[RunConfig, torch.device, list[Batch]], _Candidate]] = per_mode({
    "graph": _graph_candidate,
    "graphed_callables": _graphed_callables_candidate,
    "compile": partial(_compiled_candidate, reduce_overhead=False),
    "compile_ro": partial(_compiled_candidate, reduce_overhead=True),
}, "engine/parity.py's CANDIDATES", "a function (config, device, batches) -> _Candidate",
    without=("eager",))


def _eager_reference(config: RunConfig, device: torch.device, batches: list[Batch],
                     candidate: _Candidate, iterations: int) -> TrainingStep:
    """An eager replica trained as ``candidate`` was: its pre-steps, then ``iterations`` of the
    candidate's iterations, reseeded at the same points."""
    step = TrainingStep(config, device, graphed=candidate.graphed_optimizer)
    for i in range(candidate.pre_steps):
        _reseed(-1 - i)
        step.eager_step(*batches[i % len(batches)], count=False)
    for iteration in range(iterations):
        _reseed(iteration)
        batch = batches[iteration % len(batches)]
        for _ in range(candidate.steps_per_iteration):
            step.eager_step(*batch, count=False)
    return step


def check_modes(config: RunConfig, device: torch.device, batches: list[Batch],
                modes: tuple[str, ...]) -> list[ParityCheck]:
    """Each of ``modes`` (not eager) against eager after ``config.parity_steps`` iterations, with
    eager's own difference beside it; the built-in workloads with dropout off."""
    quiet = config if is_user_spec(config.workload) else config.replace(dropout1=0.0, dropout2=0.0)
    checks = []
    for mode in modes:
        candidate = CANDIDATES[mode](quiet, device, batches)
        iterations = quiet.parity_steps
        for iteration in range(iterations):
            _reseed(iteration)
            candidate.run(iteration)
        reference = _eager_reference(quiet, device, batches, candidate, iterations)
        control = _eager_reference(quiet, device, batches, candidate, iterations)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        difference, worst = _difference(reference, candidate.step)
        noise, _ = _difference(reference, control)
        scale = _scale(reference)
        checks.append(ParityCheck(mode, iterations * candidate.steps_per_iteration, difference,
                                  difference / scale if scale > 0 else math.nan, noise, worst, scale))
        del candidate, reference, control
    return checks
