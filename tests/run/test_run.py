"""The run loop: draws, thinning, info, reproducibility, batching."""

from __future__ import annotations

import pytest
import torch
from support.runs import ALL_SAMPLERS, gaussian_log_prob, linreg_problem, mlp_energy

import structmc as sm


# ---------------------------------------------------------------------------------------
# draws, thinning, info
# ---------------------------------------------------------------------------------------
def test_burn_in_thin_and_info_layout():
    chain = sm.sample(
        gaussian_log_prob, torch.zeros(3), sm.SGLD(0.1), 25, burn_in=5, thin=4, num_chains=2, progress=False
    )
    assert chain.samples.shape == (2, 5, 3)
    assert chain.draw_steps.tolist() == [9, 13, 17, 21, 25]
    assert chain.info["lr"].shape == (25,) and torch.allclose(
        chain.info["lr"], torch.full((25,), 0.1, dtype=torch.float64)
    )
    assert chain.info["energy"].shape == (2, 25) and bool(torch.isfinite(chain.info["energy"]).all())
    assert bool((chain.info["time"].diff() >= 0).all())


def test_draws_are_the_states_after_the_kept_iterations():
    seen = {}
    chain = sm.sample(
        gaussian_log_prob,
        torch.zeros(2),
        sm.SGLD(0.1),
        6,
        thin=2,
        progress=False,
        callback=lambda t, state: seen.__setitem__(t, state.theta.clone()),
    )
    for k, t in enumerate(chain.draw_steps.tolist()):
        assert torch.equal(chain.samples[:, k], seen[t])


def test_schedule_is_applied_per_iteration():
    sched = sm.StepDecay(0.4, every=3, factor=0.5)
    chain = sm.sample(gaussian_log_prob, torch.zeros(1), sm.SGLD(sched), 7, progress=False)
    assert chain.info["lr"].tolist() == [0.4, 0.4, 0.4, 0.2, 0.2, 0.2, 0.1]


def test_named_views_of_module_parameters():
    energy, data = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-4), 4, data=data, batch_size=30, progress=False)
    assert chain["0.weight"].shape == (1, 4, 6, 4)
    assert chain["2.bias"].shape == (1, 4, 3)
    assert torch.equal(chain["2.bias"][0, -1], chain.samples[0, -1, -3:])


# ---------------------------------------------------------------------------------------
# reproducibility
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", ALL_SAMPLERS)
@pytest.mark.parametrize("num_chains", [1, 3])
def test_same_seed_same_chain(make, num_chains):
    energy, data = mlp_energy()
    run = lambda seed: sm.sample(
        energy, None, make(), 12, data=data, batch_size=30, seed=seed, num_chains=num_chains, progress=False
    )
    a, b, c = run(7), run(7), run(8)
    assert torch.equal(a.samples, b.samples)
    assert not torch.equal(a.samples, c.samples)


def test_chains_are_independent_streams():
    chain = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.5), 50, num_chains=4, progress=False)
    x = chain.samples[:, -1, 0]
    assert len(set(x.tolist())) == 4


@pytest.mark.parametrize("batching", ["epoch", "with_replacement", "without_replacement"])
def test_batches_differ_between_chains(batching):
    X, y = linreg_problem(n=40)
    seen = []

    def log_prob(theta, batch):
        seen.append(batch[0].clone())
        return -0.5 * (theta * theta).sum(-1)

    sm.sample(
        sm.LogDensityEnergy(log_prob, 2, vectorized=True),
        torch.zeros(2),
        sm.SGLD(0.1),
        1,
        data=(X, y),
        batch_size=8,
        batching=batching,
        num_chains=3,
        progress=False,
    )
    xb = seen[0]
    assert xb.shape == (3, 8, 3)
    assert not torch.equal(xb[0], xb[1])


def test_epoch_batching_visits_every_point_once_per_epoch():
    X = torch.arange(20.0).unsqueeze(1)
    seen = []

    def log_prob(theta, batch):
        seen.append(batch[0].reshape(-1).clone())
        return -0.5 * (theta * theta).sum()

    sm.sample(log_prob, torch.zeros(1), sm.SGLD(0.1), 8, data=(X,), batch_size=6, progress=False)
    # 20 // 6 = 3 steps per epoch; two points are dropped at random each epoch
    epoch1 = torch.cat(seen[:3])
    assert len(set(epoch1.tolist())) == 18
    assert not torch.equal(torch.cat(seen[3:6]), epoch1)
