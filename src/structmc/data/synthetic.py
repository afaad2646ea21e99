"""Synthetic data and targets of the papers. Every generator takes a ``seed`` (or a
``torch.Generator``) and draws all its randomness from one ``torch.Generator``.

* :func:`linear_regression_data` — the structured-SGMCMC paper's 3-coefficient regression:
  ``y = wᵀx + b + N(0, σ²)``, w = [1.5, −0.8, 1.3], b = 0.5, σ² = 1, 100 points. The paper
  defers the covariate distribution to a supplement we do not have; we draw x ~ N(0, I₃).
* :func:`logistic_regression_data` — the MAMBA paper's simulated logistic regression:
  d = 10, θ ~ N(0, 10 I), one u ~ U(−0.4, 0.4), Σᵢⱼ = u^|i−j|, x ~ N(0, Σ) (as Z·Lᵀ with
  L Lᵀ = Σ), y ~ Bernoulli(σ(θᵀx)); N configurable (10⁶ in the paper); the first 80 % is
  train, the rest test (the rows are i.i.d.). No intercept, no preprocessing.
* :class:`GaussianTarget` — Gaussian log densities for sampler checks, e.g.
  :func:`psgld_gaussian`, the pSGLD paper's N(0, diag(0.16, 1)) with optional gradient noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Dataset, split_sizes


def _generator(seed: int, generator: torch.Generator | None) -> torch.Generator:
    return generator if generator is not None else torch.Generator().manual_seed(int(seed))


def linear_regression_data(
    num_data: int = 100,
    *,
    seed: int = 0,
    generator: torch.Generator | None = None,
    weights=(1.5, -0.8, 1.3),
    bias: float = 0.5,
    noise_var: float = 1.0,
    num_test: int = 0,
    dtype=torch.float32,
) -> Dataset:
    """``num_data`` training points (and ``num_test`` test points) of ``y = wᵀx + b + ε``."""
    g = _generator(seed, generator)
    w = torch.tensor(weights, dtype=torch.float64)
    n = num_data + num_test
    x = torch.randn(n, len(w), generator=g, dtype=torch.float64)
    y = x @ w + bias + math.sqrt(noise_var) * torch.randn(n, generator=g, dtype=torch.float64)
    x, y = x.to(dtype), y.to(dtype)
    x_test, y_test = (x[num_data:], y[num_data:]) if num_test else (None, None)
    meta = {
        "weights": list(weights),
        "bias": bias,
        "noise_var": noise_var,
        "noise_std": math.sqrt(noise_var),
        "seed": seed,
        "covariates": "N(0, I)",
    }
    return Dataset(
        "linear-regression",
        "regression",
        x[:num_data],
        y[:num_data],
        x_test,
        y_test,
        feature_names=[f"x{i + 1}" for i in range(len(w))],
        meta=meta,
    )


def logistic_regression_data(
    num_data: int = 1_000_000,
    dim: int = 10,
    *,
    seed: int = 0,
    generator: torch.Generator | None = None,
    prior_var: float = 10.0,
    u_range: float = 0.4,
    test_fraction: float = 0.2,
    dtype=torch.float32,
) -> Dataset:
    """The MAMBA simulated logistic regression (see module docstring)."""
    g = _generator(seed, generator)
    theta = math.sqrt(prior_var) * torch.randn(dim, generator=g, dtype=torch.float64)
    u = (2 * torch.rand((), generator=g, dtype=torch.float64) - 1) * u_range
    lag = (torch.arange(dim)[:, None] - torch.arange(dim)[None, :]).abs().to(torch.float64)
    cov = torch.where(lag == 0, torch.ones_like(lag), u.expand_as(lag).pow(lag))
    chol = torch.linalg.cholesky(cov)
    x = torch.randn(num_data, dim, generator=g, dtype=torch.float64) @ chol.T
    y = torch.bernoulli(torch.sigmoid(x @ theta), generator=g)
    n_tr, _ = split_sizes(num_data, (1 - test_fraction, test_fraction))
    x, y = x.to(dtype), y.to(dtype)
    meta = {
        "theta_true": theta,
        "u": float(u),
        "cov": cov,
        "prior_var": prior_var,
        "seed": seed,
        "split": f"first {1 - test_fraction:.0%} train",
    }
    return Dataset("logistic-regression", "binary", x[:n_tr], y[:n_tr], x[n_tr:], y[n_tr:], num_classes=2, meta=meta)


# ---------------------------------------------------------------------------------------
# Gaussian targets
# ---------------------------------------------------------------------------------------
@dataclass
class GaussianTarget:
    """N(mean, cov) as a log density over a flat vector: ``log_prob(theta, batch=None)``.

    Its energy is ``LogDensityEnergy(target.log_prob, target.dim)`` (wrap it in
    :class:`~structmc.energy.NoisyGradientEnergy` for the pSGLD paper's simulated stochastic
    gradients); data sets build no energies."""

    mean: Tensor
    cov: Tensor

    def __post_init__(self):
        self.mean = torch.as_tensor(self.mean, dtype=torch.get_default_dtype()).reshape(-1)
        self.cov = torch.as_tensor(self.cov, dtype=self.mean.dtype)
        d = self.mean.numel()
        if self.cov.shape != (d, d):
            raise ValueError(f"cov must be [{d}, {d}], got {tuple(self.cov.shape)}")
        self._chol = torch.linalg.cholesky(self.cov)  # fails loudly if cov is not positive definite
        self.precision = torch.cholesky_inverse(self._chol)
        self._log_norm = -0.5 * d * math.log(2 * math.pi) - torch.log(torch.diagonal(self._chol)).sum()

    @property
    def dim(self) -> int:
        return self.mean.numel()

    def log_prob(self, theta: Tensor, batch=None) -> Tensor:
        r = theta - self.mean.to(theta)
        return -0.5 * ((r @ self.precision.to(theta)) * r).sum(-1) + self._log_norm.to(theta)

    def sample(self, n: int, *, seed: int = 0, generator: torch.Generator | None = None) -> Tensor:
        g = _generator(seed, generator)
        z = torch.randn(n, self.dim, generator=g, dtype=self.mean.dtype)
        return self.mean + z @ self._chol.T


def gaussian_target(mean, cov) -> GaussianTarget:
    return GaussianTarget(torch.as_tensor(mean), torch.as_tensor(cov))


def psgld_gaussian() -> GaussianTarget:
    """The pSGLD paper's 2-D target N(0, diag(0.16, 1)) (its Fig. 1)."""
    return GaussianTarget(torch.zeros(2), torch.diag(torch.tensor([0.16, 1.0])))


def correlated_gaussian(dim: int = 2, rho: float = 0.9, scale: float = 1.0) -> GaussianTarget:
    """Zero mean, unit-``scale`` marginals, all pairwise correlations ``rho``."""
    cov = torch.full((dim, dim), float(rho)) + (1 - float(rho)) * torch.eye(dim)
    return GaussianTarget(torch.zeros(dim), scale**2 * cov)


def random_gaussian(
    dim: int, *, condition_number: float = 100.0, seed: int = 0, generator: torch.Generator | None = None
) -> GaussianTarget:
    """Random mean N(0, I), random rotation, eigenvalues log-spaced from 1 to ``condition_number``."""
    g = _generator(seed, generator)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    eig = torch.logspace(0, math.log10(condition_number), dim, dtype=torch.float64)
    cov = (q * eig) @ q.T
    mean = torch.randn(dim, generator=g, dtype=torch.float64)
    dt = torch.get_default_dtype()
    return GaussianTarget(mean.to(dt), (0.5 * (cov + cov.T)).to(dt))
