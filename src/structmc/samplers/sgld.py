r"""Stochastic gradient Langevin dynamics (Welling & Teh 2011, eq. 4).

.. math::  \theta_{t+1} = \theta_t - \frac{\epsilon_t}{2}\nabla\hat U(\theta_t) + \sqrt{\epsilon_t T}\,\xi_t,
           \quad \xi_t \sim \mathcal N(0, I)

``lr`` is ε, ``temperature`` is T (1 samples the posterior, 0 is SGD with step ε/2).

With ``preconditioner=WindowAdaptation(steps)`` the update is preconditioned by a diagonal
inverse mass M per chain, θ ← θ − (ε/2) M ∇Û + √(εTM) ξ, M estimated in Stan's burn-in windows
and frozen after ``steps`` updates (:mod:`structmc.samplers.adaptation`). With
``WindowAdaptation(steps, dense=True)`` M is a dense ``[P, P]`` matrix per chain with Cholesky
factor L (M = LLᵀ, factorised when M is set, not per update): θ ← θ − (ε/2) M∇Û + √(εT) Lξ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from .adaptation import WindowAdaptation, WindowState, adapt
from .sampler import Sampler


@dataclass
class SGLDState:
    theta: Tensor  # [C, P]
    step: int = 0
    window: WindowState | None = None  # a preconditioner's M and its window's sums


class SGLD(Sampler):
    name = "sgld"
    State = SGLDState

    def __init__(self, lr, temperature: float = 1.0, preconditioner: WindowAdaptation | None = None):
        super().__init__(lr, temperature)
        self._set_preconditioner(preconditioner)

    def init(self, theta: Tensor, generator=None) -> SGLDState:
        theta = theta.detach().clone()
        pre = self._preconditioner
        return SGLDState(theta, window=None if pre is None else WindowState.start(theta, pre))

    def update(self, state: SGLDState, grad: Tensor, lr: float, generator) -> SGLDState:
        window = state.window
        if window is None:
            state.theta.add_(grad, alpha=-0.5 * lr)
            if self.temperature > 0:
                state.theta.add_(self._noise(state.theta, generator), alpha=math.sqrt(lr * self.temperature))
        elif window.dense:
            assert self._preconditioner is not None
            state.theta.add_(window.times_inverse_mass(grad), alpha=-0.5 * lr)
            if self.temperature > 0:
                noise = window.times_cholesky(self._noise(state.theta, generator))
                state.theta.add_(noise, alpha=math.sqrt(lr * self.temperature))
            adapt(self._preconditioner, self._layout, window, state.step, state.theta, grad)
        else:
            assert self._preconditioner is not None
            M = window.inverse_mass
            state.theta.addcmul_(grad, M, value=-0.5 * lr)
            if self.temperature > 0:
                noise = self._noise(state.theta, generator)
                state.theta.addcmul_(noise, M.sqrt(), value=math.sqrt(lr * self.temperature))
            adapt(self._preconditioner, self._layout, window, state.step, state.theta, grad)
        state.step += 1
        return state
