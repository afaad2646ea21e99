"""Problems shared by the run-loop tests (validation, resume, divergence, predictive)."""

from __future__ import annotations

import torch
from torch import nn

import structmc as sm


def gaussian_log_prob(theta, batch):
    return -0.5 * (theta * theta).sum()


def linreg_problem(n=64, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    y = X @ torch.tensor([1.0, -2.0, 0.5])[:d] + 0.3 * torch.randn(n, generator=g)
    return X, y


def mlp_energy(seed=0, num_data=None):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(90, 4, generator=g)
    y = torch.randint(0, 3, (90,), generator=g)
    return sm.ModuleEnergy(net, "categorical", prior_std={"*.bias": 3.0, "*": 1.0}, num_data=num_data), (X, y)


ALL_SAMPLERS = [
    lambda: sm.SGLD(1e-3),
    lambda: sm.PSGLD(1e-4),
    lambda: sm.SGHMC(1e-4, friction=0.1, num_leapfrog=2, resample_momentum=True),
    lambda: sm.SGNHT(1e-4, a=0.1, num_leapfrog=2),
]


class Interrupt(Exception):
    """Raised by :func:`interrupt_at` to stop a run as a crash would."""


def interrupt_at(iteration: int):
    """A ``sample(callback=...)`` that raises :class:`Interrupt` after ``iteration``."""

    def callback(t, state):
        if t == iteration:
            raise Interrupt

    return callback
