r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin 2014, eq. 15).

.. math::
    v_{t+1} &= v_t - \eta\nabla\hat U(\theta_t) - \alpha v_t + \mathcal N\big(0, 2(\alpha-\hat\beta)\eta T\big) \\
    \theta_{t+1} &= \theta_t + v_{t+1}

``lr`` is η (= ε²/M in the paper's notation), ``friction`` is α (= εC/M), ``beta_hat`` is β̂,
the estimated gradient-noise term (0 by default). Momentum starts from N(0, ηT) — the
stationary law of v — and, with ``resample_momentum=True``, is redrawn before each kept
iteration of ``num_leapfrog`` updates (as in the MAMBA reference code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Sampler, check_nonnegative, check_number, normal_like


@dataclass
class SGHMCState:
    theta: Tensor  # [C, P]
    momentum: Tensor  # v, [C, P]
    step: int = 0


class SGHMC(Sampler):
    name = "sghmc"
    State = SGHMCState

    def __init__(self, lr, friction: float = 0.01, beta_hat: float = 0.0, *, num_leapfrog: int = 1,
                 resample_momentum: bool = False, temperature: float = 1.0):
        super().__init__(lr, temperature, num_leapfrog)
        self.friction = check_number("friction", friction)
        self.beta_hat = check_nonnegative("beta_hat", beta_hat)
        if not 0 < self.friction <= 1:
            raise ValueError(f"friction must lie in (0, 1], got {friction}")
        if self.beta_hat > self.friction:
            raise ValueError(f"beta_hat ({beta_hat}) must not exceed friction ({friction})")
        self.resample_momentum = bool(resample_momentum)

    def _fresh_momentum(self, theta: Tensor, lr: float, generator) -> Tensor:
        return normal_like(theta, generator).mul_(math.sqrt(lr * self.temperature))

    def init(self, theta: Tensor, generator=None) -> SGHMCState:
        theta = theta.detach().clone()
        lr0 = self.lr(0)
        return SGHMCState(theta, self._fresh_momentum(theta, lr0, generator))

    def begin(self, state: SGHMCState, lr: float, generator) -> SGHMCState:
        if self.resample_momentum and state.step > 0:
            state.momentum = self._fresh_momentum(state.theta, lr, generator)
        return state

    def update(self, state: SGHMCState, grad: Tensor, lr: float, generator) -> SGHMCState:
        v = state.momentum
        v.mul_(1 - self.friction).add_(grad, alpha=-lr)
        noise_var = 2 * (self.friction - self.beta_hat) * lr * self.temperature
        if noise_var > 0:
            v.add_(self._noise(v, generator), alpha=math.sqrt(noise_var))
        state.theta.add_(v)
        state.step += 1
        return state
