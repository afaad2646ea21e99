"""An adapted diagonal preconditioner for SGLD (issue 39 §2): Stan's burn-in windows, M frozen
after them. On an ill-conditioned Gaussian (variances 1e-2 .. 56, a 5,600-fold spread) the
frozen chain has the exact law of preconditioned SGLD with its own M, and it samples every
coordinate in a budget where plain SGLD at the same step size does not reach the wide ones."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from support.runs import Interrupt, interrupt_at

import structmc as sm
from structmc.samplers import sampler_from_config
from structmc.samplers.adaptation import WindowAdaptation, WindowState, adapt

P, EPS = 20, 0.02
VAR = torch.logspace(-2, 1.748, P, dtype=torch.float64)  # 1e-2 .. 56


def _gaussian():
    prec = 1 / VAR
    return sm.LogDensityEnergy(lambda t, b: -0.5 * (t * t * prec).sum(), P)


def _run(sampler, steps, chains, seed=1):
    run = sm.Run(_gaussian(), torch.zeros(P, dtype=torch.float64), sampler, num_chains=chains, seed=seed)
    for _ in run.iterate(steps):
        pass
    return run


def test_windows_are_stans():
    assert WindowAdaptation(1000).layout() == (75, (100, 150, 250, 450, 950))
    assert WindowAdaptation(100).layout() == (15, (90,))  # Stan's 15 % / 75 % / 10 % when 150 do not fit
    for bad in (dict(steps=10), dict(steps=100, estimator="hessian"), dict(steps=-1), dict(steps=100.0)):
        with pytest.raises(ValueError):
            WindowAdaptation(**bad)


def test_a_window_sets_the_regularised_estimate():
    """Positions and gradients of a quadratic energy (g = h·θ): the curvature estimate is 1/h
    exactly, however little the positions spread; the variance estimate is their variance."""
    g = torch.Generator().manual_seed(0)
    theta = 0.01 * torch.randn(40, 1, 3, generator=g, dtype=torch.float64)  # a chain that barely moved
    h = torch.tensor([100.0, 1.0, 0.02], dtype=torch.float64)
    for estimator, expected in (("curvature", 1 / h), ("variance", theta.var(0, unbiased=True)[0])):
        adaptation = WindowAdaptation(40, estimator=estimator, initial_buffer=0, base_window=40, terminal_buffer=0)
        layout = adaptation.layout()
        assert layout == (0, (40,))
        window = WindowState.start(theta[0])
        for u in range(40):
            adapt(adaptation, layout, window, u, theta[u], h * theta[u])
        n = 40
        torch.testing.assert_close(window.inverse_mass[0], expected * n / (n + 5) + 1e-3 * 5 / (n + 5))
        assert window.count == 0 and not window.m2.any()  # the next window starts afresh


def test_the_frozen_chain_has_the_exact_law_and_plain_sgld_does_not_reach_the_wide_coordinates():
    """After the windows (400 updates) M is frozen; 800 updates later every chain is at its
    stationary law, that of θ' = θ − (ε/2) M θ/σ² + √(εM) ξ: variance εM / (1 − (1 − εM/(2σ²))²),
    per chain and coordinate. 2,000 chains: θ² over that variance has mean 1 within 5 standard
    errors per coordinate. Plain SGLD, 1,200 updates at the same ε: the widest coordinates'
    variance is still far below σ² (relaxation time 2σ²/ε = 5,600 updates)."""
    chains = 2000
    run = _run(sm.SGLD(EPS, preconditioner=WindowAdaptation(400)), 1200, chains)
    M = run.state.window.inverse_mass
    ratio = (M / VAR).median(0).values
    assert bool(((ratio > 0.7) & (ratio < 1.3)).all()), ratio  # M estimates σ² for every coordinate
    exact = EPS * M / (1 - (1 - EPS * M / (2 * VAR)) ** 2)
    z2 = (run.state.theta**2 / exact).mean(0)
    assert bool(((z2 - 1).abs() < 5 * math.sqrt(2 / chains)).all()), z2
    plain = _run(sm.SGLD(EPS), 1200, chains)
    plain_ratio = plain.state.theta.var(0) / VAR
    # the two widest have not been reached (expected 1 - exp(-εt/σ²): 0.46 and 0.35)
    assert float(plain_ratio[-1]) < 0.45 and float(plain_ratio[-2]) < 0.6, plain_ratio
    assert float((run.state.theta.var(0) / VAR)[-3:].min()) > 0.85


def test_adaptation_resumes_exactly_and_its_config_round_trips(tmp_path):
    sampler = sm.SGLD(EPS, preconditioner=WindowAdaptation(60, initial_buffer=10, base_window=10, terminal_buffer=10))
    kw = dict(num_chains=3, seed=2, progress=False)
    start = torch.zeros(P, dtype=torch.float64)
    whole = sm.sample(_gaussian(), start, sampler, 90, **kw)
    folder = dict(out_dir=tmp_path / "run", checkpoint_every=7)
    with pytest.raises(Interrupt):
        sm.sample(_gaussian(), start, sampler, 90, callback=interrupt_at(33), **folder, **kw)  # inside a window
    resumed = sm.sample(_gaussian(), start, sampler, 90, resume=True, **folder, **kw)
    assert torch.equal(resumed.samples, whole.samples)
    cfg = sampler.config()
    assert cfg["preconditioner"]["steps"] == 60 and cfg["preconditioner"]["kind"] == "WindowAdaptation"
    again = sampler_from_config(cfg)
    assert again.preconditioner == sampler.preconditioner and again.config() == cfg
    assert "preconditioner" not in sm.SGLD(EPS).config()  # a plain SGLD's settings are as before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sm.sample(_gaussian(), start, sampler, 3, execution="compiled", progress=False)
    assert any("preconditioner" in str(w.message) for w in caught)


def _sghmc_stationary_variance(lr, friction, M, var):
    """Var θ of preconditioned SGHMC at a frozen M on N(0, diag(var)): SGHMC on φ = M^{-1/2}θ,
    whose (φ, v) recursion x' = A x + b ξ has the stationary covariance Σ = AΣAᵀ + bbᵀ
    (iterated to its fixed point), and Var θ = M·Σ_φφ."""
    s = var / M  # Var φ under the target
    a11, a12, a21, a22 = 1 - lr / s, torch.full_like(s, 1 - friction), -lr / s, torch.full_like(s, 1 - friction)
    c2 = 2 * friction * lr
    pp, pv, vv = torch.zeros_like(s), torch.zeros_like(s), torch.zeros_like(s)
    for _ in range(20000):
        pp, pv, vv = (
            a11 * a11 * pp + 2 * a11 * a12 * pv + a12 * a12 * vv + c2,
            a11 * a21 * pp + (a11 * a22 + a12 * a21) * pv + a12 * a22 * vv + c2,
            a21 * a21 * pp + 2 * a21 * a22 * pv + a22 * a22 * vv + c2,
        )
    return M * pp


def test_preconditioned_sghmc_has_the_exact_law_once_frozen():
    """SGHMC with the same windows: the frozen chain is SGHMC on φ = M^{-1/2}θ; 2,000 chains, each
    coordinate's θ² over that law's exact variance has mean 1 within 5 standard errors. The
    momentum is rescaled when M changes, so that v_φ is continuous."""
    chains, lr, friction = 2000, 0.005, 0.1
    run = _run(sm.SGHMC(lr, friction=friction, preconditioner=WindowAdaptation(400)), 1400, chains)
    M = run.state.window.inverse_mass
    ratio = (M / VAR).median(0).values
    assert bool(((ratio > 0.7) & (ratio < 1.3)).all()), ratio
    exact = _sghmc_stationary_variance(lr, friction, M, VAR.expand_as(M))
    z2 = (run.state.theta**2 / exact).mean(0)
    assert bool(((z2 - 1).abs() < 5 * math.sqrt(2 / chains)).all()), z2
    assert "preconditioner" in sm.SGHMC(lr, preconditioner=WindowAdaptation(50)).config()
    assert "preconditioner" not in sm.SGHMC(lr).config()
