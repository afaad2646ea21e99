"""Energies declare what the run loop asks of them (issue 23): ``check``, ``describe``,
``has_buffers`` and, for a wrapper, the pass-throughs of :class:`structmc.energy.WrappedEnergy`.
An energy defined here, outside structmc, runs, checks, resumes and is fingerprinted with no
change to the run loop."""

from __future__ import annotations

import json

import pytest
import torch
from support.items import Items
from torch import nn

import structmc as sm
from structmc import fingerprint
from structmc.energy import Energy, EnergyBase, WrappedEnergy
from structmc.partitions import round_robin
from structmc.priors import HierarchicalEnergy, Laplace
from structmc.structured import BernoulliMask, StructuredEnergy


class Tempered(WrappedEnergy):
    """U/T: a wrapper the run loop has never heard of."""

    def __init__(self, base, temperature):
        super().__init__(base)
        self.temperature = float(temperature)

    def value_and_grad(self, theta, batch):
        u, g = self.base.value_and_grad(theta, batch)
        return u / self.temperature, g / self.temperature

    def value(self, theta, batch):
        return self.base.value(theta, batch) / self.temperature


def _problem():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(120, 5, generator=g)
    y = (X[:, 0] - X[:, 1] > 0).long()
    torch.manual_seed(0)
    return sm.ModuleEnergy(nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 2))), (X, y)


def test_a_wrapper_defined_outside_structmc_is_the_energy_it_computes():
    """T = 2 halves U and ∇U exactly (a power of two), so the tempered chain is, bit for bit,
    the chain of the density log p / 2 written out by hand."""
    base = sm.LogDensityEnergy(lambda t, b: -(t * t).sum(), 3)
    by_hand = sm.LogDensityEnergy(lambda t, b: -(t * t).sum() / 2, 3)
    kw = dict(seed=5, num_chains=2, progress=False)
    tempered = sm.sample(Tempered(base, 2.0), torch.ones(3), sm.SGLD(1e-2), 50, **kw)
    direct = sm.sample(by_hand, torch.ones(3), sm.SGLD(1e-2), 50, **kw)
    assert torch.equal(tempered.samples, direct.samples)
    assert torch.equal(tempered.info["energy"], direct.info["energy"])


def test_a_wrapper_forwards_num_data_checks_and_buffers_by_declaration():
    energy, (X, y) = _problem()
    wrapped = Tempered(energy, 2.0)
    assert isinstance(wrapped, Energy)
    assert (wrapped.space, wrapped.device, wrapped.dtype, wrapped.requires_data, wrapped.has_buffers) == (
        energy.space,
        energy.device,
        energy.dtype,
        True,
        False,
    )
    # sample() fills num_data by rebuilding the wrapper around base.with_num_data(N)
    init = energy.initial_position()
    run = sm.Run(wrapped, init, sm.SGLD(1e-3), data=(X, y), batch_size=20)
    assert isinstance(run.energy, Tempered) and run.energy.temperature == 2.0
    assert run.energy.num_data == 120 and run.energy.base.num_data == 120 and wrapped.num_data is None
    assert run.energy.base is not energy  # a copy: the caller's energy is untouched
    # the base's checks run through the wrapper, before any compute (tensors, then a Dataset)
    with pytest.raises(ValueError, match=r"input 0 has dtype torch.float64"):
        sm.Run(wrapped, init, sm.SGLD(1e-3), data=(X.double(), y), batch_size=20)
    with pytest.raises(ValueError, match=r"the Dataset's items do not match the energy: input 0 has dtype"):
        sm.Run(wrapped, init, sm.SGLD(1e-3), data=Items(X.double(), y), batch_size=20)
    boxed = energy.with_prior(lambda t: torch.where(t.abs().max() < 1, -0.5 * t.square().sum(), -torch.inf))
    with pytest.raises(ValueError, match=r"the prior's log density is -inf at the initial position of chain 0"):
        sm.Run(Tempered(boxed, 2.0), torch.full((energy.space.dim,), 5.0), sm.SGLD(1e-3), data=(X, y), batch_size=20)


def test_a_new_wrapper_resumes_and_a_changed_one_is_refused(tmp_path):
    energy, data = _problem()
    init = energy.initial_position()
    kw = dict(data=data, batch_size=20, seed=3, num_chains=2, progress=False)
    full = sm.sample(Tempered(energy, 2.0), init, sm.SGLD(1e-3), 30, **kw)
    sm.sample(Tempered(energy, 2.0), init, sm.SGLD(1e-3), 12, out_dir=tmp_path, **kw)
    resumed = sm.sample(Tempered(energy, 2.0), init, sm.SGLD(1e-3), 30, out_dir=tmp_path, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples)
    with pytest.raises(ValueError, match=r"the target changed since the checkpoint: the energy object"):
        sm.sample(Tempered(energy, 4.0), init, sm.SGLD(1e-3), 30, out_dir=tmp_path, resume=True, **kw)
    other, _ = _problem()
    with pytest.raises(ValueError, match=r"the target changed since the checkpoint: the prior"):
        sm.sample(
            Tempered(other.with_prior(Laplace(1.0)), 2.0), init, sm.SGLD(1e-3), 30, out_dir=tmp_path, resume=True, **kw
        )


def test_describe_is_json_and_nests_the_base():
    energy, _ = _problem()
    part = round_robin(energy.space.dim, 2)
    cases = {
        "module": energy,
        "density": sm.LogDensityEnergy(lambda t, b: -(t * t).sum(), 3),
        "structured": StructuredEnergy(energy, part, 10, mask=BernoulliMask(0.5), num_copies=2),
        "hierarchical": HierarchicalEnergy(energy),
        "noisy": sm.NoisyGradientEnergy(energy, 0.1),
        "tempered": Tempered(HierarchicalEnergy(energy), 2.0),
    }
    kinds = {
        "module": ["ModuleEnergy"],
        "density": ["LogDensityEnergy"],
        "structured": ["StructuredEnergy", "ModuleEnergy"],
        "hierarchical": ["HierarchicalEnergy", "ModuleEnergy"],
        "noisy": ["NoisyGradientEnergy", "ModuleEnergy"],
        "tempered": ["Tempered", "HierarchicalEnergy", "ModuleEnergy"],
    }
    for name, e in cases.items():
        d = e.describe()
        assert json.loads(json.dumps(d)) == d, name
        chain, level = [], d
        while level is not None:
            chain.append(level["kind"])
            level = level.get("base")
        assert chain == kinds[name]
        assert fingerprint.energy_fingerprint(e)["energy"] == kinds[name]
    assert set(cases["module"].describe()) == {"kind", "num_data", "module", "module_state", "likelihood", "prior"}
    assert cases["structured"].describe()["structured"] == cases["structured"].config()
    assert "energy_object" in cases["tempered"].describe()
    # the wrapper's own attributes define it, not its base (described apart)
    assert (
        cases["tempered"].describe()["energy_object"]
        != Tempered(HierarchicalEnergy(energy), 3.0).describe()["energy_object"]
    )
    assert Tempered(energy, 2.0).describe()["energy_object"] == Tempered(_problem()[0], 2.0).describe()["energy_object"]


def test_per_chain_buffers_are_declared_through_a_wrapper():
    """A wrapper over a module with BatchNorm declares its buffers: before, the run loop probed
    ``getattr(energy, "has_buffers", False)`` on the wrapper, found nothing, and the chain lost
    each chain's running statistics."""
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(60, 5, generator=g), torch.randint(0, 2, (60,), generator=g)
    torch.manual_seed(0)
    base = sm.ModuleEnergy(nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)))
    noisy = sm.NoisyGradientEnergy(base, 0.01)
    assert noisy.has_buffers and not sm.LogDensityEnergy(lambda t, b: -(t * t).sum(), 3).has_buffers
    chain = sm.sample(
        noisy, base.initial_position(), sm.SGLD(1e-4), 5, data=(X, y), batch_size=20, num_chains=2, progress=False
    )
    assert chain.buffers is not None and len(chain.buffers) == 2
    assert not torch.equal(chain.buffers[0]["1.running_mean"], chain.buffers[1]["1.running_mean"])


def test_an_energy_without_the_declared_members_is_refused_naming_them():
    class Old:  # the protocol of 0.1: computes U, declares nothing else
        space = sm.ParamSpace.flat(2)
        num_data = None
        evaluations_per_call = 1
        requires_data = False
        device = dtype = None
        cv_base = property(lambda self: self)

        def value_and_grad(self, theta, batch):
            return theta.square().sum(1), 2 * theta

        def value(self, theta, batch):
            return theta.square().sum(1)

        def with_num_data(self, num_data):
            return self

    with pytest.raises(TypeError, match=r"missing \['has_buffers', 'check', 'describe'\].*EnergyBase"):
        sm.sample(Old(), torch.zeros(2), sm.SGLD(0.1), 5, progress=False)

    class New(EnergyBase, Old):  # the defaults: it runs
        pass

    chain = sm.sample(New(), torch.zeros(2), sm.SGLD(0.1), 5, progress=False)
    assert chain.samples.shape == (1, 5, 2)
