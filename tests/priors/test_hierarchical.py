"""HierarchicalEnergy: σ_g of a group's Normal(0, σ_g²) prior sampled as s_g = log σ_g. The
gradient against autograd of the written-out energy, the hyperpriors' densities, and the
exact posterior of (w, log σ) by quadrature recovered by Metropolis-within-Gibbs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.gibbs import MetropolisWithinGibbs
from structmc.partitions import fully_factorized
from structmc.priors import GammaPrecision, HalfCauchy, HierarchicalEnergy

F64 = torch.float64


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


@pytest.mark.parametrize("hyper", [HalfCauchy(0.7), GammaPrecision(2.0, 0.5)], ids=["half-cauchy", "gamma"])
@pytest.mark.parametrize("groups", ["layer", "param"])
def test_gradient_and_names(hyper, groups):
    base = sm.ModuleEnergy(_net(), "categorical", num_data=200)
    h = HierarchicalEnergy(base, groups, hyper)
    G = 2 if groups == "layer" else 4
    assert h.num_groups == G and h.space.dim == base.space.dim + G
    assert h.space.names[-G:] == [f"log_scale.{n}" for n in h.group_names]
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 10, 3, generator=g, dtype=F64), torch.randint(0, 2, (3, 10), generator=g)
    theta = torch.cat(
        [0.5 * torch.randn(3, base.space.dim, generator=g, dtype=F64), 0.3 * torch.randn(3, G, generator=g, dtype=F64)],
        1,
    )
    value, grad = h.value_and_grad(theta, (x, y))
    lik_only = base.with_prior(sm.priors.Flat())

    def written_out(t):
        w, s = t[:, : base.space.dim], t[:, base.space.dim :]
        total = lik_only.reference_value_and_grad(w.detach(), (x, y))[0]  # value only (no graph needed)
        prior = 0.0
        for gi in range(G):
            m = h.group_ids == gi
            sg = s[:, gi]
            prior = prior + 0.5 * torch.exp(-2 * sg) * w[:, m].square().sum(1) + m.sum() * sg + hyper.energy(sg)
        return total, prior

    total, prior = written_out(theta)
    torch.testing.assert_close(value, total + prior, rtol=1e-12, atol=1e-10)
    leaf = theta.clone().requires_grad_(True)
    (g_prior,) = torch.autograd.grad(written_out(leaf)[1].sum(), leaf)
    _, g_lik = lik_only.reference_value_and_grad(theta[:, : base.space.dim], (x, y))
    g_prior[:, : base.space.dim] += g_lik
    torch.testing.assert_close(grad, g_prior, rtol=1e-10, atol=1e-10)


def test_hyperprior_densities():
    sigma = torch.linspace(0.05, 5, 50, dtype=F64)
    s = sigma.log()
    hc = HalfCauchy(0.7)
    # −log p(s) = −log p_σ(e^s) − s up to a constant
    diff = hc.energy(s) - (-hc.log_prob_sigma(sigma) - s)
    torch.testing.assert_close(diff, diff[:1].expand_as(diff), rtol=0, atol=1e-12)
    ref = torch.distributions.HalfCauchy(torch.tensor(0.7, dtype=F64)).log_prob(sigma)
    torch.testing.assert_close(hc.log_prob_sigma(sigma), ref, rtol=1e-12, atol=1e-12)
    gp = GammaPrecision(2.0, 0.5)
    tau = torch.exp(-2 * s)
    logp = torch.distributions.Gamma(torch.tensor(2.0, dtype=F64), torch.tensor(0.5, dtype=F64)).log_prob(
        tau
    ) + torch.log(2 * tau)  # |dτ/ds| = 2τ
    diff = gp.energy(s) + logp
    torch.testing.assert_close(diff, diff[:1].expand_as(diff), rtol=0, atol=1e-10)
    for hp in (hc, gp):
        leaf = s.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(hp.energy(leaf).sum(), leaf)
        torch.testing.assert_close(hp.grad(s), g, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="HalfCauchy scale must be positive"):
        HalfCauchy(0.0)


@pytest.mark.parametrize("hyper", [HalfCauchy(1.0), GammaPrecision(3.0, 3.0)], ids=["half-cauchy", "gamma"])
def test_gibbs_recovers_the_exact_joint_posterior_of_weights_and_scale(hyper):
    """y = w·x + ε (σ_ε = 1) on 20 points, w ∈ R² in one group with s = log σ. Given s the
    posterior of w is Gaussian (conjugate), so p(s | y) is exact on a fine 1-d grid and the
    mean and covariance of (w1, w2, s) follow by the laws of total expectation and covariance;
    Metropolis-within-Gibbs on the hierarchical energy recovers them."""
    g = torch.Generator().manual_seed(2)
    n = 20
    x = torch.randn(n, 2, generator=g, dtype=F64)
    y = x @ torch.tensor([2.0, -1.5], dtype=F64) + torch.randn(n, generator=g, dtype=F64)
    base = sm.ModuleEnergy(nn.Linear(2, 1, bias=False).double(), "gaussian", noise_std=1.0)
    h = HierarchicalEnergy(base, "layer", hyper)
    s_grid = torch.linspace(-8, 5, 20_001, dtype=F64)
    sig2 = torch.exp(2 * s_grid)
    K = x @ x.T
    cov_y = sig2[:, None, None] * K + torch.eye(n, dtype=F64)
    log_marg = torch.distributions.MultivariateNormal(torch.zeros(n, dtype=F64), cov_y).log_prob(y)
    log_ps = log_marg - hyper.energy(s_grid)
    ps = (log_ps - log_ps.max()).exp()
    ps /= ps.sum()
    prec = x.T @ x + torch.eye(2, dtype=F64) / sig2[:, None, None]  # [S, 2, 2]
    cov_w = torch.linalg.inv(prec)
    mean_w = cov_w @ (x.T @ y)
    mean = torch.cat([(ps[:, None] * mean_w).sum(0), (ps * s_grid).sum().reshape(1)])
    joint = torch.cat([mean_w, s_grid[:, None]], 1) - mean  # [S, 3]
    cov = torch.einsum("s,si,sj->ij", ps, joint, joint)
    cov[:2, :2] += torch.einsum("s,sij->ij", ps, cov_w)
    from priors.test_priors import moments_within_mc_error

    init = mean + torch.randn(400, 3, generator=g, dtype=F64) @ torch.linalg.cholesky(cov).T
    chain = sm.sample(
        h,
        init,
        MetropolisWithinGibbs(fully_factorized(3), 0.3),
        600,
        data=(x, y),
        num_chains=400,
        seed=3,
        progress=False,
    )
    moments_within_mc_error(chain.samples[:, 100:], mean, cov)
    # predictions and evaluation use the network part of each draw
    res = sm.evaluate(h, chain, (x, y))
    assert res["task"] == "regression" and math.isfinite(res["pooled"]["nll"])
    assert chain.space.names == ["weight", "log_scale.0"]


def test_errors():
    with pytest.raises(TypeError, match="wraps a ModuleEnergy"):
        HierarchicalEnergy(sm.LogDensityEnergy(lambda t, b: -t.square().sum(), 3))
    base = sm.ModuleEnergy(_net(), "categorical")
    with pytest.raises(ValueError, match="groups must be 'layer', 'param' or a Partition"):
        HierarchicalEnergy(base, "neuron")
    with pytest.raises(ValueError, match="GammaPrecision needs shape > 0"):
        GammaPrecision(0.0, 1.0)
