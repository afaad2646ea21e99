r"""Stochastic gradient Langevin dynamics (Welling & Teh 2011, eq. 4).

.. math::  \theta_{t+1} = \theta_t - \frac{\epsilon_t}{2}\nabla\hat U(\theta_t) + \sqrt{\epsilon_t T}\,\xi_t,
           \quad \xi_t \sim \mathcal N(0, I)

``lr`` is ε, ``temperature`` is T (1 samples the posterior, 0 is SGD with step ε/2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from .sampler import Sampler


@dataclass
class SGLDState:
    theta: Tensor  # [C, P]
    step: int = 0


class SGLD(Sampler):
    name = "sgld"
    State = SGLDState

    def __init__(self, lr, temperature: float = 1.0):
        super().__init__(lr, temperature)

    def init(self, theta: Tensor, generator=None) -> SGLDState:
        return SGLDState(theta.detach().clone())

    def update(self, state: SGLDState, grad: Tensor, lr: float, generator) -> SGLDState:
        state.theta.add_(grad, alpha=-0.5 * lr)
        if self.temperature > 0:
            state.theta.add_(self._noise(state.theta, generator), alpha=math.sqrt(lr * self.temperature))
        state.step += 1
        return state
