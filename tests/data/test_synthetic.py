"""Synthetic generators: seeding through torch.Generator, the papers' parameters, Gaussian targets."""

from __future__ import annotations

import math

import pytest
import torch

import structmc as sm
import structmc.data as D


def test_linear_regression_data():
    ds = D.linear_regression_data()
    assert ds.x_train.shape == (100, 3) and ds.y_train.shape == (100,) and ds.x_test is None
    assert ds.meta["weights"] == [1.5, -0.8, 1.3] and ds.meta["bias"] == 0.5 and ds.meta["noise_var"] == 1.0
    assert torch.equal(D.linear_regression_data(seed=0).y_train, ds.y_train)
    assert not torch.equal(D.linear_regression_data(seed=1).y_train, ds.y_train)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(D.linear_regression_data(generator=g).y_train, ds.y_train)
    big = D.linear_regression_data(20000, seed=2, dtype=torch.float64)
    A = torch.cat([big.x_train, torch.ones(20000, 1, dtype=torch.float64)], 1)
    coef = torch.linalg.lstsq(A, big.y_train[:, None]).solution.squeeze()
    assert torch.allclose(coef, torch.tensor([1.5, -0.8, 1.3, 0.5], dtype=torch.float64), atol=0.03)
    resid = big.y_train - A @ coef
    assert abs(float(resid.var()) - 1.0) < 0.05


def test_mamba_logistic_regression_data():
    ds = D.logistic_regression_data(20000, seed=0, dtype=torch.float64)
    assert ds.x_train.shape == (16000, 10) and ds.x_test.shape == (4000, 10)
    u, cov = ds.meta["u"], ds.meta["cov"]
    assert -0.4 <= u <= 0.4 and cov.shape == (10, 10)
    assert math.isclose(float(cov[0, 3]), u**3, rel_tol=1e-9) and float(cov[2, 2]) == 1.0
    x = torch.cat([ds.x_train, ds.x_test])
    emp = x.T @ x / len(x)
    assert float((emp - cov).abs().max()) < 0.05
    theta = ds.meta["theta_true"]
    assert theta.shape == (10,)
    # labels follow the logistic model: the true θ fits far better than zero
    y = torch.cat([ds.y_train, ds.y_test])
    nll = torch.nn.functional.binary_cross_entropy_with_logits(x @ theta, y)
    assert float(nll) < 0.5 * math.log(2)
    again = D.logistic_regression_data(20000, seed=0, dtype=torch.float64)
    assert torch.equal(again.x_test, ds.x_test) and torch.equal(again.y_train, ds.y_train)
    assert not torch.equal(D.logistic_regression_data(20000, seed=1).y_train, ds.y_train.float())


def test_gaussian_targets():
    target = D.random_gaussian(4, condition_number=50.0, seed=1)
    mvn = torch.distributions.MultivariateNormal(target.mean, target.cov)
    theta = torch.randn(7, 4)
    assert torch.allclose(target.log_prob(theta), mvn.log_prob(theta), atol=1e-4)
    draws = target.sample(40000, seed=0)
    assert torch.allclose(draws.mean(0), target.mean, atol=0.15)
    assert torch.allclose(torch.cov(draws.T), target.cov, atol=0.1 * float(target.cov.abs().max()))
    p = D.psgld_gaussian()
    assert torch.allclose(p.cov, torch.diag(torch.tensor([0.16, 1.0])))
    c = D.correlated_gaussian(3, rho=0.5)
    assert float(c.cov[0, 1]) == 0.5 and float(c.cov[1, 1]) == 1.0
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        D.gaussian_target(torch.zeros(2), torch.tensor([[1.0, 2.0], [2.0, 1.0]]))  # not positive definite


def test_gaussian_target_samples_with_structmc():
    target = D.psgld_gaussian()
    energy = sm.LogDensityEnergy(target.log_prob, target.dim)
    chain = sm.sample(energy, torch.zeros(2), sm.SGLD(0.05), 3000, burn_in=500, num_chains=2, seed=0, progress=False)
    s = chain.samples.reshape(-1, 2)
    assert torch.allclose(s.var(0), torch.tensor([0.16, 1.0]), rtol=0.35)
    noisy = sm.NoisyGradientEnergy(energy, 0.1, seed=0)
    theta = torch.zeros(1, 2)
    v0, g0 = energy.value_and_grad(theta, None)
    v1, g1 = noisy.value_and_grad(theta, None)
    assert torch.allclose(v0, v1) and not torch.equal(g0, g1) and float((g1 - g0).abs().max()) < 1.0
    chain = sm.sample(noisy, torch.zeros(2), sm.SGLD(0.05), 50, progress=False)
    assert torch.isfinite(chain.samples).all()
