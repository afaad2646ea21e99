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
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from .adaptation import WindowAdaptation, WindowState, adapt, rescale_momentum
from .sampler import Sampler, check_int, check_nonnegative, check_number, check_positive, normal_like


@dataclass
class SGHMCState:
    theta: Tensor  # [C, P]
    momentum: Tensor  # v, [C, P]
    step: int = 0
    window: WindowState | None = None  # a preconditioner's M and its window's sums


class SGHMC(Sampler):
    name = "sghmc"
    State = SGHMCState

    def __init__(
        self,
        lr,
        friction: float = 0.01,
        beta_hat: float = 0.0,
        *,
        num_leapfrog: int = 1,
        resample_momentum: bool = False,
        temperature: float = 1.0,
        preconditioner: WindowAdaptation | None = None,
    ):
        super().__init__(lr, temperature, num_leapfrog)
        self._set_preconditioner(preconditioner)
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
        window = None if self._preconditioner is None else WindowState.start(theta, self._preconditioner)
        return SGHMCState(theta, self._fresh_momentum(theta, lr0, generator), window=window)

    def begin(self, state: SGHMCState, lr: float, generator) -> SGHMCState:
        if self.resample_momentum and state.step > 0:
            state.momentum = self._fresh_momentum(state.theta, lr, generator)
        return state

    def begin_changes_state(self) -> bool:
        return self.resample_momentum

    def draws_noise(self, lr: float) -> bool:
        return 2 * (self.friction - self.beta_hat) * lr * self.temperature > 0

    def update(self, state: SGHMCState, grad: Tensor, lr: float, generator) -> SGHMCState:
        v, window = state.momentum, state.window
        noise_var = 2 * (self.friction - self.beta_hat) * lr * self.temperature
        if window is None:
            v.mul_(1 - self.friction).add_(grad, alpha=-lr)
            if noise_var > 0:
                v.add_(self._noise(v, generator), alpha=math.sqrt(noise_var))
            state.theta.add_(v)
        else:
            # SGHMC on φ = M^{-1/2} θ (a linear change of variables, so the invariant law is kept
            # while M is constant), written for θ and v = M^{1/2} v_φ:
            # v ← (1−α)v − ηM∇Û + M^{1/2}·N(0, 2(α−β̂)ηT), θ ← θ + v
            # (dense: M^{1/2} is M's Cholesky factor L, φ = L⁻¹θ)
            M = window.inverse_mass
            if window.dense:
                v.mul_(1 - self.friction).add_(window.times_inverse_mass(grad), alpha=-lr)
                if noise_var > 0:
                    v.add_(window.times_cholesky(self._noise(v, generator)), alpha=math.sqrt(noise_var))
            else:
                v.mul_(1 - self.friction).addcmul_(grad, M, value=-lr)
                if noise_var > 0:
                    v.addcmul_(self._noise(v, generator), M.sqrt(), value=math.sqrt(noise_var))
            state.theta.add_(v)
            assert self._preconditioner is not None
            previous = adapt(self._preconditioner, self._layout, window, state.step, state.theta, grad)
            if previous is not None:  # a new M: the same v_φ, so v = M^{1/2} v_φ is rescaled
                rescale_momentum(window, previous, v)
        state.step += 1
        return state


@dataclass
class ScaleAdaptedSGHMCState:
    theta: Tensor  # [C, P]
    momentum: Tensor  # v, [C, P]
    tau: Tensor  # τ, the adaptive averaging window, [C, P]
    grad_avg: Tensor  # ḡ, running mean of ∇Û, [C, P]
    v_hat: Tensor  # V̂, running mean of ∇Û², [C, P]
    step: int = 0


class ScaleAdaptedSGHMC(Sampler):
    r"""SGHMC with the scale adaptation of Springenberg, Klein, Falkner & Hutter (2016, eqs. 8–10),
    the SGHMC of the structured SGMCMC paper's ResNet experiments (Alexos et al. 2022, Tables 6, 8).

    For the first ``adapt_steps`` updates, per coordinate (τ₀ = ḡ₀ = V̂₀ = 1, g = ∇Û):

    .. math::
        \tau &\leftarrow \tau - \tau\,\bar g^2/(\hat V + \epsilon) + 1, \qquad
        \bar g \leftarrow \bar g + (g - \bar g)/(\tau + \epsilon), \qquad
        \hat V \leftarrow \hat V + (g^2 - \hat V)/(\tau + \epsilon)

    then V̂ stays fixed. Each update, with the diagonal preconditioner m = 1/(√V̂ + ε):

    .. math::
        v &\leftarrow v - \eta\, m \odot \nabla\hat U - \alpha v
              + \mathcal N\big(0, \max(2\alpha\eta\, m\, T - \eta^2 c, 0)\big), \qquad
        \theta \leftarrow \theta + v

    i.e. :class:`SGHMC` with a per-coordinate step η·m (a diagonal mass, which leaves the
    target invariant once V̂ is fixed). ``noise_correction`` (``c = 1``, the paper's) subtracts
    η², the gradient-noise term 2β̂ηm with β̂ = ½ηm·V̂ (Chen et al. 2014) for V̂ the
    uncentred gradient second moment; ``False`` (``c = 0``) injects the full 2αηmT. The
    momentum starts at 0 (the adapted mass is not known yet). Springenberg et al.'s step ε
    is √η here: their ``lr = 1e-2`` is ``ScaleAdaptedSGHMC(lr=1e-4)``.

    The adaptation window τ shrinks to ~1 when gradients are consistent, so V̂ can follow the
    last gradient: a coordinate whose gradient is exactly 0 then (a masked-out coordinate of
    an Sd-SGMCMC energy, a dead unit) gets V̂ ≈ 0 and a step η/ε. Adapt on whole gradients —
    e.g. during a structured energy's ``warmup_steps`` — or raise ``eps``.
    """

    name = "scale_adapted_sghmc"
    State = ScaleAdaptedSGHMCState

    def __init__(
        self,
        lr,
        friction: float = 0.05,
        *,
        adapt_steps: int = 150,
        noise_correction: bool = True,
        eps: float = 1e-6,
        num_leapfrog: int = 1,
        temperature: float = 1.0,
    ):
        super().__init__(lr, temperature, num_leapfrog)
        self.friction = check_number("friction", friction)
        if not 0 < self.friction <= 1:
            raise ValueError(f"friction must lie in (0, 1], got {friction}")
        self.adapt_steps = check_int("adapt_steps", adapt_steps)
        if self.adapt_steps < 0:
            raise ValueError(f"adapt_steps must be >= 0, got {adapt_steps}")
        self.noise_correction = bool(noise_correction)
        self.eps = check_positive("eps", eps)
        self._clamp_checked_lr: float | None = None  # see _check_clamp

    def init(self, theta: Tensor, generator=None) -> ScaleAdaptedSGHMCState:
        theta = theta.detach().clone()
        return ScaleAdaptedSGHMCState(
            theta, torch.zeros_like(theta), torch.ones_like(theta), torch.ones_like(theta), torch.ones_like(theta)
        )

    def draws_noise(self, lr: float) -> bool:
        return True  # the noise is drawn even where its variance is clamped to 0

    def compile_blocker(self) -> str:
        return "its adaptation switches on the update count and its clamp check reads the device (not traced yet)"

    def update(self, state: ScaleAdaptedSGHMCState, grad: Tensor, lr: float, generator) -> ScaleAdaptedSGHMCState:
        if state.step < self.adapt_steps:  # eqs. 8-9: τ first, then ḡ and V̂ with the new τ
            tau, g, v_hat = state.tau, state.grad_avg, state.v_hat
            tau.sub_(tau * g.square() / (v_hat + self.eps)).add_(1.0)
            inv = (tau + self.eps).reciprocal_()
            g.add_((grad - g).mul_(inv))
            v_hat.add_((grad.square() - v_hat).mul_(inv))
        step = (state.v_hat.sqrt() + self.eps).reciprocal_().mul_(lr)  # η·m
        v = state.momentum
        v.mul_(1 - self.friction).addcmul_(step, grad, value=-1.0)
        noise_var = step * (2 * self.friction * self.temperature)
        if self.noise_correction:
            noise_var.sub_(lr * lr)
            self._check_clamp(state.step, noise_var, lr)
            noise_var.clamp_(min=0.0)
        v.addcmul_(self._noise(v, generator), noise_var.sqrt_())
        state.theta.add_(v)
        state.step += 1
        return state

    def _check_clamp(self, step: int, noise_var: Tensor, lr: float) -> None:
        """Warn when max(2αηmT − η², 0) clamps the noise to 0: those coordinates then move
        deterministically and the chain stops sampling (target variance 1, lr 0.5: chain
        variance 6e-43). One device read, once V̂ is fixed (the last adaptation update) and again
        only when the step size grows past the last one checked, so not one per iteration."""
        if step < self.adapt_steps - 1 or (self._clamp_checked_lr is not None and lr <= self._clamp_checked_lr):
            return
        self._clamp_checked_lr = lr
        clamped = float((noise_var <= 0).double().mean())
        if clamped > 0:
            warnings.warn(
                f"{self.name}: at update {step + 1} the injected noise max(2·α·η·m·T − η², 0) is clamped to 0 on "
                f"{100 * clamped:.3g}% of the coordinates (friction α = {self.friction}, lr η = {lr:g}, T = "
                f"{self.temperature:g}): those coordinates move without noise and the chain no longer samples "
                f"the target there. Lower lr (the noise is positive where η < 2·α·T·m, m = 1/(√V̂ + eps)), raise "
                f"friction, or pass noise_correction=False.",
                RuntimeWarning,
                stacklevel=4,
            )
