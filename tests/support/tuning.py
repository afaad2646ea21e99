"""A tuning problem with exact answers: Bayesian linear regression, whose SGLD chain is an
affine recursion with an exactly computable stationary law for every (step size, batch)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import structmc as sm
from support.exact import LinearRegression, sgld_recursion

NOISE_STD, PRIOR_STD = 1.0, 1.0


def linreg(N: int = 32, d: int = 2, seed: int = 0):
    """(energy, data, exact model): y = Xw + N(0, 1), w ~ N(0, I), no bias."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=torch.float64)
    w = torch.randn(d, generator=g, dtype=torch.float64)
    y = X @ w + NOISE_STD * torch.randn(N, generator=g, dtype=torch.float64)
    net = nn.Linear(d, 1, bias=False).double()
    energy = sm.ModuleEnergy(net, "gaussian", noise_std=NOISE_STD, prior_std=PRIOR_STD)
    return energy, (X, y.unsqueeze(1)), LinearRegression(X.numpy(), y.numpy(), NOISE_STD, PRIOR_STD)


def posterior_draws(model: LinearRegression, n: int, seed: int = 1) -> torch.Tensor:
    mean, cov = model.posterior()
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.multivariate_normal(mean, cov, size=n))


def w2_gaussian(m1, c1, m2, c2) -> float:
    """2-Wasserstein distance between two Gaussians."""
    from scipy.linalg import sqrtm

    s2 = sqrtm(c2)
    cross = np.real(sqrtm(s2 @ c1 @ s2))
    return float(np.sqrt(max(0.0, np.sum((m1 - m2) ** 2) + np.trace(c1 + c2 - 2 * cross))))


def exact_distance(model: LinearRegression, lr: float, batch: int | None) -> float:
    """W2 between SGLD's exact stationary law (batches drawn without replacement) and the
    posterior; inf when the recursion has no stationary second moment (it diverges)."""
    rec = sgld_recursion(model, lr, batch or model.N, batching="without_replacement")
    if rec.second_moment_contraction() >= 1:
        return float("inf")
    m, c = rec.moments()
    pm, pc = model.posterior()
    return w2_gaussian(m, c, pm, pc)


class InterruptedKSD(sm.tuning.KSD):
    """A KSD that raises KeyboardInterrupt (Ctrl-C) on its ``at``-th call: an interrupted
    tuning run (shared by the MAMBA resume tests)."""

    def __init__(self, at):
        super().__init__()
        self.calls, self.at = 0, at

    def __call__(self, samples, problem):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return super().__call__(samples, problem)
