"""The unit of work a tuner sends to an executor: run one arm for one round's budget, then
score it, in the worker (so the metric of a round runs in parallel too).

Everything here is typed records (:mod:`structmc.tuning.records`) and top-level functions, so
it pickles to any executor.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass

import torch
from torch import Tensor

from ..executors import resolve
from ..recorders import ThinningKeeper
from ..run import Budget, DivergenceError
from .arms import Arm
from .records import ArmCarry, ArmResult, ArmTimings, TuningSettings

ThinnedDraws = ThinningKeeper  # its name when it lived here


def evenly(x: Tensor, n: int) -> Tensor:
    """``n`` rows of ``x`` evenly spaced, last row included (all rows when ``n >= len(x)``)."""
    m = x.shape[0]
    if n >= m:
        return x
    idx = torch.linspace(m - 1, 0, n).round().long().flip(0).unique()
    return x[idx.to(x.device)]


@dataclass(frozen=True)
class ArmTask:
    """Run ``arm`` for ``budget`` in round ``round`` from ``start`` (the state, position or
    earlier samples it carries, see :meth:`ArmCarry.start`), seeded ``seed``, under ``settings``
    (thinning, scoring, metric, warm-up). Pickles: the settings travel without the executor."""

    index: int
    arm: Arm
    round: int
    budget: Budget
    seed: int
    settings: TuningSettings
    start: ArmCarry = ArmCarry()


def _scored_count(settings: TuningSettings, problem, kept: int, grad_evals: int, batch: int | None) -> int:
    """How many samples to score: all kept up to ``max_samples``, and with ``metric_cost``
    at most that fraction of the sampling work (data points processed) in score work."""
    n = min(kept, settings.max_samples)
    if settings.metric_cost is not None and problem.data is not None:
        processed = grad_evals * (batch or problem.num_data) * problem.num_chains
        n = min(n, max(settings.min_samples, int(settings.metric_cost * processed / problem.score_cost())))
    return n


def run_arm(problem_handle, task: ArmTask) -> ArmResult:
    """Run ``task.arm`` for ``task.budget`` and score its samples. Never raises for a failing
    arm: divergence or any error is returned in ``error`` with ``metric = inf``."""
    problem = resolve(problem_handle)
    arm, s = task.arm, task.settings
    metric = s.metric
    iterations = grad_evals = kept = scored = 0
    seconds = setup_s = scores_s = metric_s = 0.0
    thin, value, error, trace = s.thin, math.inf, None, None
    state = theta = samples = None
    t0 = time.perf_counter()
    try:
        batch = arm.batch_count(problem.num_data)

        def make_run(seed):
            return problem.run(arm, seed=seed, init=task.start.theta)

        if task.budget.seconds is not None and s.warmup and task.round == 0:
            # first calls allocate and warm caches: run them on a throwaway copy, off the clock
            # (once per arm: later rounds find the process warm)
            for _ in make_run(task.seed + 1).iterate(s.warmup):
                pass
        run = make_run(task.seed)
        if task.start.state is not None:
            run.load_state_dict(task.start.state)
        setup_s = time.perf_counter() - t0
        draws = ThinningKeeper(s.thin, s.max_samples)
        it0, ev0, s0 = run.iteration, run.grad_evals, run.elapsed
        try:
            for _, step, _ in run.iterate(task.budget):
                draws.add(step.theta)
        except DivergenceError as err:
            error = f"diverged: {err}"
        if error is None:
            draws.finish(run.theta)
        iterations, grad_evals, seconds = run.iteration - it0, run.grad_evals - ev0, run.elapsed - s0
        thin = draws.thin
        new = draws.stacked(problem.dim, run.theta)
        if task.start.samples is not None:
            new = torch.cat([task.start.samples.to(new), new])
        kept = new.shape[0]
        if error is None:
            state, theta = run.state_dict(), run.theta.detach().cpu()
            chosen = evenly(new, _scored_count(s, problem, new.shape[0], grad_evals, batch))
            scored = chosen.shape[0]
            if scored == 0:
                error = "no sample kept in this round's budget (raise the budget or lower thin)"
            else:
                v = metric(chosen, problem)
                timing = getattr(metric, "last_timing", {}) or {}
                scores_s, metric_s = float(timing.get("scores", 0.0)), float(timing.get("metric", 0.0))
                if not math.isfinite(v):
                    error = f"metric is {v}"
                else:
                    value = float(v)
            if s.samples == "all":  # ship the samples back: the next round scores them again
                samples = new.detach().cpu()
    except Exception as err:  # an arm never stops the tuner; its error is recorded
        error = f"{type(err).__name__}: {err}"
        trace = traceback.format_exc(limit=4)
    timings = ArmTimings(setup_s, scores_s, metric_s, time.perf_counter() - t0)
    return ArmResult(
        task.index,
        task.round,
        arm.label,
        iterations,
        grad_evals,
        seconds,
        timings,
        kept,
        scored,
        thin,
        value,
        error,
        trace,
        ArmCarry(state, theta, samples),
    )


__all__ = ["ArmTask", "run_arm", "ThinnedDraws", "evenly", "ArmResult", "ArmCarry"]
