"""The unit of work a tuner sends to an executor: run one arm for one round's budget, then
score it, in the worker (so the metric of a round runs in parallel too).

Everything here is plain data and top-level functions, so it pickles to any executor.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass

import torch
from torch import Tensor

from ..executors import resolve
from ..run import Budget, DivergenceError
from .arms import Arm


class ThinnedDraws:
    """Keeps every ``thin``-th draw, at most ``2 * cap``: when full it drops every other kept
    draw and doubles ``thin``, so the kept draws stay evenly spaced over the whole segment
    whatever its length (a seconds budget does not say how many iterations will run)."""

    def __init__(self, thin: int, cap: int):
        self.thin, self.cap = int(thin), int(cap)
        self.draws: list[Tensor] = []
        self.count = 0  # iterations seen

    def add(self, theta: Tensor) -> None:
        self.count += 1
        if self.count % self.thin == 0:
            self.draws.append(theta.detach().clone())
            if len(self.draws) >= 2 * self.cap:
                self.draws = self.draws[1::2]
                self.thin *= 2

    def finish(self, theta: Tensor) -> None:
        """A segment shorter than ``thin`` iterations still yields its last draw (rather than
        nothing to score)."""
        if not self.draws and self.count > 0:
            self.draws.append(theta.detach().clone())

    def stacked(self, dim: int, like: Tensor) -> Tensor:
        """``[n, P]`` with chains pooled (draw-major within each chain)."""
        if not self.draws:
            return like.new_empty(0, dim)
        return torch.stack(self.draws, 1).reshape(-1, dim)


def evenly(x: Tensor, n: int) -> Tensor:
    """``n`` rows of ``x`` evenly spaced, last row included (all rows when ``n >= len(x)``)."""
    m = x.shape[0]
    if n >= m:
        return x
    idx = torch.linspace(m - 1, 0, n).round().long().flip(0).unique()
    return x[idx.to(x.device)]


@dataclass
class ArmTask:
    index: int
    arm: dict
    round: int
    budget: dict                 # Budget fields
    seed: int
    state: dict | None = None    # Run.state_dict() to continue from (restart="state")
    theta: Tensor | None = None  # [C, P] start (restart="position"; None: the problem's init)
    previous: Tensor | None = None  # earlier rounds' scored samples (samples="all")
    thin: int = 10
    max_samples: int = 256
    min_samples: int = 10
    metric_cost: float | None = 0.25
    warmup: int = 2
    return_samples: bool = False  # ship the samples back (samples="all" needs them next round)


def _scored_count(task: ArmTask, problem, kept: int, grad_evals: int, batch: int | None) -> int:
    """How many samples to score: all kept up to ``max_samples``, and with ``metric_cost``
    at most that fraction of the sampling work (data points processed) in score work."""
    n = min(kept, task.max_samples)
    if task.metric_cost is not None and problem.data is not None:
        processed = grad_evals * (batch or problem.num_data) * problem.num_chains
        n = min(n, max(task.min_samples, int(task.metric_cost * processed / problem.score_cost())))
    return n


def run_arm(problem_handle, metric, task: ArmTask) -> dict:
    """Run ``task.arm`` for ``task.budget`` and score its samples. Never raises for a failing
    arm: divergence or any error is returned in ``error`` with ``metric = inf``."""
    problem = resolve(problem_handle)
    arm = Arm.from_dict(task.arm)
    budget = Budget(**task.budget)
    out = {"index": task.index, "round": task.round, "label": arm.label, "iterations": 0, "grad_evals": 0,
           "seconds": 0.0, "setup_s": 0.0, "scores_s": 0.0, "metric_s": 0.0, "kept": 0, "scored": 0,
           "thin": task.thin, "metric": math.inf, "error": None, "state": None, "theta": None, "samples": None}
    t0 = time.perf_counter()
    try:
        batch = arm.batch_count(problem.num_data)

        def make_run(seed):
            return problem.run(arm, seed=seed, init=task.theta)

        if budget.seconds is not None and task.warmup and task.round == 0:
            # first calls allocate and warm caches: run them on a throwaway copy, off the clock
            # (once per arm: later rounds find the process warm)
            for _ in make_run(task.seed + 1).iterate(task.warmup):
                pass
        run = make_run(task.seed)
        if task.state is not None:
            run.load_state_dict(task.state)
        out["setup_s"] = time.perf_counter() - t0
        draws = ThinnedDraws(task.thin, task.max_samples)
        it0, ev0, s0 = run.iteration, run.grad_evals, run.elapsed
        try:
            for _, state, _ in run.iterate(budget):
                draws.add(state.theta)
        except DivergenceError as err:
            out["error"] = f"diverged: {err}"
        if out["error"] is None:
            draws.finish(run.theta)
        out.update(iterations=run.iteration - it0, grad_evals=run.grad_evals - ev0, seconds=run.elapsed - s0,
                   thin=draws.thin)
        samples = draws.stacked(problem.dim, run.theta)
        if task.previous is not None:
            samples = torch.cat([task.previous.to(samples), samples])
        out["kept"] = samples.shape[0]
        if out["error"] is None:
            out["state"] = run.state_dict()
            out["theta"] = run.theta.detach().cpu()
            n = _scored_count(task, problem, samples.shape[0], out["grad_evals"], batch)
            scored = evenly(samples, n)
            out["scored"] = scored.shape[0]
            if scored.shape[0] == 0:
                out["error"] = "no sample kept in this round's budget (raise the budget or lower thin)"
            else:
                value = metric(scored, problem)
                timing = getattr(metric, "last_timing", {}) or {}
                out["scores_s"], out["metric_s"] = float(timing.get("scores", 0.0)), float(timing.get("metric", 0.0))
                if not math.isfinite(value):
                    out["error"] = f"metric is {value}"
                else:
                    out["metric"] = float(value)
            if task.return_samples:
                out["samples"] = samples.detach().cpu()
    except Exception as err:  # an arm never stops the tuner; its error is recorded
        out["error"] = f"{type(err).__name__}: {err}"
        out["traceback"] = traceback.format_exc(limit=4)
    out["wall_s"] = time.perf_counter() - t0
    return out


__all__ = ["ArmTask", "run_arm", "ThinnedDraws", "evenly"]
