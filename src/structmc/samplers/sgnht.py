r"""Stochastic gradient Nosé–Hoover thermostat (Ding et al. 2014, Alg. 2, in the
SGHMC-style parameterisation u = εp, η = ε²).

.. math::
    u_{t+1} &= u_t - \xi_t u_t - \eta\nabla\hat U(\theta_t) + \mathcal N(0, 2 a \eta T) \\
    \theta_{t+1} &= \theta_t + u_{t+1} \\
    \xi_{t+1} &= \xi_t + \tfrac{1}{P}u_{t+1}^\top u_{t+1} - \eta T

``lr`` is η, ``a`` the diffusion parameter (the thermostat starts at ξ₀ = a). The thermostat
ξ is one scalar per chain; it adapts the friction until the kinetic temperature
uᵀu/P equals ηT, absorbing unknown gradient noise.

**Guard** (``max_friction``, default 1): after its update ξ is capped at 1. The momentum update
multiplies u by (1 − ξ); past ξ = 1 it flips the momentum, and past 2 it amplifies it, so from a
dispersed start (a large first uᵀu/P) the chain diverges within a few steps (ξ = 2.4 after one
step at η = 0.01, then |u| 7.2 → 1.5e4 → NaN). Near equilibrium ξ ≈ a ≪ 1 and the cap never acts:
there the chain is exactly Ding et al.'s. ``max_friction=None`` removes the cap.

**One thermostat for all coordinates**: with minibatch gradients whose noise differs across
coordinates (a hierarchical model, a network's layers), the single ξ settles on the average
noise; coordinates with little gradient noise are over-damped and sampled too narrowly (measured:
posterior sd −49 % and −55 % on a hierarchical model's low-noise coordinates). For uneven noise
prefer SGHMC with a noise estimate or pSGLD.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from .sampler import Sampler, check_nonnegative, normal_like


@dataclass
class SGNHTState:
    theta: Tensor  # [C, P]
    momentum: Tensor  # u, [C, P]
    thermostat: Tensor  # ξ, [C, 1]
    step: int = 0


class SGNHT(Sampler):
    name = "sgnht"
    State = SGNHTState

    def __init__(
        self,
        lr,
        a: float = 0.01,
        *,
        num_leapfrog: int = 1,
        temperature: float = 1.0,
        max_friction: float | None = 1.0,
    ):
        super().__init__(lr, temperature, num_leapfrog)
        self.a = check_nonnegative("a", a)
        if max_friction is not None and not (isinstance(max_friction, (int, float)) and 0 < max_friction <= 2):
            raise ValueError(
                f"max_friction must be in (0, 2] (above 2 the momentum update amplifies), or None; got {max_friction!r}"
            )
        # private, so that config() (and the resume check of older run folders) is unchanged at the default
        self._max_friction = None if max_friction is None else float(max_friction)

    def init(self, theta: Tensor, generator=None) -> SGNHTState:
        theta = theta.detach().clone()
        u = normal_like(theta, generator).mul_(math.sqrt(self.lr(0) * self.temperature))
        return SGNHTState(theta, u, theta.new_full((theta.shape[0], 1), self.a))

    def config(self) -> dict:
        out = super().config()
        if self._max_friction != 1.0:
            out["max_friction"] = self._max_friction
        return out

    def records(self, state) -> dict:
        return {"thermostat": state.thermostat[:, 0].clone()}  # ξ per chain: the friction it settled on

    def draws_noise(self, lr: float) -> bool:
        return self.a > 0 and self.temperature > 0

    def update(self, state: SGNHTState, grad: Tensor, lr: float, generator) -> SGNHTState:
        u = state.momentum
        u.sub_(u * state.thermostat).add_(grad, alpha=-lr)
        if self.a > 0 and self.temperature > 0:
            u.add_(self._noise(u, generator), alpha=math.sqrt(2 * self.a * lr * self.temperature))
        state.theta.add_(u)
        state.thermostat.add_(u.square().mean(-1, keepdim=True) - lr * self.temperature)
        if self._max_friction is not None:  # the guard (module docstring): inactive near equilibrium
            state.thermostat.clamp_(max=self._max_friction)
        state.step += 1
        return state
