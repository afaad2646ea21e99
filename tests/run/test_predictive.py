"""Posterior predictive averages over draws, and find_map on linear regression."""

from __future__ import annotations

import torch
from torch import nn

import structmc as sm
from support.runs import linreg_problem, mlp_energy



def test_predictive_classification_and_regression():
    energy, (X, y) = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 20, data=(X, y), batch_size=30, num_chains=2, progress=False)
    out = sm.predictive(energy, chain, X, batch_size=7, draws_per_call=8)
    manual = torch.stack([torch.func.functional_call(energy.module, energy.space.unflatten(s), (X,)).softmax(-1)
                          for s in chain.flat_draws()]).mean(0)
    assert torch.allclose(out["probs"], manual, atol=1e-6)

    lin = sm.ModuleEnergy(nn.Linear(2, 1), "gaussian", noise_std=0.5)
    Xr = torch.randn(30, 2)
    ch = sm.sample(lin, None, sm.SGLD(1e-3), 30, data=(Xr, Xr.sum(1)), num_chains=2, progress=False)
    pred = sm.predictive(lin, ch, Xr)
    f = ch.flat_draws()[:, :2] @ Xr.T + ch.flat_draws()[:, 2:3]
    assert torch.allclose(pred["mean"], f.mean(0), atol=1e-5)
    assert torch.allclose(pred["var"], f.var(0, unbiased=False) + 0.25, atol=1e-5)



def test_find_map_reaches_the_linear_regression_mode():
    X, y = linreg_problem(n=200)
    energy = sm.ModuleEnergy(nn.Linear(3, 1, bias=False), "gaussian", noise_std=0.3, prior_std=10.0)
    theta = sm.find_map(energy, energy.initial_position(), data=(X, y), num_steps=1500, lr=5e-2)
    A = X.T @ X / 0.09 + torch.eye(3) / 100.0
    exact = torch.linalg.solve(A, X.T @ y / 0.09)
    assert torch.allclose(theta, exact, atol=2e-3)
