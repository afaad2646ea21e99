"""Every energy gives the same value and gradient after ``pickle`` and ``copy.deepcopy``.

Whatever crosses a process boundary (process pool, Dask, Ray) is pickled. A ``ModuleEnergy``
binds its parameters as views of one flat vector; a copy rebuilt the parameters as separate
tensors, so the one-chain path wrote θ into a buffer the forward never read and returned the
prior's gradient alone (max |Δ∇| = 85.7 on the example below; executors sampled the prior).
The property is checked over every energy type, for one chain and for several, with
``num_data`` given (``sample()`` does not rebind such an energy).
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.energy import LogDensityEnergy, NoisyGradientEnergy
from structmc.partitions import by_layer
from structmc.priors import HierarchicalEnergy, Laplace
from structmc.structured.energies import BernoulliMask, StructuredEnergy


def _data(C: int, n: int = 40, d: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    y = (X[:, 0] + X[:, 1] > 0).long()
    return X.expand(C, -1, -1).clone(), y.expand(C, -1).clone()


def _mlp(seed: int = 1, batchnorm: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    if batchnorm:
        return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 2))
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))


def _gauss_log_lik(theta, batch):  # top level: picklable
    x, y = batch
    return -0.5 * ((x @ theta[:6] - y.float()) ** 2).sum()


def _gauss_log_prior(theta):
    return -0.5 * (theta**2).sum()


def module_energy():
    return sm.ModuleEnergy(_mlp(), "categorical", num_data=300)


def module_energy_subset():
    return sm.ModuleEnergy(_mlp(), "categorical", num_data=300, sample="2.*")


def module_energy_batchnorm():
    return sm.ModuleEnergy(_mlp(batchnorm=True), "categorical", num_data=300)


def module_energy_laplace():
    return sm.ModuleEnergy(_mlp(), "categorical", num_data=300, prior=Laplace(0.5))


def module_energy_prior_map():
    return sm.ModuleEnergy(_mlp(), "categorical", num_data=300, prior_std={"*.bias": 10.0, "*": 0.5})


def hierarchical_energy():
    return HierarchicalEnergy(module_energy())


def noisy_energy():
    return NoisyGradientEnergy(module_energy(), 0.3, seed=4)


def log_density_energy():
    return LogDensityEnergy(dim=8, log_likelihood=_gauss_log_lik, log_prior=_gauss_log_prior, num_data=300)


def structured_energy():
    e = module_energy()
    return StructuredEnergy(e, by_layer(e.space), 50, seed=3)


def sd_structured_energy():
    e = module_energy()
    return StructuredEnergy(e, by_layer(e.space), 50, mask=BernoulliMask(0.5), num_copies=3, seed=3)


ENERGIES = [
    module_energy,
    module_energy_subset,
    module_energy_batchnorm,
    module_energy_laplace,
    module_energy_prior_map,
    hierarchical_energy,
    noisy_energy,
    log_density_energy,
    structured_energy,
    sd_structured_energy,
]


def _copies():
    return {"pickle": lambda e: pickle.loads(pickle.dumps(e)), "deepcopy": copy.deepcopy}


def _prepare(energy, C: int):
    """Position, batch, and the stateful energies started (a pickled run ships them started)."""
    g = torch.Generator().manual_seed(11)
    theta = torch.randn(C, energy.space.dim, generator=g)
    if isinstance(energy, HierarchicalEnergy):
        theta[:, energy.net_dim :] = 0.0  # log-scales: σ = 1
    if isinstance(energy, LogDensityEnergy):
        g = torch.Generator().manual_seed(2)
        x = torch.randn(C, 40, 6, generator=g)
        batch = (x, torch.randint(0, 2, (C, 40), generator=g))
    else:
        batch = _data(C)
    if isinstance(energy, StructuredEnergy):
        energy.start(theta)
    return theta, batch


@pytest.mark.parametrize("copy_name", ["pickle", "deepcopy"])
@pytest.mark.parametrize("C", [1, 3])
@pytest.mark.parametrize("make", ENERGIES, ids=lambda f: f.__name__)
def test_a_copied_energy_gives_the_same_value_and_gradient(make, C, copy_name):
    original = make()
    theta, batch = _prepare(original, C)
    twin = make()
    _prepare(twin, C)
    copied = _copies()[copy_name](twin)  # copied before any evaluation, as an executor ships it
    v0, g0 = original.value_and_grad(theta, batch)
    v1, g1 = copied.value_and_grad(theta, batch)
    torch.testing.assert_close(v1, v0, rtol=0, atol=0)
    torch.testing.assert_close(g1, g0, rtol=0, atol=0)
    # and again after the original has run (a copy made mid-run, e.g. by a checkpointed task)
    again = _copies()[copy_name](original)
    theta2 = theta + 0.1
    torch.testing.assert_close(again.value(theta2, batch), original.value(theta2, batch), rtol=0, atol=0)
    ref_v, ref_g = original.value_and_grad(theta2, batch)
    v2, g2 = again.value_and_grad(theta2, batch)
    torch.testing.assert_close(v2, ref_v, rtol=0, atol=0)
    torch.testing.assert_close(g2, ref_g, rtol=0, atol=0)


def test_the_gradient_after_pickling_is_not_the_prior_alone():
    """The issue's example: the copy's gradient must carry the likelihood."""
    torch.manual_seed(0)
    X = torch.randn(300, 6)
    y = (X[:, 0] + X[:, 1] > 0).long()
    e = module_energy()
    theta = torch.randn(1, e.space.dim)
    batch = (X[None], y[None])
    g_prior = e.prior.grad(theta) if hasattr(e.prior, "grad") else theta
    g1 = pickle.loads(pickle.dumps(e)).value_and_grad(theta, batch)[1]
    assert float((g1 - g_prior).abs().max()) > 1.0
    torch.testing.assert_close(g1, e.value_and_grad(theta, batch)[1], rtol=0, atol=0)


def test_sampling_a_deepcopied_energy_gives_the_same_chain():
    torch.manual_seed(0)
    X = torch.randn(300, 6)
    y = (X[:, 0] + X[:, 1] > 0).long()
    e = module_energy()
    kw = dict(data=(X, y), batch_size=50, seed=2, progress=False)
    a = sm.sample(e, None, sm.SGLD(1e-3), 60, **kw)
    b = sm.sample(copy.deepcopy(e), None, sm.SGLD(1e-3), 60, **kw)
    assert torch.equal(a.samples, b.samples)


@pytest.mark.parametrize("prior_std", [0.3, {"*.bias": 3.0, "*": 0.3}])
def test_an_energy_pickled_before_the_prior_split_keeps_its_rounding(prior_std):
    """prior_std's Normal computes ½·θᵀθ/σ² and θ/σ² in fused forms (issue 23: the bound Normal's
    ``fuse``). An energy pickled before that (its bound Normal without ``_fused``) is fused again
    when loaded: a resumed chain rounds as the run that wrote it, bit for bit."""
    torch.manual_seed(0)
    energy = sm.ModuleEnergy(
        nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2)), prior_std=prior_std, num_data=40
    )
    old = copy.copy(energy)  # the state an older version pickled
    old.prior = copy.copy(energy.prior)
    del old.prior.__dict__["_fused"]
    old._uniform_precision = energy.prior._fused[0]
    loaded = pickle.loads(pickle.dumps(old))
    g = torch.Generator().manual_seed(1)
    theta = 3 * torch.randn(3, energy.space.dim, generator=g)
    batch = _data(3)
    value, grad = energy.value_and_grad(theta, batch)
    value_loaded, grad_loaded = loaded.value_and_grad(theta, batch)
    assert torch.equal(value_loaded, value) and torch.equal(grad_loaded, grad)
