"""PMF log density against a direct transcription of the MAMBA model, scaling, RMSE."""

from __future__ import annotations

import math

import pytest
import torch

from structmc import models as M
from structmc.zoo import energy_for


def reference_log_prob(pmf: M.PMF, theta, users, items, ratings, N):
    """Term by term, with torch.distributions (constants included; they cancel in differences)."""
    p = pmf.space.unflatten(theta.double())
    normal = torch.distributions.Normal
    scale = N / len(ratings)
    lik = 0.0
    for u, i, r in zip(users.tolist(), items.tolist(), ratings.tolist()):
        mean = pmf.mean_rating + p["U"][u] @ p["V"][i]
        lik = lik + normal(mean, 1 / math.sqrt(pmf.alpha)).log_prob(torch.tensor(r, dtype=torch.float64))
    prior = 0.0
    for w, mu, lam in (("U", "mu_U", "log_lambda_U"), ("V", "mu_V", "log_lambda_V")):
        sd = torch.exp(-0.5 * p[lam])
        prior = prior + normal(p[mu], sd).log_prob(p[w]).sum() + normal(pmf.mu0, sd).log_prob(p[mu]).sum()
        gamma = torch.distributions.Gamma(
            torch.tensor(pmf.a0, dtype=torch.float64), torch.tensor(pmf.b0, dtype=torch.float64)
        )
        prior = prior + (gamma.log_prob(p[lam].exp()) + p[lam]).sum()  # log-scale: + log Jacobian
    return scale * lik + prior


@pytest.fixture
def problem():
    g = torch.Generator().manual_seed(0)
    n = 40
    users, items = torch.randint(0, 6, (n,), generator=g), torch.randint(0, 7, (n,), generator=g)
    ratings = torch.randint(1, 6, (n,), generator=g).double()
    pmf = M.PMF(6, 7, dim=3, mean_rating=3.2)
    theta = pmf.init(seed=1, dtype=torch.float64) + 0.3 * torch.randn(pmf.dim, generator=g, dtype=torch.float64)
    return pmf, theta, users, items, ratings


def log_post(pmf, theta, batch, N):
    """(N/n)·log-likelihood + log prior, the scaling the energy applies."""
    return (N / batch[-1].shape[0]) * pmf.log_likelihood(theta, batch) + pmf.log_prior(theta)


def test_log_prob_matches_the_model_up_to_a_constant(problem):
    pmf, theta, users, items, ratings = problem
    ours = [log_post(pmf, t, (users, items, ratings), len(ratings)) for t in (theta, theta * 0.7 + 0.1)]
    ref = [reference_log_prob(pmf, t, users, items, ratings, len(ratings)) for t in (theta, theta * 0.7 + 0.1)]
    assert float(ours[0] - ours[1]) == pytest.approx(float(ref[0] - ref[1]), rel=1e-9, abs=1e-9)
    # gradients agree too (the constants do not matter)
    t = theta.clone().requires_grad_(True)
    (g_ours,) = torch.autograd.grad(log_post(pmf, t, (users, items, ratings), len(ratings)), t)
    t2 = theta.clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad(reference_log_prob(pmf, t2, users, items, ratings, len(ratings)), t2)
    assert torch.allclose(g_ours, g_ref, atol=1e-9)


def pmf_energy(pmf, N):
    return energy_for(
        "pmf", num_users=pmf.num_users, num_items=pmf.num_items, dim=pmf.d, mean_rating=pmf.mean_rating, num_data=N
    )


def test_minibatch_scaling_is_unbiased(problem):
    pmf, theta, users, items, ratings = problem
    energy, N = pmf_energy(pmf, len(ratings)), len(ratings)
    one = lambda batch: -float(energy.value(theta.unsqueeze(0), tuple(t.unsqueeze(0) for t in batch)))
    full = one((users, items, ratings))
    assert full == pytest.approx(float(log_post(pmf, theta, (users, items, ratings), N)), rel=1e-12)
    # the mean over a partition into equal minibatches equals the full-data value
    parts = [one((users[k::4], items[k::4], ratings[k::4])) for k in range(4)]
    assert sum(parts) / 4 == pytest.approx(full, rel=1e-12)
    x = torch.stack([users, items], 1)
    assert one((x, ratings)) == pytest.approx(full, rel=1e-12)


def test_energy_vmaps_over_chains(problem):
    pmf, theta, users, items, ratings = problem
    energy = pmf_energy(pmf, len(ratings))
    thetas = torch.stack([theta, theta + 0.05])
    batch = tuple(torch.stack([t[:10], t[10:20]]) for t in (users, items, ratings))
    value, grad = energy.value_and_grad(thetas, batch)
    for c in range(2):
        v = -log_post(pmf, thetas[c], tuple(b[c] for b in batch), len(ratings))
        assert float(value[c]) == pytest.approx(float(v), rel=1e-10)


def test_predictions_are_clipped_and_averaged():
    pmf = M.PMF(2, 2, dim=1, mean_rating=3.0)
    theta = torch.zeros(pmf.dim)
    p = pmf.space.unflatten(theta)
    p["U"].copy_(torch.tensor([[2.0], [0.5]]))
    p["V"].copy_(torch.tensor([[2.0], [-1.0]]))
    users, items = torch.tensor([0, 1, 0]), torch.tensor([0, 0, 1])
    assert pmf.predict(theta, users, items, clip=False).tolist() == [7.0, 4.0, 1.0]
    assert pmf.predict(theta, users, items).tolist() == [5.0, 4.0, 1.0]
    draws = torch.stack([theta, torch.zeros(pmf.dim)])  # posterior mean of predictions: [5, 3.5, 2]
    assert pmf.predict(draws, users, items).tolist() == [5.0, 3.5, 2.0]
    ratings = torch.tensor([5.0, 4.0, 2.0])
    assert M.pmf_rmse(pmf, theta, users, items, ratings) == pytest.approx(math.sqrt(1 / 3))


def test_for_dataset_reads_the_movielens_metadata():
    class FakeDataset:
        meta = {"num_users": 943, "num_items": 1682, "mean_rating": 3.5}
        y_train = torch.zeros(80000)

    pmf = M.PMF.for_dataset(FakeDataset())
    assert (pmf.num_users, pmf.num_items, pmf.mean_rating) == (943, 1682, 3.5)
    assert pmf.alpha == 3.0 and pmf.a0 == 4.0 and pmf.b0 == 5.0 and pmf.d == 20
