"""ModuleEnergy(sample=...): only the selected parameters are sampled; the others stay fixed
and get no gradient; the chain on the subset is the chain of the same model written by hand
on the last layer's features."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.gibbs import MetropolisWithinGibbs
from structmc.partitions import by_layer, by_neuron

F64 = torch.float64


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def _data(n=40):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, generator=g, dtype=F64), torch.randint(0, 2, (n,), generator=g)


@pytest.mark.parametrize(
    "sample",
    ["4.*", ["4.weight", "4.bias"], lambda name, p: name.startswith("4.")],
    ids=["pattern", "list", "predicate"],
)
def test_last_layer_chain_equals_the_hand_written_one(sample):
    net, (x, y) = _net(), _data()
    e = sm.ModuleEnergy(net, "categorical", sample=sample, prior_std=2.0)
    assert e.space.names == ["4.weight", "4.bias"] and e.space.dim == 10
    body = net[:4]
    with torch.no_grad():
        feats = body(x)

    def log_lik(theta, batch):
        f, t = batch
        logits = f @ theta[:8].view(2, 4).T + theta[8:]
        return -nn.functional.cross_entropy(logits, t, reduction="sum")

    hand = sm.LogDensityEnergy(dim=10, log_likelihood=log_lik, log_prior=lambda t: -0.5 * (t * t).sum() / 4.0)
    init = e.initial_position()
    torch.testing.assert_close(init, torch.cat([net[4].weight.detach().reshape(-1), net[4].bias.detach()]))
    for C in (1, 3):
        kw = dict(batch_size=8, num_chains=C, seed=3, progress=False)
        a = sm.sample(e, None, sm.SGLD(1e-3), 25, data=(x, y), **kw)
        b = sm.sample(hand, init, sm.SGLD(1e-3), 25, data=(feats, y), **kw)
        torch.testing.assert_close(a.samples, b.samples, rtol=1e-10, atol=1e-12)
    # the body is untouched, takes no gradient, and is the module's own (on its device)
    fixed = dict(e.module.named_parameters())
    for name, p in net.named_parameters():
        if not name.startswith("4."):
            assert not fixed[name].requires_grad and fixed[name].grad is None
            assert torch.equal(fixed[name], p)


def test_partitions_and_gibbs_blocks_follow_the_subset():
    net, (x, y) = _net(), _data()
    e = sm.ModuleEnergy(net, "categorical", sample=["2.*", "4.*"])
    assert [layer.name for layer in e.space.layers] == ["2", "4"]
    assert by_layer(e.space).num_groups == 2 and by_neuron(e.space).num_groups == 4 + 2
    chain = sm.sample(
        e, None, MetropolisWithinGibbs(by_neuron(e.space), 0.01), 5, data=(x, y), batch_size=10, progress=False
    )
    assert chain.samples.shape == (1, 5, 4 * 5 + 4 + 2 * 4 + 2)
    assert chain.space.names == ["2.weight", "2.bias", "4.weight", "4.bias"]


def test_a_selection_of_nothing_is_a_clear_error():
    net = _net()
    with pytest.raises(
        ValueError,
        match=r"sample pattern\(s\) \['fc.\*'\] select no parameter; the parameters are: "
        r"0.weight, 0.bias",
    ):
        sm.ModuleEnergy(net, "categorical", sample="fc.*")
    with pytest.raises(ValueError, match="the predicate selects no parameter"):
        sm.ModuleEnergy(net, "categorical", sample=lambda n, p: False)
    with pytest.raises(TypeError, match="sample must be a name pattern"):
        sm.ModuleEnergy(net, "categorical", sample=[3])
    # the caller's module is never modified
    assert all(p.requires_grad for p in net.parameters())
