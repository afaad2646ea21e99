"""Posterior predictive averages over draws, and find_map on linear regression."""

from __future__ import annotations

import pytest
import torch
from support.runs import linreg_problem, mlp_energy
from torch import nn

import structmc as sm


def test_predictive_classification_and_regression():
    energy, (X, y) = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 20, data=(X, y), batch_size=30, num_chains=2, progress=False)
    out = sm.predictive(energy, chain, X, batch_size=7, draws_per_call=8)
    manual = torch.stack(
        [
            torch.func.functional_call(energy.module, energy.space.unflatten(s), (X,)).softmax(-1)
            for s in chain.flat_draws()
        ]
    ).mean(0)
    assert torch.allclose(out["probs"], manual, atol=1e-6)

    lin = sm.ModuleEnergy(nn.Linear(2, 1), "gaussian", noise_std=0.5)
    Xr = torch.randn(30, 2)
    ch = sm.sample(lin, None, sm.SGLD(1e-3), 30, data=(Xr, Xr.sum(1)), num_chains=2, progress=False)
    pred = sm.predictive(lin, ch, Xr)
    f = ch.flat_draws()[:, :2] @ Xr.T + ch.flat_draws()[:, 2:3]
    assert torch.allclose(pred["mean"], f.mean(0), atol=1e-5)
    assert torch.allclose(pred["var"], f.var(0, unbiased=False) + 0.25, atol=1e-5)


def test_find_map_reaches_the_linear_regression_mode():
    X, y = linreg_problem(n=200)
    energy = sm.ModuleEnergy(nn.Linear(3, 1, bias=False), "gaussian", noise_std=0.3, prior_std=10.0)
    theta = sm.find_map(energy, energy.initial_position(), data=(X, y), num_steps=1500, lr=5e-2)
    A = X.T @ X / 0.09 + torch.eye(3) / 100.0
    exact = torch.linalg.solve(A, X.T @ y / 0.09)
    assert torch.allclose(theta, exact, atol=2e-3)


def test_predictive_per_draw_keeps_the_draws_layout():
    """per_draw=True: each draw's class probabilities in the draws' layout ([C, D, n, K]; [S, n, K];
    [D, n, K] with chain=c), whose mean over draws is the default output."""
    energy, (X, _) = mlp_energy()
    g = torch.Generator().manual_seed(1)
    draws = energy.initial_position() + 0.3 * torch.randn(3, 4, energy.space.dim, generator=g)  # [C, D, P]
    per = sm.predictive(energy, draws, X, batch_size=7, draws_per_call=5, per_draw=True)["probs"]
    assert per.shape == (3, 4, 90, 3)
    manual = torch.stack(
        [
            torch.func.functional_call(energy.module, energy.space.unflatten(s), (X,)).softmax(-1)
            for s in draws.reshape(12, -1)
        ]
    ).view(3, 4, 90, 3)
    torch.testing.assert_close(per, manual, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(per.mean((0, 1)), sm.predictive(energy, draws, X)["probs"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sm.predictive(energy, draws, X, chain=2, per_draw=True)["probs"], manual[2])
    assert sm.predictive(energy, draws.reshape(12, -1), X, per_draw=True)["probs"].shape == (12, 90, 3)
    lin = sm.ModuleEnergy(nn.Linear(2, 1), "gaussian", noise_std=0.5)
    d = lin.initial_position() + torch.randn(2, 5, 3, generator=g)
    Xr = torch.randn(6, 2, generator=g)
    reg = sm.predictive(lin, d, Xr, per_draw=True)
    torch.testing.assert_close(reg["mean"], d[..., :2] @ Xr.T + d[..., 2:3])
    assert reg["var"].shape == (2, 5, 6) and bool((reg["var"] == 0.25).all())


def test_predictive_and_evaluate_go_through_a_structured_energy():
    """A StructuredEnergy predicts with its base model (issue 22 §6.5: predictive raised
    AttributeError 'has_buffers', evaluate TypeError 'needs a ModuleEnergy'); a
    HierarchicalEnergy with the network part of each draw, also under a StructuredEnergy."""
    from structmc.partitions import make_partition
    from structmc.priors import HierarchicalEnergy
    from structmc.structured import BernoulliMask, StructuredEnergy

    energy, (X, y) = mlp_energy()
    g = torch.Generator().manual_seed(2)
    draws = energy.initial_position() + 0.3 * torch.randn(2, 4, energy.space.dim, generator=g)
    for sd in (
        StructuredEnergy(energy, make_partition("layer", energy.space), 10),
        StructuredEnergy(energy, make_partition("layer", energy.space), 10, mask=BernoulliMask(0.5), num_copies=2),
    ):
        torch.testing.assert_close(
            sm.predictive(sd, draws, X)["probs"], sm.predictive(energy, draws, X)["probs"], rtol=0, atol=0
        )
        assert sm.evaluate(sd, draws, (X, y))["pooled"] == sm.evaluate(energy, draws, (X, y))["pooled"]
    h = HierarchicalEnergy(energy, "layer")
    hd = torch.cat([draws, torch.zeros(2, 4, h.num_groups)], -1)  # network part, then log σ_g
    ref = sm.predictive(energy, draws, X)["probs"]
    torch.testing.assert_close(sm.predictive(h, hd, X)["probs"], ref, rtol=0, atol=0)
    hs = StructuredEnergy(h, make_partition("factorized", h.space), 10)
    torch.testing.assert_close(sm.predictive(hs, hd, X)["probs"], ref, rtol=0, atol=0)
    with pytest.raises(TypeError, match="needs a ModuleEnergy"):
        sm.predictive(sm.LogDensityEnergy(lambda t, b: -t.square().sum(), 3), torch.zeros(1, 3), X)
    with pytest.raises(TypeError, match="needs a ModuleEnergy"):
        sm.predictive(
            StructuredEnergy(
                sm.LogDensityEnergy(lambda t, b: -t.square().sum(), 3),
                make_partition("factorized", sm.LogDensityEnergy(lambda t, b: 0, 3).space),
                10,
            ),
            torch.zeros(1, 3),
            X,
        )


def test_find_map_max_seconds_stops_early_on_the_unbounded_path():
    """max_seconds (structmc tune's bound on its MAP fit) stops after the step that passes it; the
    steps taken are exactly those of an unbounded fit of that many steps; info reports them."""
    X, y = linreg_problem(n=200)
    energy = sm.ModuleEnergy(nn.Linear(3, 1, bias=False), "gaussian", noise_std=0.3, prior_std=10.0)
    init = energy.initial_position()
    info = {}
    theta = sm.find_map(energy, init, data=(X, y), batch_size=20, num_steps=10_000, max_seconds=1e-9, info=info)
    assert info["steps"] == 1 and info["stopped_early"] and info["seconds"] > 0
    assert torch.equal(theta, sm.find_map(energy, init, data=(X, y), batch_size=20, num_steps=1))
    full = {}
    sm.find_map(energy, init, data=(X, y), batch_size=20, num_steps=30, max_seconds=60.0, info=full)
    assert full["steps"] == 30 and not full["stopped_early"]
    with pytest.raises(ValueError, match="max_seconds must be > 0"):
        sm.find_map(energy, init, data=(X, y), max_seconds=0)


def test_a_draw_as_a_module_and_the_posterior_predictive_as_a_module():
    """Issue 39 §3: ``draw_module`` is a copy of the network holding one draw (the energy's own
    module untouched); ``PosteriorPredictive`` is the posterior predictive as an ``nn.Module``,
    equal to ``predictive()`` (classification and regression), exportable with ``torch.export``,
    restorable from its ``state_dict``, through a hierarchical model's network part."""
    energy, (X, y) = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 40, data=(X, y), batch_size=16, num_chains=2, thin=4, progress=False)
    before = [p.detach().clone() for p in energy.module.parameters()]
    net = sm.draw_module(energy, chain, 3, chain=1)
    assert not net.training and not any(p.requires_grad for p in net.parameters())
    assert torch.equal(nn.utils.parameters_to_vector(net.parameters()), chain.samples[1, 3])
    manual = torch.func.functional_call(energy.module, energy.space.unflatten(chain.samples[1, 3]), (X,))
    assert torch.equal(net(X), manual)
    assert all(torch.equal(a, b) for a, b in zip(before, energy.module.parameters()))  # the energy's own is not changed
    assert torch.equal(nn.utils.parameters_to_vector(sm.draw_module(energy, chain.flat_draws(), 0).parameters()),
                       chain.samples[0, 0])  # fmt: skip
    with pytest.raises(IndexError, match="draw 10 of 10"):
        sm.draw_module(energy, chain, 10)

    pp = sm.PosteriorPredictive(energy, chain, draws_per_call=3)
    assert pp.num_draws == 20
    out = pp(X)
    assert torch.equal(out["probs"], sm.predictive(energy, chain, X, draws_per_call=3)["probs"])
    assert torch.equal(sm.PosteriorPredictive(energy, chain, chain=1)(X)["probs"],
                       sm.predictive(energy, chain, X, chain=1)["probs"])  # fmt: skip
    exported = torch.export.export(pp, (X[:8],))
    assert torch.equal(exported.module()(X[:8])["probs"], pp(X[:8])["probs"])
    fresh = sm.PosteriorPredictive(energy, torch.zeros_like(chain.samples), draws_per_call=3)
    fresh.load_state_dict(pp.state_dict())
    assert torch.equal(fresh(X)["probs"], out["probs"])

    from structmc.priors import HierarchicalEnergy

    h = HierarchicalEnergy(energy, "layer")
    hd = torch.cat([chain.samples, torch.zeros(2, 10, h.num_groups)], -1)  # the network part, then log σ_g
    assert torch.equal(sm.PosteriorPredictive(h, hd)(X)["probs"], sm.predictive(energy, chain, X)["probs"])
    assert torch.equal(sm.draw_module(h, hd, 3, chain=1)(X), manual)

    lin = sm.ModuleEnergy(nn.Linear(2, 1), "gaussian", noise_std=0.5)
    Xr = torch.randn(30, 2)
    ch = sm.sample(lin, None, sm.SGLD(1e-3), 30, data=(Xr, Xr.sum(1)), num_chains=2, progress=False)
    pred, mine = sm.predictive(lin, ch, Xr), sm.PosteriorPredictive(lin, ch)(Xr)
    assert torch.equal(mine["mean"], pred["mean"]) and torch.equal(mine["var"], pred["var"])


def test_draws_as_modules_refuse_what_they_cannot_hold():
    energy, (X, _) = mlp_energy()
    bad = torch.zeros(5, energy.space.dim)
    bad[2, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or Inf"):
        sm.PosteriorPredictive(energy, bad)
    with pytest.raises(ValueError, match="must be \\[S"):
        sm.draw_module(energy, torch.zeros(5, 3))
    with pytest.raises(TypeError, match="needs a ModuleEnergy"):
        sm.PosteriorPredictive(sm.LogDensityEnergy(lambda t, b: -t.square().sum(), 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="draws_per_call"):
        sm.PosteriorPredictive(energy, torch.zeros(2, energy.space.dim), draws_per_call=0)
