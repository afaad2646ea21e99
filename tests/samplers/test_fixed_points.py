"""Deterministic sampler fixed points (float64): T = 0 with a zero gradient, no sampler moves;
T = 0 SGLD is SGD with step ε/2; T = 0 SGHMC is heavy-ball momentum."""

from __future__ import annotations

import pytest
import torch
from support.gradients import DTYPE, _tol, regression_data, regression_full_grad, regression_log_prob

import structmc

# ---------------------------------------------------------------------------------------
# Fixed points at T = 0
# ---------------------------------------------------------------------------------------
SAMPLERS_T0 = {
    "sgld": lambda: structmc.SGLD(0.3, temperature=0.0),
    "psgld": lambda: structmc.PSGLD(0.3, temperature=0.0),
    "sghmc": lambda: structmc.SGHMC(0.3, friction=0.5, temperature=0.0),
    "sghmc_leapfrog": lambda: structmc.SGHMC(
        0.3, friction=0.5, temperature=0.0, num_leapfrog=3, resample_momentum=True
    ),
    "sgnht": lambda: structmc.SGNHT(0.3, a=0.5, temperature=0.0),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS_T0))
def test_zero_temperature_zero_gradient_does_not_move(name):
    """A flat energy (∇U = 0) at T = 0: momentum starts at N(0, ηT) = 0, no noise, no drift."""
    theta0 = torch.tensor([[0.3, -1.7, 2.5], [1.0, 0.0, -4.0]], dtype=DTYPE)

    def flat(theta, batch):
        return 0.0 * theta.sum()

    chain = structmc.sample(flat, theta0, SAMPLERS_T0[name](), 25, num_chains=2, seed=3, progress=False)
    assert torch.equal(chain.samples, theta0.unsqueeze(1).expand(2, 25, 3))
    # also directly through update(): zero gradient, zero momentum
    sampler = SAMPLERS_T0[name]()
    state = sampler.init(theta0.clone(), torch.Generator().manual_seed(0))
    for _ in range(10):
        state = sampler.update(state, torch.zeros_like(theta0), 0.3, torch.Generator().manual_seed(1))
    assert torch.equal(state.theta, theta0)
    if hasattr(state, "momentum"):
        assert torch.equal(state.momentum, torch.zeros_like(theta0))


def test_zero_temperature_sgld_is_gradient_descent_with_half_step():
    X, y = regression_data()
    theta = torch.tensor([0.5, -0.2, 1.0], dtype=DTYPE)
    lr = 0.01
    chain = structmc.sample(
        regression_log_prob, theta, structmc.SGLD(lr, temperature=0.0), 3, data=(X, y), progress=False
    )
    expected = theta.clone()
    for k in range(3):
        expected = expected - 0.5 * lr * regression_full_grad(expected, X, y)
        torch.testing.assert_close(chain.samples[0, k], expected, **_tol())


def test_zero_temperature_sghmc_is_heavy_ball():
    """v ← (1-α)v - η∇U, θ ← θ + v, starting from v = 0 at T = 0."""
    X, y = regression_data()
    theta = torch.tensor([0.5, -0.2, 1.0], dtype=DTYPE)
    lr, alpha = 0.002, 0.3
    chain = structmc.sample(
        regression_log_prob, theta, structmc.SGHMC(lr, friction=alpha, temperature=0.0), 4, data=(X, y), progress=False
    )
    th, v = theta.clone(), torch.zeros(3, dtype=DTYPE)
    for k in range(4):
        v = (1 - alpha) * v - lr * regression_full_grad(th, X, y)
        th = th + v
        torch.testing.assert_close(chain.samples[0, k], th, **_tol())
