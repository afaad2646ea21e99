"""structmc.priors: closed forms against torch.distributions and autograd, draws against the
exact CDFs (KS), binding (patterns, state dicts) and errors, ModuleEnergy(prior=...) against
its autograd reference, and an exact posterior (grid quadrature) recovered by Metropolis-
within-Gibbs through both of its evaluators."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats
from torch import distributions as D
from torch import nn

import structmc as sm
from structmc.gibbs import MetropolisWithinGibbs
from structmc.models import MLP
from structmc.partitions import by_finer_nodes, fully_factorized
from structmc.priors import Laplace, LogDensity, Normal, ScaleMixtureNormal, StudentT
from structmc.space import ParamSpace

F64 = torch.float64
SPACE = ParamSpace([("w", (3, 2)), ("b", (3,))])
LIKE = torch.zeros((), dtype=F64)

CASES = {
    "normal": (
        Normal(loc=0.4, scale={"w": 2.0, "b": 0.5}),
        lambda: D.Normal(torch.tensor([0.4] * 9, dtype=F64), torch.tensor([2.0] * 6 + [0.5] * 3, dtype=F64)),
        lambda loc, scale: stats.norm(loc, scale),
    ),
    "laplace": (
        Laplace(loc=-0.3, scale=1.5),
        lambda: D.Laplace(torch.full((9,), -0.3, dtype=F64), torch.full((9,), 1.5, dtype=F64)),
        None,
    ),
    "student": (
        StudentT(df=3.0, loc=0.2, scale=0.7),
        lambda: D.StudentT(
            torch.full((9,), 3.0, dtype=F64), torch.full((9,), 0.2, dtype=F64), torch.full((9,), 0.7, dtype=F64)
        ),
        None,
    ),
    "cauchy": (StudentT(df=1.0), lambda: D.Cauchy(torch.zeros(9, dtype=F64), torch.ones(9, dtype=F64)), None),
    "mixture": (
        ScaleMixtureNormal(weight=0.3, scale1=2.0, scale2=0.1, loc=0.5),
        lambda: D.MixtureSameFamily(
            D.Categorical(torch.tensor([0.3, 0.7], dtype=F64).expand(9, 2)),
            D.Normal(torch.full((9, 2), 0.5, dtype=F64), torch.tensor([2.0, 0.1], dtype=F64).expand(9, 2)),
        ),
        None,
    ),
}


def _theta(C=4, seed=0):
    return 1.5 * torch.randn(C, 9, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.parametrize("name", list(CASES))
def test_log_density_gradient_and_curvature_are_exact(name):
    spec, dist, _ = CASES[name]
    prior = spec.bind(SPACE, LIKE)
    theta = _theta()
    expected = dist().log_prob(theta).sum(-1)
    torch.testing.assert_close(prior.log_prob(theta), expected, rtol=1e-12, atol=1e-12)
    # the energy is −log p up to one constant
    diff = -prior.energy(theta) - expected
    torch.testing.assert_close(diff, diff[:1].expand_as(diff), rtol=0, atol=1e-10)
    leaf = theta.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(prior.energy(leaf).sum(), leaf)
    torch.testing.assert_close(prior.grad(theta), g, rtol=1e-12, atol=1e-12)
    # factorised: the Hessian is diagonal; central differences of the (checked) gradient
    # (autograd's double backward of logaddexp is NaN where a component underflows)
    step = 1e-5
    h = (prior.grad(theta + step) - prior.grad(theta - step)) / (2 * step)
    torch.testing.assert_close(prior.hessian_diag(theta), h, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", list(CASES))
def test_draws_follow_the_prior(name):
    spec, dist, _ = CASES[name]
    prior = spec.bind(SPACE, LIKE)
    draws = prior.sample(torch.Generator().manual_seed(0), (20_000,))
    assert draws.shape == (20_000, 9) and draws.dtype == F64
    d = dist()
    exact = {
        "student": lambda j: stats.t(3.0, 0.2, 0.7).cdf,
        "cauchy": lambda j: stats.cauchy().cdf,
        "mixture": lambda j: lambda v: 0.3 * stats.norm(0.5, 2.0).cdf(v) + 0.7 * stats.norm(0.5, 0.1).cdf(v),
    }
    for j in (0, 7):  # a weight and a bias
        x = draws[:, j].numpy()
        if name in exact:
            cdf = exact[name](j)
        else:  # torch.distributions' own CDF
            cdf = lambda v, j=j: d.cdf(torch.as_tensor(v, dtype=F64).unsqueeze(-1).expand(-1, 9))[:, j].numpy()  # noqa: E731
        assert stats.kstest(x, cdf).pvalue > 1e-3, (name, j)
        # and the test has power: a wrong law is rejected (the normal case: one shifted by 0.3 σ)
        wrong = (
            stats.norm(0.4 + 0.3 * (2.0 if j < 6 else 0.5), 2.0 if j < 6 else 0.5).cdf
            if name == "normal"
            else stats.norm().cdf
        )
        assert stats.kstest(x, wrong).pvalue < 1e-6, (name, j)
    again = prior.sample(torch.Generator().manual_seed(0), (20_000,))
    assert torch.equal(draws, again)  # every random number from the generator


def test_patterns_state_dicts_and_errors():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    pretrained = {k: v.detach().clone() for k, v in net.state_dict().items()}
    e = sm.ModuleEnergy(net, "categorical", prior=Normal(loc=pretrained, scale=0.1), num_data=10)
    flat = e.initial_position()
    torch.testing.assert_close(e.prior.loc, flat)  # centred on the trained weights
    assert float(e.prior_energy(flat.unsqueeze(0))) == 0.0
    # {pattern: prior}: first match wins, each part its own law
    mixed = sm.ModuleEnergy(net, "categorical", prior={"*.bias": Laplace(0.0, 2.0), "*": StudentT(4.0)}, num_data=10)
    theta = torch.randn(3, e.space.dim, dtype=F64)
    bias = torch.tensor(
        ["bias" in e.space.params[i].name for i in range(len(e.space.params)) for _ in range(e.space.params[i].numel)]
    )
    t64 = lambda v: torch.tensor(v, dtype=F64)  # noqa: E731
    expected = D.Laplace(t64(0.0), t64(2.0)).log_prob(theta[:, bias]).sum(-1) + D.StudentT(t64(4.0)).log_prob(
        theta[:, ~bias]
    ).sum(-1)
    torch.testing.assert_close(mixed.prior.log_prob(theta), expected, rtol=1e-10, atol=1e-10)
    draws = mixed.initial_position("prior", generator=torch.Generator().manual_seed(0), num_chains=4000)
    assert draws.shape == (4000, e.space.dim)
    assert abs(float(draws[:, bias].var()) - 8.0) < 0.5 and abs(float(draws[:, ~bias].var()) - 2.0) < 0.4
    with pytest.raises(ValueError, match="pattern '\\*.wieght' .*match.* no parameter"):
        sm.ModuleEnergy(net, "categorical", prior={"*.wieght": Laplace(), "*": Normal()})
    with pytest.raises(ValueError, match="matches no pattern"):
        sm.ModuleEnergy(net, "categorical", prior={"*.bias": Laplace()})
    with pytest.raises(ValueError, match="state dict has no entry for \\['2.weight'"):
        sm.ModuleEnergy(net, "categorical", prior=Normal(loc={k: v for k, v in pretrained.items() if k != "2.weight"}))
    bad = dict(pretrained, **{"0.bias": torch.zeros(5, dtype=F64)})
    with pytest.raises(ValueError, match="'0.bias' has shape \\(5,\\)"):
        sm.ModuleEnergy(net, "categorical", prior=Normal(loc=bad))
    with pytest.raises(ValueError, match="prior_std .* or prior=..., not both"):
        sm.ModuleEnergy(net, "categorical", prior=Laplace(), prior_std=2.0)
    with pytest.raises(ValueError, match="Laplace scale must be positive"):
        sm.ModuleEnergy(net, "categorical", prior=Laplace(scale=0.0))
    with pytest.raises(ValueError, match="weight must lie in \\(0, 1\\)"):
        sm.ModuleEnergy(net, "categorical", prior=ScaleMixtureNormal(weight=1.0))
    with pytest.raises(ValueError, match="defined for a Normal prior; this energy's prior is Laplace"):
        _ = sm.ModuleEnergy(net, "categorical", prior=Laplace()).prior_precision
    with pytest.raises(ValueError, match="LogDensity prior covers the whole vector"):
        sm.ModuleEnergy(net, "categorical", prior={"*.bias": LogDensity(lambda t: -t.square().sum()), "*": Normal()})
    with pytest.raises(TypeError, match="must be a structmc.priors.Prior"):
        sm.ModuleEnergy(net, "categorical", prior=3.0)


def moments_within_mc_error(samples, mean, cov, z: float = 4.5):
    """Independent chains: per-chain averages give the mean and covariance with standard
    errors across chains; every entry within z SE (as tests/gibbs/test_mwg.py)."""
    C = samples.shape[0]
    m_c = samples.mean(1)
    centred = samples - mean
    s_c = torch.einsum("cti,ctj->cij", centred, centred) / samples.shape[1]
    m_hat, m_se = m_c.mean(0), m_c.std(0) / math.sqrt(C)
    s_hat, s_se = s_c.mean(0), s_c.std(0) / math.sqrt(C)
    assert bool(((m_hat - mean).abs() < z * m_se).all()), (m_hat, mean, m_se)
    assert bool(((s_hat - cov).abs() < z * s_se).all()), (s_hat, cov, s_se)
    scale = cov.diagonal().sqrt().outer(cov.diagonal().sqrt())
    assert bool((z * s_se < 0.1 * scale).all()), s_se / scale  # power: 10% off would fail


def _data(n=30, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, generator=g, dtype=F64), torch.randint(0, 2, (n,), generator=g)


@pytest.mark.parametrize(
    "prior",
    [
        Laplace(0.1, 0.5),
        StudentT(2.5, scale=0.8),
        ScaleMixtureNormal(0.5, 1.0, 0.05),
        {"*.bias": Laplace(), "*": Normal(0.2, 3.0)},
        LogDensity(lambda t: -(t.abs() ** 1.5).sum()),
        LogDensity(lambda p: -sum((v**4).sum() for v in p.values()), on="dict"),
    ],
    ids=["laplace", "student", "mixture", "map", "flat-fn", "dict-fn"],
)
def test_module_energy_with_a_prior_matches_its_autograd_reference(prior):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x, y = _data()
    e = sm.ModuleEnergy(net, "categorical", prior=prior, num_data=300)
    for C in (1, 3):
        theta = 0.7 * torch.randn(C, e.space.dim, generator=torch.Generator().manual_seed(C), dtype=F64)
        batch = (x[:10].expand(C, -1, -1), y[:10].expand(C, -1))
        value, grad = e.value_and_grad(theta, batch)
        ref_v, ref_g = e.reference_value_and_grad(theta, batch)
        torch.testing.assert_close(value, ref_v, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(grad, ref_g, rtol=1e-10, atol=1e-10)
    # any sampler runs on it, and pSGLD's Γ term gets the prior's curvature
    chain = sm.sample(e, None, sm.PSGLD(1e-4, include_gamma=True), 20, data=(x, y), batch_size=10, progress=False)
    assert bool(torch.isfinite(chain.samples).all())


def test_a_start_outside_the_support_is_refused_before_any_compute():
    net = nn.Linear(2, 1).double()
    positive = LogDensity(lambda t: (torch.log(t) - t).sum())  # Gamma(2, 1) on every coordinate
    e = sm.ModuleEnergy(net, "gaussian", prior=positive, noise_std=1.0)
    x, y = torch.randn(8, 2, dtype=F64), torch.randn(8, dtype=F64)
    init = torch.tensor([0.5, -0.2, 1.0], dtype=F64)
    with pytest.raises(ValueError, match="log density is nan at the initial position of chain 0: start inside"):
        sm.Run(e, init, sm.SGLD(1e-3), data=(x, y))
    # a factorised prior names the chain and the coordinate
    bad = torch.zeros(2, 9, dtype=F64)
    bad[1, 7] = float("nan")
    with pytest.raises(ValueError, match="chain 1, coordinate 7, value nan"):
        Laplace().bind(SPACE, LIKE).check_support(bad)
    with pytest.raises(ValueError, match="cannot be sampled: give LogDensity\\(fn, sample=...\\)"):
        e.initial_position("prior", generator=torch.Generator())
    sm.Run(e, init.abs(), sm.SGLD(1e-3), data=(x, y))  # inside: fine


def test_a_changed_prior_refuses_to_resume(tmp_path):
    net = nn.Linear(2, 1).double()
    x, y = torch.randn(8, 2, dtype=F64), torch.randn(8, dtype=F64)
    run = lambda prior, **kw: sm.sample(
        sm.ModuleEnergy(net, "gaussian", prior=prior, noise_std=1.0),
        None,  # noqa: E731
        sm.SGLD(1e-3),
        10,
        data=(x, y),
        out_dir=tmp_path,
        progress=False,
        **kw,
    )
    run(Laplace(0.0, 1.0), checkpoint_every=5)
    with pytest.raises(ValueError, match="cannot resume: the target changed.*prior"):
        run(Laplace(0.0, 2.0), resume=True)


def test_gibbs_recovers_the_exact_posterior_under_a_laplace_prior():
    """MLP((1, 1)) = w·x + b, Gaussian likelihood (σ = 0.5) on 6 points, Laplace(0, 0.5) prior
    on both: the posterior's mean and covariance by quadrature on a fine grid; Metropolis-
    within-Gibbs (exact invariance) through the incremental and the generic evaluator."""
    g = torch.Generator().manual_seed(3)
    x = torch.linspace(-1, 1, 6, dtype=F64).unsqueeze(1)
    y = 0.8 * x[:, 0] - 0.3 + 0.5 * torch.randn(6, generator=g, dtype=F64)
    energy = sm.ModuleEnergy(MLP((1, 1)).double(), "gaussian", noise_std=0.5, prior=Laplace(0.0, 0.5))
    grid = torch.linspace(-4, 4, 1601, dtype=F64)
    W, B = torch.meshgrid(grid, grid, indexing="ij")
    log_post = (
        -0.5 * ((y - (W.unsqueeze(-1) * x[:, 0] + B.unsqueeze(-1))) / 0.5).square().sum(-1) - (W.abs() + B.abs()) / 0.5
    )
    p = (log_post - log_post.max()).exp()
    p /= p.sum()
    pts = torch.stack([W, B], -1)  # flat order of MLP((1, 1)): weight then bias
    mean = (p.unsqueeze(-1) * pts).sum((0, 1))
    centred = pts - mean
    cov = torch.einsum("ij,ijk,ijl->kl", p, centred, centred)
    for evaluator in ("incremental", "generic"):
        sampler = MetropolisWithinGibbs(
            by_finer_nodes(energy.space, 1) if evaluator == "incremental" else fully_factorized(2),
            0.3,
            evaluator=evaluator,
        )
        init = mean + torch.randn(400, 2, generator=g, dtype=F64) @ torch.linalg.cholesky(cov).T
        chain = sm.sample(energy, init, sampler, 400, data=(x, y), num_chains=400, seed=5, progress=False)
        moments_within_mc_error(chain.samples, mean, cov)
