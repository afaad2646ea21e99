"""One short SGLD run per model through ``structmc.sample`` on tiny data."""

from __future__ import annotations

import pytest
import torch

import structmc as sm
from structmc import models as M
from structmc.zoo import energy_for


def tiny_data(kind: str, shape, n: int = 12, classes: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *shape, generator=g)
    if kind == "categorical":
        y = torch.randint(0, classes, (n,), generator=g)
    elif kind == "bernoulli":
        y = torch.randint(0, 2, (n,), generator=g).float()
    else:
        y = torch.randn(n, generator=g)
    return x, y


CASES = [
    ("linear_regression", {}, (3,), 1, 1e-3),
    ("logistic_regression", {}, (10,), 1, 1e-3),
    ("blr_adult", {"in_features": 7}, (7,), 2, 1e-3),
    ("softmax_regression", {"in_features": 16, "num_classes": 3}, (1, 4, 4), 1, 1e-3),
    ("mlp_mnist", {}, (784,), 2, 1e-4),
    ("mlp_psgld", {}, (1, 28, 28), 1, 1e-5),
    ("mlp_mamba", {}, (784,), 1, 1e-4),
    ("mlp_gibbs", {}, (1, 28, 28), 2, 1e-4),
    ("mlp_xor", {}, (2,), 2, 1e-3),
    ("mlp_xor_deep", {}, (2,), 1, 1e-3),
    ("mlp_uci", {"in_features": 5}, (5,), 1, 1e-4),
    ("cnn_psgld", {}, (1, 28, 28), 1, 1e-5),
    ("resnet20", {}, (3, 32, 32), 1, 1e-6),
    ("resnet20_fmnist", {"norm": "group"}, (1, 28, 28), 2, 1e-6),
]


@pytest.mark.parametrize("name, kwargs, shape, chains, lr", CASES, ids=[c[0] for c in CASES])
def test_short_sgld_run(name, kwargs, shape, chains, lr):
    energy = energy_for(name, seed=0, **kwargs)
    classes = kwargs.get("num_classes", 10)
    n = 8 if name.startswith(("resnet", "cnn")) else 16
    x, y = tiny_data(energy.likelihood.name, shape, n=n, classes=classes)
    chain = sm.sample(
        energy,
        None,
        sm.SGLD(lr),
        3,
        data=(x, y),
        batch_size=n // 4 if chains == 1 else n // 2,
        num_chains=chains,
        seed=1,
        progress=False,
    )
    assert chain.samples.shape == (chains, 3, energy.space.dim)
    assert torch.isfinite(chain.samples).all()
    assert not torch.equal(chain.samples[:, -1], energy.initial_position().expand(chains, -1))


def test_batchnorm_resnet_runs_several_chains_with_their_own_statistics():
    energy = energy_for("resnet20", seed=0)
    x, y = tiny_data("categorical", (3, 16, 16), n=8)  # the architecture accepts any size; small is fast
    chain = sm.sample(energy, None, sm.SGLD(1e-6), 2, data=(x, y), batch_size=4, num_chains=2, seed=0, progress=False)
    assert torch.isfinite(chain.samples).all()
    assert chain.samples.shape == (2, 2, 269722)


def test_pmf_short_run_with_minibatches():
    g = torch.Generator().manual_seed(0)
    n = 300
    users, items = torch.randint(0, 30, (n,), generator=g), torch.randint(0, 40, (n,), generator=g)
    ratings = torch.randint(1, 6, (n,), generator=g).float()
    energy = energy_for("pmf", num_users=30, num_items=40, dim=5, num_data=n, mean_rating=float(ratings.mean()))
    pmf = energy.model
    assert isinstance(pmf, M.PMF) and energy.space.dim == pmf.dim and energy.num_data == n
    chain = sm.sample(
        energy,
        pmf.init(seed=0),
        sm.SGLD(1e-4),
        20,
        data=(users, items, ratings),
        batch_size=30,
        num_chains=2,
        seed=0,
        progress=False,
    )
    assert torch.isfinite(chain.samples).all()
    rmse = pmf.rmse(chain.samples[0, -5:], users, items, ratings)
    assert 0.0 < rmse < 3.0
