"""The run loop's validation: clear ValueError before any compute."""

from __future__ import annotations

import math

import pytest
import torch
from support.runs import gaussian_log_prob
from torch import nn

import structmc as sm


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_steps": 0}, "num_steps"),
        ({"thin": 0}, "thin"),
        ({"burn_in": -1}, "burn_in"),
        ({"burn_in": 10}, "burn_in"),
        ({"num_chains": 0}, "num_chains"),
        ({"batch_size": 100}, "batch_size"),
        ({"batch_size": 0}, "batch_size"),
        ({"batching": "random"}, "batching"),
        ({"init": torch.zeros(5)}, "init must have shape"),
        ({"init": torch.zeros(3, 2)}, "init must have shape"),
        ({"init": torch.tensor([0.0, math.nan])}, "NaN"),
        ({"checkpoint_every": 5}, "out_dir"),
        ({"resume": True}, "out_dir"),
        ({"keep_in_memory": False}, "out_dir"),
        ({"num_steps": 5, "burn_in": 2, "thin": 4}, "no draw"),
        ({"seed": -1}, "seed"),
    ],
)
def test_invalid_arguments_raise_before_compute(kwargs, match):
    calls = []

    def log_prob(theta, batch):
        calls.append(1)
        return -0.5 * (theta * theta).sum()

    args = dict(num_steps=10, data=(torch.randn(20, 1),), init=torch.zeros(2))
    args.update(kwargs)
    init, num_steps = args.pop("init"), args.pop("num_steps")
    with pytest.raises(ValueError, match=match):
        sm.sample(sm.LogDensityEnergy(log_prob, 2), init, sm.SGLD(0.1), num_steps, **args)
    assert not calls, "the target was evaluated before the arguments were validated"


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: sm.SGLD(-0.1), "lr"),
        (lambda: sm.SGLD(0.1, temperature=-1), "temperature"),
        (lambda: sm.PSGLD(0.1, alpha=1.0), "alpha"),
        (lambda: sm.SGHMC(0.1, friction=0.0), "friction"),
        (lambda: sm.SGHMC(0.1, friction=0.1, beta_hat=0.2), "beta_hat"),
        (lambda: sm.SGHMC(0.1, num_leapfrog=0), "num_leapfrog"),
        (lambda: sm.SGNHT(0.1, a=-1), "a must"),
        (lambda: sm.StepDecay(0.1, every=0), "every"),
        (lambda: sm.Polynomial(0.1, b=1, gamma=2), "gamma"),
        (lambda: sm.Cyclical(0.1, num_steps=2, num_cycles=3), "num_cycles"),
        (lambda: sm.ModuleEnergy(nn.Linear(2, 1), "gaussian"), "noise_std"),
        (lambda: sm.ModuleEnergy(nn.Linear(2, 1), "poisson"), "likelihood"),
        (lambda: sm.ModuleEnergy(nn.Linear(2, 1), prior_std=0.0), "prior_std"),
        (lambda: sm.ModuleEnergy(nn.Linear(2, 1), prior_std={"bias": 1.0}), "matches no pattern"),
    ],
)
def test_invalid_configuration(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_data_shape_mismatch():
    with pytest.raises(ValueError, match="first dimension"):
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 5, data=(torch.randn(10, 2), torch.randn(9)))
