"""Shared fixtures: AR(1) chains with known autocorrelation time, references, Agg backend."""

import math

import pytest
import torch

try:  # plots are written with the non-interactive Agg backend
    import matplotlib

    matplotlib.use("Agg")
except ImportError:  # pragma: no cover - matplotlib is in the test extra
    pass


def ar1(C: int, D: int, P: int, phi: float | torch.Tensor, seed: int, dtype=torch.float64) -> torch.Tensor:
    """``[C, D, P]`` stationary Gaussian AR(1) chains x_t = φ x_{t-1} + ε_t, Var ε = 1.

    τ = (1 + φ)/(1 − φ); marginal variance 1/(1 − φ²); the start is drawn from the
    stationary law so there is no burn-in bias.
    """
    g = torch.Generator().manual_seed(seed)
    phi = torch.as_tensor(phi, dtype=dtype)
    e = torch.randn(C, D, P, generator=g, dtype=dtype)
    x = torch.empty_like(e)
    x[:, 0] = e[:, 0] / torch.sqrt(1 - phi**2)
    for t in range(1, D):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


@pytest.fixture(scope="session")
def ar1_long():
    """4 chains x 5,000 draws x 256 independent AR(1) series with φ = 0.5 (τ = 3)."""
    return ar1(4, 5000, 256, 0.5, seed=20240601)


@pytest.fixture(scope="session")
def mixed_bag():
    """Awkward columns for exact comparisons with reference implementations: odd D, ties,
    heavy tails, a constant, a shifted chain, a chain with a different scale, AR(1)s."""
    C, D = 4, 301
    phis = torch.tensor([0.0, 0.3, 0.6, 0.9, 0.97, -0.4])
    x = ar1(C, D, len(phis), phis, seed=7)
    g = torch.Generator().manual_seed(8)
    extra = torch.empty(C, D, 5, dtype=torch.float64)
    extra[..., 0] = torch.round(2 * x[..., 1])  # many ties
    extra[..., 1] = torch.tan(math.pi * (torch.rand(C, D, generator=g, dtype=torch.float64) - 0.5))  # Cauchy
    extra[..., 2] = x[..., 2] + torch.tensor([0.0, 0.0, 0.0, 1.5]).view(C, 1)  # one shifted chain
    extra[..., 3] = x[..., 0] * torch.tensor([1.0, 1.0, 1.0, 4.0]).view(C, 1)  # one wide chain
    extra[..., 4] = 2.5  # constant
    return torch.cat([x, extra], dim=-1)


@pytest.fixture(autouse=True)
def _one_thread():
    """Run these tests on one intra-op thread: most tensors here are small, and on a busy
    2-core machine OpenMP barriers between two threads cost more than the work itself."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
