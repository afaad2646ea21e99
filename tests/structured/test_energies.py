"""Structured SGMCMC: S/Sd energies against exact answers."""

from __future__ import annotations

import math

import pytest
import torch
from support.exact import discretised_structured_covariance, sgld_gaussian_covariance
from support.nets import mlp
from support.runs import Interrupt, interrupt_at
from torch import nn

import structmc as sm
from structmc.structured import (
    BernoulliMask,
    BetaMask,
    ChainHistory,
    StructuredEnergy,
    UniformMask,
    by_layer,
    by_neuron,
    custom,
    fully_factorized,
    fully_joint,
    structured_optimum_gaussian,
)

F64 = torch.float64


# ---------------------------------------------------------------------------------------
# energies: exact reductions
# ---------------------------------------------------------------------------------------
def gaussian_target(P=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(P, P, generator=g, dtype=F64)
    precision = A @ A.T / P + torch.eye(P, dtype=F64)
    mean = torch.randn(P, generator=g, dtype=F64)

    def log_prob(theta, batch):  # vectorized over chains: [C, P] -> [C]
        d = theta - mean
        return -0.5 * ((d @ precision) * d).sum(-1)

    return mean, precision, sm.LogDensityEnergy(log_prob, P, vectorized=True)


def mlp_problem():
    torch.manual_seed(0)
    net = mlp([3, 5, 2], nn.Tanh).double()
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g, dtype=F64)
    y = torch.randint(0, 2, (40,), generator=g)
    return sm.ModuleEnergy(net, "categorical"), (X, y)


@pytest.mark.parametrize(
    "make_sampler",
    [
        lambda: sm.SGLD(1e-3),
        lambda: sm.SGHMC(1e-4, friction=0.1),
        lambda: sm.PSGLD(1e-4),
        lambda: sm.SGNHT(1e-4, a=0.1),
    ],
)
def test_one_group_and_rho_one_reproduce_the_base_sampler(make_sampler):
    energy, data = mlp_problem()
    kw = dict(data=data, batch_size=10, num_chains=2, seed=5, progress=False)
    base = sm.sample(energy, None, make_sampler(), 30, **kw)
    s1 = sm.sample(StructuredEnergy(energy, fully_joint(energy.space.dim), 50), None, make_sampler(), 30, **kw)
    sd1 = sm.sample(
        StructuredEnergy(energy, by_neuron(energy.space), 50, mask=BernoulliMask(1.0), num_copies=2),
        None,
        make_sampler(),
        30,
        **kw,
    )
    assert torch.allclose(s1.samples, base.samples, rtol=0, atol=1e-12)
    assert torch.allclose(sd1.samples, base.samples, rtol=0, atol=1e-12)


def test_structured_gradient_is_the_masked_sum_of_copy_gradients():
    mean, precision, energy = gaussian_target()
    part = custom(4, [0, 0, 1, 1])
    s = StructuredEnergy(energy, part, ChainHistory(10), seed=3)
    theta0 = torch.zeros(1, 4, dtype=F64)
    s.start(theta0)
    for _t in range(5):
        s.observe(torch.randn(1, 4, dtype=F64))
    theta = torch.randn(1, 4, dtype=F64)
    gen_state = s._state["generator"].get_state()
    value, grad = s.value_and_grad(theta, None)
    # recompute by hand with the same θ̃ draws
    s._state["generator"].set_state(gen_state)
    tilde = s.history.draw(2, part.group_ids, 2, s._state["generator"], F64)[0]
    expected_v, expected_g = 0.0, torch.zeros(4, dtype=F64)
    for m in range(2):
        live = part.group_ids == m
        x = torch.where(live, theta[0], tilde[m])
        expected_v += 0.5 * (x - mean) @ precision @ (x - mean)
        expected_g += live * (precision @ (x - mean))
    assert torch.allclose(value, expected_v.reshape(1)) and torch.allclose(grad[0], expected_g)


@pytest.mark.parametrize(
    "mask, expected",
    [
        (BernoulliMask(0.3), 0.3 * 6),
        (UniformMask(), 3.0),
        (BetaMask(2.0, 1.0), 4.0),
        (BernoulliMask(0.3, at_least_one=True), 0.3 * 6 / (1 - 0.7**6)),
    ],
)
def test_mask_laws_have_the_stated_mean_sum(mask, expected):
    r = mask.sample((20000, 6), torch.Generator().manual_seed(0), F64, "cpu")
    s = r.sum(-1)
    assert mask.mean_sum(6) == pytest.approx(expected)
    assert abs(float(s.mean()) - expected) < 5 * float(s.std()) / math.sqrt(20000)
    if isinstance(mask, BernoulliMask) and mask.at_least_one:
        assert bool((s > 0).all())


def test_sd_energy_is_unbiased_for_the_structured_energy_as_rho_goes_to_zero():
    """Theorem 3 (ii): with Bernoulli(ρ→0) masks, E[Û^(Sd)] → Û^(S) (same θ̃ law)."""
    mean, precision, energy = gaussian_target(P=3)
    part = fully_factorized(3)
    theta = torch.tensor([[0.3, -0.2, 0.5]], dtype=F64)
    history_points = torch.randn(50, 1, 3, generator=torch.Generator().manual_seed(1), dtype=F64)

    def averaged(mask, K, reps):
        s = StructuredEnergy(energy, part, ChainHistory(100), mask=mask, num_copies=K, seed=0)
        s.start(history_points[0])
        for x in history_points[1:]:
            s.observe(x)
        vals = torch.stack([s.value_and_grad(theta, None)[1][0] for _ in range(reps)])
        return vals.mean(0), vals.std(0) / math.sqrt(reps)

    exact_s, se_s = averaged(None, None, 4000)
    sd, se_sd = averaged(BernoulliMask(0.02, at_least_one=True), 8, 4000)
    # ρ = 0.02 leaves an O(ρ) difference, measured at < 0.6 SE here: no extra slack needed
    assert bool(((sd - exact_s).abs() < 5 * (se_s**2 + se_sd**2).sqrt()).all())
    full = energy.value_and_grad(theta, None)[1][0]
    sd1, _ = averaged(BernoulliMask(1.0), 2, 10)
    assert torch.allclose(sd1, full, atol=1e-12)


# ---------------------------------------------------------------------------------------
# the structured optimum (Theorem 1) on a Gaussian target
# ---------------------------------------------------------------------------------------
def test_s_sgld_converges_to_the_structured_optimum():
    mean, precision, energy = gaussian_target(P=4, seed=2)
    part = custom(4, [0, 0, 1, 1])
    eps, C = 0.05, 400
    s_energy = StructuredEnergy(energy, part, ChainHistory(1500), seed=1)
    chain = sm.sample(s_energy, mean, sm.SGLD(eps), 3000, burn_in=1000, thin=4, num_chains=C, seed=0, progress=False)
    x = chain.samples  # [C, D, P]
    per_chain_mean = x.mean(1)
    centred = x - mean
    per_chain_second = torch.einsum("cdi,cdj->cij", centred, centred) / x.shape[1]
    est_mean, se_mean = per_chain_mean.mean(0), per_chain_mean.std(0) / math.sqrt(C)
    est_cov, se_cov = per_chain_second.mean(0), per_chain_second.std(0) / math.sqrt(C)
    target = discretised_structured_covariance(precision, part, eps)
    _, optimum = structured_optimum_gaussian(mean, precision, part)
    assert bool(((est_mean - mean).abs() < 4.5 * se_mean).all())
    assert bool(((est_cov - target).abs() < 4.5 * se_cov).all()), (est_cov, target)
    # the discretised law is within O(ε) of Theorem 1's optimum, and far from the joint posterior
    assert bool(((target - optimum).abs() < 0.05).all())
    joint = torch.linalg.inv(precision)
    cross = torch.tensor([[0, 2], [0, 3], [1, 2], [1, 3]])
    assert bool(((joint[cross[:, 0], cross[:, 1]]).abs() > 10 * se_cov[cross[:, 0], cross[:, 1]]).any())
    assert bool(((est_cov[cross[:, 0], cross[:, 1]]).abs() < 4.5 * se_cov[cross[:, 0], cross[:, 1]]).all())


# S-SGLD's cross-correlation in test_sd_interpolates_between_joint_and_structured (finite window of
# 3000 steps, ε = 0.1, 400 chains x 800 kept draws). MEASURED, not predicted: mean and SE over
# 16 runs of that computation with other seeds (StructuredEnergy seed 100..115, sample seed
# 200..215): −0.1064 ± 0.0021 (run-to-run SD 0.0084; the test's own seeds give −0.1014). A single
# run's SE from 20 groups of 20 chains is ~0.007, so the bound below is ~0.04 wide: S's
# correlation is clearly non-zero, and the old |c| < 0.2 could not fail for any |c| < 0.2.
S_WINDOW_CORR = -0.1064
S_WINDOW_CORR_SE = 0.0021


def test_sd_interpolates_between_joint_and_structured():
    """Theorem 3: Sd with ρ → 0 behaves like S, with ρ = 1 like the base sampler, in between
    in between. (S itself keeps a small cross-correlation here because θ̃ comes from a finite
    window that is correlated with the current state: the window is ~40 relaxation times.)"""
    mean = torch.zeros(2, dtype=F64)
    precision = torch.tensor([[1.0, 0.8], [0.8, 1.0]], dtype=F64)

    def log_prob(theta, batch):
        d = theta - mean
        return -0.5 * ((d @ precision) * d).sum(-1)

    energy = sm.LogDensityEnergy(log_prob, 2, vectorized=True)
    part = fully_factorized(2)

    def correlation(mask, K=4):
        """Pooled correlation and its SE from 20 independent groups of 20 chains."""
        e = StructuredEnergy(
            energy, part, ChainHistory(3000), mask=mask, num_copies=None if mask is None else K, seed=2
        )
        ch = sm.sample(e, mean, sm.SGLD(0.1), 5000, burn_in=1000, thin=5, num_chains=400, progress=False)
        x = ch.samples.reshape(-1, 2)
        groups = torch.stack([torch.corrcoef(g.reshape(-1, 2).T)[0, 1] for g in ch.samples.chunk(20)])
        return float(torch.corrcoef(x.T)[0, 1]), float(groups.std()) / math.sqrt(20)

    (c_s, se_s), (c_small, _), (c_mid, _), (c_one, se_one) = (
        correlation(m) for m in (None, *(BernoulliMask(r, at_least_one=True) for r in (0.01, 0.5, 1.0)))
    )
    # corr SE ≈ (1-r²)/√(n_eff) with n_eff ≈ 400·800/40: differences of 0.05 are > 4 SE
    assert abs(c_s - S_WINDOW_CORR) < 5 * math.sqrt(se_s**2 + S_WINDOW_CORR_SE**2), (c_s, se_s)
    assert abs(c_small - c_s) < 0.05
    # ρ = 1 is plain SGLD: its exact discretised correlation (−0.79249; the joint posterior's −0.8
    # is ~3 SE away, so this cannot tell them apart, but it pins the value to ~0.01)
    V = sgld_gaussian_covariance(precision.numpy(), 0.1)
    exact_one = float(V[0, 1] / math.sqrt(V[0, 0] * V[1, 1]))
    assert abs(c_one - exact_one) < 4.5 * se_one, (c_one, exact_one, se_one)
    assert c_one < c_mid - 0.1 and c_mid < c_small - 0.1


# ---------------------------------------------------------------------------------------
# resume, control variates, chunked copies
# ---------------------------------------------------------------------------------------
def test_structured_resume_and_control_variates(tmp_path):
    energy, data = mlp_problem()
    make = lambda: StructuredEnergy(
        energy, by_layer(energy.space), ChainHistory(20, mode="reservoir"), mask=UniformMask(), num_copies=3, seed=4
    )
    centre = energy.initial_position()
    kw = dict(data=data, batch_size=10, num_chains=2, seed=1, progress=False, gradient=sm.ControlVariate(centre))
    full = sm.sample(make(), None, sm.SGLD(1e-3), 30, **kw)

    with pytest.raises(Interrupt):
        sm.sample(
            make(), None, sm.SGLD(1e-3), 30, out_dir=tmp_path, checkpoint_every=5, callback=interrupt_at(17), **kw
        )
    resumed = sm.sample(make(), None, sm.SGLD(1e-3), 30, out_dir=tmp_path, checkpoint_every=5, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples)


def test_exact_cv_identity_for_s_sgmcmc():
    """For S-SGMCMC, CV on the structured energy = Σ_m mask_m ⊙ CV(base) at the mixed points."""
    energy, (X, y) = mlp_problem()
    energy = energy.with_num_data(40)
    part = by_layer(energy.space)
    s = StructuredEnergy(energy, part, ChainHistory(10), seed=0)
    theta = energy.initial_position().unsqueeze(0)
    s.start(theta)
    s.observe(theta + 0.1)
    cv = sm.ControlVariate(theta[0] + 0.05)
    cv.prepare(s, (X, y), theta)
    batch = (X[:10].unsqueeze(0), y[:10].unsqueeze(0))
    state = s._state["generator"].get_state()
    _, g = cv(s, theta + 0.02, batch)
    s._state["generator"].set_state(state)
    _, g_s = s.value_and_grad(theta + 0.02, batch)
    _, g_c = energy.value_and_grad(theta[0:1] + 0.05, batch)
    _, full = sm.full_data_value_and_grad(energy, theta[0:1] + 0.05, (X, y))
    assert torch.allclose(g, g_s - g_c + full, atol=1e-10)


def test_chunked_copies_equal_one_batched_evaluation():
    energy, (X, y) = mlp_problem()
    energy = energy.with_num_data(40)
    part = by_neuron(energy.space)
    theta = energy.initial_position().unsqueeze(0)
    batch = (X[:10].unsqueeze(0), y[:10].unsqueeze(0))
    out = []
    for chunk in (None, 2):
        s = StructuredEnergy(energy, part, ChainHistory(10), max_copies_per_call=chunk, seed=7)
        s.start(theta)
        s.observe(theta + 0.1)
        out.append(s.value_and_grad(theta + 0.05, batch))
    assert torch.allclose(out[0][0], out[1][0], atol=1e-10) and torch.allclose(out[0][1], out[1][1], atol=1e-10)
