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
    whose (φ, v) recursion x' = A x + b ξ has the stationary covariance Σ = AΣAᵀ + bbᵀ (per
    coordinate, a 2 x 2 discrete Lyapunov equation), and Var θ = M·Σ_φφ."""
    s = var / M  # Var φ under the target
    one, keep = torch.ones_like(s), torch.full_like(s, 1 - friction)
    A = torch.stack([torch.stack([1 - lr / s, keep], -1), torch.stack([-lr / s, keep], -1)], -2)
    Q = torch.full((*s.shape, 2, 2), 2 * friction * lr, dtype=s.dtype) * one[..., None, None]
    return M * _stationary_covariance(A, Q)[..., 0, 0]


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


# -- a dense M ------------------------------------------------------------------------------------
DENSE_P = 10


def _rotated():
    """The ill-conditioned Gaussian (variances 1e-2 .. 56, P = 10) rotated by a random orthogonal
    matrix: correlations up to 0.93. Returns its covariance, precision and energy."""
    var = torch.logspace(-2, 1.748, DENSE_P, dtype=torch.float64)
    q, _ = torch.linalg.qr(
        torch.randn(DENSE_P, DENSE_P, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    )
    cov = q @ torch.diag(var) @ q.T
    prec = torch.linalg.inv(cov)
    return cov, prec, sm.LogDensityEnergy(lambda t, b: -0.5 * t @ prec @ t, DENSE_P)


def _stationary_covariance(B, noise_cov, doublings=30):
    """Σ = BΣBᵀ + Q (the discrete Lyapunov equation of x' = Bx + ξ, Cov ξ = Q), batched, by
    doubling (Smith's method): Σ = Σ_k B^k Q (B^k)ᵀ summed over 2^doublings terms."""
    total = noise_cov.clone()
    for _ in range(doublings):
        total = total + B @ total @ B.transpose(-1, -2)
        B = B @ B
    return total


def _whitened_second_moments(theta, cov):
    """z = L⁻¹θ for Σ = LLᵀ (per chain): per-chain z zᵀ ``[C(, S), P, P]``, identity in mean at Σ."""
    L = torch.linalg.cholesky(cov)
    if theta.dim() == 3:
        L = L.unsqueeze(1)
    z = torch.linalg.solve_triangular(L, theta.unsqueeze(-1), upper=False).squeeze(-1)
    return z.unsqueeze(-1) * z.unsqueeze(-2)


def test_the_dense_curvature_estimate_is_the_inverse_hessian_and_bad_sizes_are_refused():
    """For g = Aθ the window's gradient covariance is A S A, and S # (ASA)⁻¹ = A⁻¹ exactly."""
    from structmc.samplers.adaptation import dense_curvature_estimate

    cov, prec, _ = _rotated()
    theta = torch.randn(3, 40, DENSE_P, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 0.01
    S = torch.einsum("cti,ctj->cij", theta, theta) / 39
    torch.testing.assert_close(dense_curvature_estimate(S, prec @ S @ prec), cov.expand(3, -1, -1))
    sampler = sm.SGLD(EPS, preconditioner=WindowAdaptation(200, dense=True))
    with pytest.raises(ValueError, match="at most 1000 parameters"):
        sampler.init(torch.zeros(2, 1001, dtype=torch.float64))
    with pytest.raises(ValueError, match="raise base_window to at least 31"):
        sampler.init(torch.zeros(2, 30, dtype=torch.float64))
    with pytest.raises(ValueError, match="dense must be True or False"):
        WindowAdaptation(200, dense=1)


def test_a_dense_m_samples_a_correlated_gaussian_exactly_where_a_diagonal_one_does_not():
    """SGLD, ε = 0.02, 500 chains from 0, M adapted in the windows of the first 200 updates. The
    frozen dense chain θ' = (I − (ε/2)MA)θ + √ε Lξ is a linear Gaussian recursion: its exact
    stationary covariance Σ (per chain, the Lyapunov equation) whitens the last 200 updates,
    whose per-chain mean of z zᵀ is the identity within 5 standard errors in every entry. A
    diagonal M, same steps: the widest direction has reached a small part of its variance
    (measured: 0.06 after 1,200 updates; dense 1.0 ± 0.05)."""
    cov, prec, energy = _rotated()
    chains, start = 500, torch.zeros(DENSE_P, dtype=torch.float64)
    run = sm.Run(energy, start, sm.SGLD(EPS, preconditioner=WindowAdaptation(200, dense=True)), num_chains=chains)
    run.sample(400)
    frozen = run.sample(200)
    M = run.state.window.inverse_mass
    torch.testing.assert_close(run.state.window.cholesky @ run.state.window.cholesky.mT, M)
    assert float(((M - cov).norm(dim=(1, 2)) / cov.norm()).median()) < 0.1  # M estimates the covariance
    B = torch.eye(DENSE_P, dtype=torch.float64) - 0.5 * EPS * M @ prec
    exact = _stationary_covariance(B, EPS * M)
    zz = _whitened_second_moments(frozen.samples, exact).mean(1)  # [C, P, P]
    mean, se = zz.mean(0), zz.std(0) / math.sqrt(chains)
    assert bool(((mean - torch.eye(DENSE_P, dtype=torch.float64)).abs() < 5 * se).all()), (mean, se)
    assert bool((5 * se < 0.3).all()), se
    widest = torch.linalg.eigh(cov).eigenvectors[:, -1]
    dense_reach = float((frozen.samples[:, -1] @ widest).var() / cov.mv(widest).dot(widest))
    diagonal = sm.Run(energy, start, sm.SGLD(EPS, preconditioner=WindowAdaptation(200)), num_chains=chains)
    diagonal.sample(600)
    diagonal_reach = float((diagonal.state.theta @ widest).var() / cov.mv(widest).dot(widest))
    assert dense_reach > 0.8 and diagonal_reach < 0.3, (dense_reach, diagonal_reach)


def test_dense_sghmc_has_the_exact_law_once_frozen_and_resumes_exactly(tmp_path):
    """SGHMC with a dense M is SGHMC on φ = L⁻¹θ; in (θ, v) the frozen chain is the linear
    recursion v' = (1−α)v − ηMAθ + √(2αη) Lξ, θ' = θ + v', whose exact stationary covariance
    whitens θ and v jointly; the momentum is carried across a change of M as L_new L_old⁻¹ v."""
    cov, prec, energy = _rotated()
    chains, lr, friction, P = 500, 0.005, 0.1, DENSE_P
    run = sm.Run(
        energy,
        torch.zeros(P, dtype=torch.float64),
        sm.SGHMC(lr, friction=friction, preconditioner=WindowAdaptation(200, dense=True)),
        num_chains=chains,
    )
    run.sample(600)
    frozen = run.sample(200)
    M = run.state.window.inverse_mass
    eye = torch.eye(P, dtype=torch.float64).expand(chains, P, P)
    kick = eye - lr * M @ prec  # θ' = θ + v' = (I − ηMA)θ + (1−α)v + noise
    B = torch.cat([torch.cat([kick, (1 - friction) * eye], -1), torch.cat([kick - eye, (1 - friction) * eye], -1)], -2)
    noise = 2 * friction * lr * torch.cat([torch.cat([M, M], -1), torch.cat([M, M], -1)], -2)
    exact = _stationary_covariance(B, noise)[:, :P, :P]
    zz = _whitened_second_moments(frozen.samples, exact).mean(1)
    mean, se = zz.mean(0), zz.std(0) / math.sqrt(chains)
    assert bool(((mean - eye[0]).abs() < 5 * se).all()), (mean, se)
    assert bool((5 * se < 0.3).all()), se
    sampler = sm.SGHMC(
        lr,
        friction=friction,
        preconditioner=WindowAdaptation(60, initial_buffer=15, base_window=20, terminal_buffer=10, dense=True),
    )
    kw = dict(num_chains=2, seed=2, progress=False)
    whole = sm.sample(energy, torch.zeros(P, dtype=torch.float64), sampler, 90, **kw)
    folder = dict(out_dir=tmp_path / "run", checkpoint_every=7)
    with pytest.raises(Interrupt):
        sm.sample(energy, torch.zeros(P, dtype=torch.float64), sampler, 90, callback=interrupt_at(40), **folder, **kw)
    resumed = sm.sample(energy, torch.zeros(P, dtype=torch.float64), sampler, 90, resume=True, **folder, **kw)
    assert torch.equal(resumed.samples, whole.samples)
    assert sampler_from_config(sampler.config()).preconditioner == sampler.preconditioner


def test_a_float32_chain_gets_a_nonsingular_dense_m():
    """The window's sums and the estimate are float64 for a float32 chain: with float32 sums the
    gradient covariance (eigenvalues 3e7 apart) lost its small eigenvalues, the wide directions',
    and some chains' M A had an eigenvalue 2e-6 (M singular along the widest direction); here
    every chain's M A has its eigenvalues near 1."""
    cov, prec, _ = _rotated()
    prec32 = prec.float()
    energy = sm.LogDensityEnergy(lambda t, b: -0.5 * t @ prec32 @ t, DENSE_P)
    sampler = sm.SGLD(EPS, preconditioner=WindowAdaptation(200, dense=True))
    run = sm.Run(energy, torch.zeros(DENSE_P), sampler, num_chains=200, seed=0)
    run.sample(200)
    M = run.state.window.inverse_mass
    assert M.dtype == torch.float32
    eigenvalues = torch.linalg.eigvals(M.double() @ prec).real
    assert float(eigenvalues.min()) > 0.3 and float(eigenvalues.max()) < 2.0, eigenvalues.aminmax()
