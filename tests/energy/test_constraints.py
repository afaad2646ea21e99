"""Constrained parameters of a log density (issue 39 item 1): sampled in the unconstrained
space with the log-Jacobian of PyTorch's bijections, drawn back in the constrained space.

The laws are exact: a Metropolis-adjusted chain (full-batch MALA, one block) on the
unconstrained density must reproduce conjugate posteriors — a Gamma posterior of a rate, an
inverse-Gamma posterior of a variance, a Beta posterior of a probability, a Dirichlet — in the
constrained space. Without the log-Jacobian the same chains land elsewhere (checked: the
tests can fail)."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.distributions import Beta, Dirichlet, Gamma, InverseGamma, Normal, constraints, transforms

import structmc as sm
from structmc.gibbs import MetropolisWithinGibbs
from structmc.partitions import fully_joint


@pytest.fixture(autouse=True)
def _double():
    """float64 in this module only (the exact laws are checked to a few standard errors)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _mala(space, var):
    return MetropolisWithinGibbs(fully_joint(space), var, mala=True, scaling="N/n")


def _within(draws: torch.Tensor, mean: float, var: float, what: str, *, chains_axis=0, k: float = 5.0):
    """Per-chain means are independent: their spread gives the Monte Carlo error of the pooled
    mean (autocorrelation included); the pooled variance is checked through the per-chain
    variances the same way."""
    m = draws.mean(1)
    v = draws.var(1)
    se_m = m.std() / m.numel() ** 0.5
    se_v = v.std() / v.numel() ** 0.5
    assert abs(m.mean() - mean) < k * se_m + 1e-12, f"{what}: mean {m.mean():.4f} vs {mean:.4f} (se {se_m:.4f})"
    assert abs(v.mean() - var) < k * se_v + 1e-12, f"{what}: var {v.mean():.4f} vs {var:.4f} (se {se_v:.4f})"


# -- exact laws --------------------------------------------------------------------------------


def test_gamma_posterior_of_a_rate_from_poisson_counts():
    # λ ~ Gamma(2, 1), counts ~ Poisson(λ): λ | y ~ Gamma(2 + Σy, 1 + n)
    y = torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0, 2.0])
    a, b = 2.0 + y.sum().item(), 1.0 + y.numel()
    energy = sm.LogDensityEnergy(
        params={"rate": ()},
        constraints={"rate": constraints.positive},
        log_prior=lambda p: Gamma(2.0, 1.0).log_prob(p["rate"]),
        log_likelihood=lambda p, batch: torch.distributions.Poisson(p["rate"]).log_prob(batch[0]).sum(),
    )
    chain = sm.sample(
        energy, {"rate": 1.0}, _mala(energy.space, 0.1), 600, data=(y,), num_chains=128, burn_in=100, seed=3
    )
    assert chain["rate"].shape == (128, 500)
    assert bool((chain["rate"] > 0).all())
    _within(chain["rate"], a / b, a / b**2, "Gamma posterior")


def test_inverse_gamma_posterior_of_a_variance_with_minibatch_data():
    # σ² ~ InvGamma(3, 2), y ~ N(0, σ²): σ² | y ~ InvGamma(3 + n/2, 2 + Σy²/2)
    g = torch.Generator().manual_seed(0)
    y = 1.5 * torch.randn(40, generator=g)
    a, b = 3.0 + 20, 2.0 + 0.5 * float((y**2).sum())
    energy = sm.LogDensityEnergy(
        params={"var": ()},
        constraints={"var": constraints.positive},
        log_prior=lambda p: InverseGamma(3.0, 2.0).log_prob(p["var"]),
        log_likelihood=lambda p, batch: Normal(0.0, p["var"].sqrt()).log_prob(batch[0]).sum(),
    )
    chain = sm.sample(
        energy, {"var": 1.0}, _mala(energy.space, 0.05), 600, data=(y,), num_chains=128, burn_in=100, seed=4
    )
    _within(chain["var"], b / (a - 1), b**2 / ((a - 1) ** 2 * (a - 2)), "inverse-Gamma posterior")


def test_beta_posterior_of_a_probability_and_the_jacobian_matters():
    # p ~ Beta(2, 2), 7 successes in 10: p | y ~ Beta(9, 5)
    def log_prob(p, batch):
        return Beta(2.0, 2.0).log_prob(p["p"]) + 7 * p["p"].log() + 3 * (1 - p["p"]).log()

    energy = sm.LogDensityEnergy(log_prob, params={"p": ()}, constraints={"p": constraints.unit_interval})
    chain = sm.sample(energy, None, _mala(energy.space, 0.3), 600, num_chains=128, burn_in=100, seed=5)
    a, b = 9.0, 5.0
    _within(chain["p"], a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1)), "Beta posterior")

    # the same chain without the log-Jacobian samples Beta(8, 4) instead: it must be told apart
    class NoJacobian(sm.LogDensityEnergy):
        def _log_density(self, theta, batch):
            args, _ = self._arguments(theta)
            return self._user_log_density(args, batch)

    wrong = NoJacobian(log_prob, params={"p": ()}, constraints={"p": constraints.unit_interval})
    bad = sm.sample(wrong, None, _mala(wrong.space, 0.3), 600, num_chains=128, burn_in=100, seed=5)
    with pytest.raises(AssertionError):
        _within(bad["p"], a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1)), "Beta posterior")


def test_a_simplex_changes_the_dimension_and_its_draws_are_dirichlet():
    alpha = torch.tensor([1.0, 2.0, 3.0])
    energy = sm.LogDensityEnergy(lambda x, b: Dirichlet(alpha).log_prob(x), dim=3, constraints=constraints.simplex)
    assert (energy.space.dim, energy.draw_space.dim) == (2, 3)
    chain = sm.sample(energy, None, _mala(energy.space, 0.3), 600, num_chains=128, burn_in=100, seed=6)
    assert chain.samples.shape == (128, 500, 3)
    assert torch.allclose(chain.samples.sum(-1), torch.ones(()))
    a0 = alpha.sum()
    for k in range(3):
        m = float(alpha[k] / a0)
        _within(chain.samples[..., k], m, m * (1 - m) / float(a0 + 1), f"Dirichlet coordinate {k}")


def test_the_unconstrained_density_is_the_change_of_variables():
    # rate ~ Gamma(a, b): z = log rate has log density a·z - b·e^z (+ const)
    energy = sm.LogDensityEnergy(
        lambda p, b: Gamma(3.0, 2.0).log_prob(p["rate"]) + Normal(0.0, 1.0).log_prob(p["loc"]),
        params={"loc": (), "rate": ()},
        constraints={"rate": constraints.positive},
    )
    z = torch.tensor([[0.3, -1.0], [-0.2, 0.0], [1.1, 0.7]])
    exact = -(Normal(0.0, 1.0).log_prob(z[:, 0]) + 3.0 * z[:, 1] - 2.0 * z[:, 1].exp())
    value, grad = energy.value_and_grad(z, None)
    assert torch.allclose(value - value[0], exact - exact[0])
    assert torch.allclose(grad, torch.stack([z[:, 0], -(3.0 - 2.0 * z[:, 1].exp())], 1))
    assert torch.allclose(energy.to_draws(z), torch.stack([z[:, 0], z[:, 1].exp()], 1))
    assert torch.allclose(energy.from_draws(energy.to_draws(z)), z)


def test_vectorized_named_parameters_equal_the_per_chain_ones():
    def per_chain(p, b):
        return Normal(p["mu"], p["sigma"]).log_prob(b[0]).sum() + Normal(0.0, 1.0).log_prob(p["mu"]).sum()

    def vectorized(p, b):  # p[name]: [C, *shape], b[0]: [C, n]
        return Normal(p["mu"][:, :1], p["sigma"][:, None]).log_prob(b[0]).sum(-1) + Normal(0.0, 1.0).log_prob(
            p["mu"]
        ).sum(-1)

    kw = dict(params={"mu": (1,), "sigma": ()}, constraints={"sigma": constraints.positive})
    a, b = sm.LogDensityEnergy(per_chain, **kw), sm.LogDensityEnergy(vectorized, vectorized=True, **kw)
    theta = torch.randn(4, 2, generator=torch.Generator().manual_seed(1))
    batch = (torch.randn(4, 5, generator=torch.Generator().manual_seed(2)),)
    va, ga = a.value_and_grad(theta, batch)
    vb, gb = b.value_and_grad(theta, batch)
    assert torch.allclose(va, vb) and torch.allclose(ga, gb)


# -- the run: draws, folders, resume, the other paths ----------------------------------------------


def _scale_energy(rate=2.0):
    return sm.LogDensityEnergy(
        lambda p, b: Gamma(3.0, rate).log_prob(p["s"]) + Normal(0.0, 1.0).log_prob(p["w"]).sum(),
        params={"w": (2,), "s": ()},
        constraints={"s": constraints.positive},
    )


@pytest.mark.filterwarnings("ignore:.*has not settled")
def test_run_folders_hold_constrained_draws_and_resume_exactly(tmp_path):
    energy = _scale_energy()
    whole = sm.sample(
        energy, None, sm.SGLD(0.05), 60, num_chains=2, seed=1, burn_in=0, out_dir=tmp_path / "a", checkpoint_every=20
    )
    assert bool((whole["s"] > 0).all()) and whole.space.names == ["w", "s"]
    loaded = sm.load_chain(tmp_path / "a")
    assert torch.equal(loaded.samples, whole.samples)
    assert loaded["s"].shape == (2, 60)

    part = sm.sample(energy, None, sm.SGLD(0.05), 30, num_chains=2, seed=1, out_dir=tmp_path / "b", checkpoint_every=10)
    assert part.num_draws == 30
    resumed = sm.sample(
        energy, None, sm.SGLD(0.05), 60, num_chains=2, seed=1, out_dir=tmp_path / "b", checkpoint_every=10, resume=True
    )
    assert torch.equal(resumed.samples, whole.samples)

    # another constraint is another target: a resume is refused
    other = sm.LogDensityEnergy(
        energy.log_prob, params={"w": (2,), "s": ()}, constraints={"s": constraints.greater_than(0.5)}
    )
    with pytest.raises(ValueError, match="(?i)energy|target|differ"):
        sm.sample(other, None, sm.SGLD(0.05), 60, num_chains=2, seed=1, out_dir=tmp_path / "b", resume=True)


@pytest.mark.filterwarnings("ignore:.*has not settled")
def test_run_sample_and_find_map_keep_the_draw_space():
    energy = _scale_energy()
    run = sm.Run(energy, None, sm.SGLD(0.05), num_chains=3, seed=2)
    chain = run.sample(40, thin=2)
    assert chain.samples.shape == (3, 20, 3) and bool((chain["s"] > 0).all())
    assert torch.equal(chain.samples, sm.sample(energy, None, sm.SGLD(0.05), 40, num_chains=3, seed=2, thin=2).samples)
    mode = sm.find_map(energy, torch.tensor([1.0, -1.0, 3.0]), num_steps=600, lr=0.1)
    # the mode of the unconstrained density: w = 0, and for s = e^z, 3·z - 2·e^z peaks at s = 3/2
    assert torch.allclose(mode, torch.tensor([0.0, 0.0, 1.5]), atol=1e-3)


def test_the_energy_pickles_with_its_transforms():
    energy = sm.LogDensityEnergy(_gamma_log_prob, params={"s": ()}, constraints={"s": transforms.SoftplusTransform()})
    again = pickle.loads(pickle.dumps(energy))
    z = torch.tensor([[0.4]])
    assert torch.equal(again.value(z, None), energy.value(z, None))
    assert torch.equal(again.to_draws(z), torch.nn.functional.softplus(z))
    chain = sm.run_chains(again, None, sm.SGLD(0.02), 30, num_chains=1, seed=0, executor="serial")
    assert bool((chain["s"] > 0).all())


def _gamma_log_prob(p, batch):
    return Gamma(3.0, 2.0).log_prob(p["s"])


# -- bad input, before any compute --------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(params={"s": ()}, constraints={"t": constraints.positive}), ValueError, "does not declare"),
        (dict(params={"s": ()}, constraints={"s": "positive"}), TypeError, "torch.distributions constraint"),
        (dict(params={"s": ()}, constraints={"s": transforms.AbsTransform()}), ValueError, "not bijective"),
        (dict(params={"s": -1}), TypeError, "shape"),
        (dict(params={}), TypeError, "non-empty"),
        (dict(params={"s": ()}, dim=1), TypeError, "not both"),
        (dict(dim=2, constraints=constraints.positive_definite), ValueError, "no bijection"),
        (dict(dim=2, constraints=constraints.corr_cholesky), ValueError, "cannot map"),
    ],
)
def test_bad_declarations_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        sm.LogDensityEnergy(lambda p, b: torch.zeros(()), **kwargs)


def test_init_outside_the_support_is_refused_with_the_name():
    energy = _scale_energy()
    with pytest.raises(ValueError, match="'s' .* outside its support"):
        sm.sample(energy, {"w": [0.0, 0.0], "s": -1.0}, sm.SGLD(0.05), 5)
    with pytest.raises(ValueError, match="'s' .* outside its support"):
        sm.sample(energy, torch.tensor([0.0, 0.0, 0.0]), sm.SGLD(0.05), 5)  # 0: not in the open half-line
    closed = sm.LogDensityEnergy(lambda p, b: -p["p"], params={"p": ()}, constraints={"p": constraints.nonnegative})
    with pytest.raises(ValueError, match="'p' .* edge of its support"):
        sm.sample(closed, {"p": 0.0}, sm.SGLD(0.05), 5)  # in [0, ∞), but log 0 is not a start
    with pytest.raises(ValueError, match="missing \\['s'\\]"):
        sm.sample(energy, {"w": [0.0, 0.0]}, sm.SGLD(0.05), 5)
    with pytest.raises(ValueError, match="init is required"):
        sm.sample(sm.LogDensityEnergy(lambda t, b: -(t**2).sum(), dim=2), None, sm.SGLD(0.05), 5)
