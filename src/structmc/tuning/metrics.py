"""Metrics a tuner ranks arms by (lower is better): KSD, FSSD, or any function of the samples.

A metric is called in the worker that ran the arm, as ``metric(samples, problem)`` with the
arm's thinned samples ``[n, P]`` (chains pooled) and the :class:`~structmc.tuning.Problem`,
and returns a float. :class:`KSD` and :class:`FSSD` compute full-data scores with
``problem.scores`` (one batched evaluation) and split their time into ``last_timing``
(``scores``, ``metric`` seconds). A plain callable is wrapped by :func:`as_metric`.

Ranking on FSSD: the reference code ranks arms on the unbiased U-statistic FSSD², which is
negative for good samples (it estimates a non-negative quantity with zero-mean noise), so its
tuner prefers the *most negative* estimate — noise, not quality. We rank on the V-statistic
``Σ_j ‖Σ_i ξ_ij‖² / (d J n²)``, which is ≥ 0 (biased upward by ``E‖ξ‖²/(dJn)``, like the
V-statistic KSD the paper uses), at test locations optimised on the same samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor

from ..diagnostics.stein import fssd, fssd_optimize, ksd
from ..fingerprint import recorded_name


class KSD:
    """Kernel Stein discrepancy, IMQ kernel ``(c² + ‖r‖²)^β`` (c = 1, β = −½), V-statistic
    ``√(ΣΣ k0)/n`` as in the paper and its code (:func:`structmc.diagnostics.ksd`)."""

    name = "ksd"

    def __init__(self, c: float = 1.0, beta: float = -0.5, statistic: str = "v"):
        self.c, self.beta, self.statistic = float(c), float(beta), statistic
        self.last_timing: dict[str, float] = {}

    def __call__(self, samples: Tensor, problem) -> float:
        t0 = time.perf_counter()
        scores = problem.scores(samples)
        t1 = time.perf_counter()
        value = float(ksd(samples, scores, c=self.c, beta=self.beta, statistic=self.statistic))
        self.last_timing = {"scores": t1 - t0, "metric": time.perf_counter() - t1}
        return value

    def config(self) -> dict:
        return {"name": self.name, "c": self.c, "beta": self.beta, "statistic": self.statistic}


class FSSD:
    """Finite-set Stein discrepancy with ``num_locations`` test locations optimised for
    ``steps`` Adam steps on FSSD² (the paper's FSSD-opt); ranked on the V-statistic FSSD²
    (≥ 0, see the module docstring). Initial locations: ``init="samples"`` (default) J
    distinct samples, seeded; ``"gaussian"`` draws from a Gaussian fitted to the samples (the
    paper's). A heavy-tailed cloud (a chain blowing up: median |θ| 260, max 5.6e9) puts the
    fitted Gaussian's draws where no sample is, every kernel value underflows to 0 and FSSD is
    exactly 0 (its gradient too, so Adam cannot move them): the worst arm would rank best.
    Locations at samples always see their own sample. Gaussian kernel with the median-heuristic bandwidth by default (Jitkrittum et
    al. 2017): the paper's IMQ kernel with length scale 1 (``kernel="imq"``) vanishes for
    samples spread far beyond 1, so a chain that wanders off scores as *better* (measured on
    the paper's logistic regression: h = 0.1 spread to 883 scored 0.37 against 1,359 for a
    good chain; with the Gaussian kernel 1.4e5 against 711)."""

    name = "fssd"

    def __init__(
        self,
        num_locations: int = 10,
        steps: int = 100,
        kernel: str = "gauss",
        lr: float | None = None,
        seed: int = 0,
        init: str = "samples",
    ):
        if int(num_locations) < 1 or int(steps) < 0:
            raise ValueError("FSSD needs num_locations >= 1 and steps >= 0")
        if init not in ("samples", "gaussian"):
            raise ValueError(f"FSSD init must be 'samples' or 'gaussian', got {init!r}")
        self.num_locations, self.steps, self.kernel, self.lr, self.seed = (
            int(num_locations),
            int(steps),
            kernel,
            lr,
            int(seed),
        )
        self.init = init
        self.last_timing: dict[str, float] = {}

    def __call__(self, samples: Tensor, problem) -> float:
        t0 = time.perf_counter()
        scores = problem.scores(samples)
        t1 = time.perf_counter()
        if samples.shape[0] < 2:
            # one sample: no fit and no U-statistic to optimise, but the V-statistic at the
            # sample itself is defined (‖∇log π‖²/d, as KSD's V-statistic of one sample is ‖∇log π‖)
            loc = samples[:1].expand(self.num_locations, -1)
            value = float(fssd(samples, scores, loc, kernel=self.kernel, statistic="v"))
        else:
            g = torch.Generator(device=samples.device).manual_seed(self.seed)
            locations = None
            if self.init == "samples":  # J distinct samples (J > n: with repeats)
                J, n = self.num_locations, samples.shape[0]
                pick = torch.randperm(n, generator=g, device=samples.device)[:J]
                if J > n:
                    pick = pick[torch.arange(J, device=samples.device) % n]
                locations = samples[pick].detach().clone()
            with torch.enable_grad():
                res = fssd_optimize(
                    samples,
                    scores,
                    self.num_locations,
                    kernel=self.kernel,
                    steps=self.steps,
                    lr=self.lr,
                    generator=g,
                    locations=locations,
                )
            value = float(
                fssd(samples, scores, res.locations, kernel=self.kernel, bandwidth=res.bandwidth, statistic="v")
            )
        self.last_timing = {"scores": t1 - t0, "metric": time.perf_counter() - t1}
        return value

    def config(self) -> dict:
        return {
            "name": self.name,
            "num_locations": self.num_locations,
            "steps": self.steps,
            "kernel": self.kernel,
            "lr": self.lr,
            "seed": self.seed,
            "init": self.init,
        }


class FunctionMetric:
    """A user function ``fn(samples [n, P], problem) -> float`` (lower is better), e.g. the
    validation negative log predictive density or the ECE on ``problem.validation``."""

    def __init__(self, fn: Callable[[Tensor, object], float], name: str | None = None):
        if not callable(fn):
            raise TypeError(f"a metric must be callable, got {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "metric")
        self.last_timing: dict[str, float] = {}

    def __call__(self, samples: Tensor, problem) -> float:
        t0 = time.perf_counter()
        value = float(self.fn(samples, problem))
        self.last_timing = {"scores": 0.0, "metric": time.perf_counter() - t0}
        return value

    def config(self) -> dict:
        return {
            "name": self.name,
            # as folders record it: a function of a package that moved under its former name
            # (structmc_papers' as structmc.experiments': issue 38), so older tunings resume
            "function": recorded_name(f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', '?')}"),
        }


METRICS = {"ksd": KSD, "fssd": FSSD}


def as_metric(metric) -> KSD | FSSD | FunctionMetric:
    """``"ksd"`` (default), ``"fssd"``, a metric object, or a callable."""
    if metric is None:
        return KSD()
    if isinstance(metric, str):
        if metric.lower() not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose from {sorted(METRICS)} or pass a callable")
        return METRICS[metric.lower()]()
    if isinstance(metric, (KSD, FSSD, FunctionMetric)):
        return metric
    if callable(metric) and hasattr(metric, "config") and hasattr(metric, "name"):
        return metric
    return FunctionMetric(metric)


__all__ = ["KSD", "FSSD", "FunctionMetric", "as_metric", "METRICS"]
