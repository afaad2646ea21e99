r"""Preconditioned SGLD with an RMSprop preconditioner (Li, Chen, Carlson & Carin 2016, Alg. 1).

.. math::
    V_t &= \alpha V_{t-1} + (1-\alpha)\,\bar g_t \odot \bar g_t, \qquad
    G_t = \mathrm{diag}\big(1 \oslash (\lambda + \sqrt{V_t})\big) \\
    \theta_{t+1} &= \theta_t - \frac{\epsilon_t}{2}\big[G_t \nabla\hat U(\theta_t) - \Gamma_t\big]
                    + \mathcal N(0, \epsilon_t T\, G_t)

with ḡ the per-datum gradient, taken here as ∇Û/N (``num_data`` = N; the prior's share,
divided by N, is included). Defaults α = 0.99, λ = 1e-5, V₀ = 0 as in Algorithm 1
(``v_init="first"`` starts from ḡ₁², as the authors' Matlab code does).
Γ_i = ∂G_ii/∂θ_i is omitted by default — the paper's practical choice (their §"Preconditioned
SGLD Algorithms in Practice"). Note that the larger bias of adaptive preconditioning comes from
V lagging θ's recent history, which Γ does not model: on a N(0, 100) coordinate with εGh ≈ 0.004
we measured the variance inflated by 65% at α = 0.99, 20% at 0.999 and 2% at 0.9999, with or
without Γ (tests/test_samplers_statistical.py); use α close to 1 when the variance matters.
With ``include_gamma=True``, Γ is computed by the chain rule through the V update,

.. math:: \Gamma_i = -\frac{(1-\alpha)\,\bar g_i\, h_i / N}{(\lambda+\sqrt{V_i})^2\sqrt{V_i}},
          \qquad h_i = \partial^2 \hat U/\partial\theta_i^2,

with h from the energy's ``hessian_diag`` (Hutchinson, ``gamma_probes`` Rademacher probes, on
the same minibatch; one extra backward pass per probe). Γ is large while V is small: at the
first step with ``v_init="first"`` (V₁ = ḡ₁², so ∂V/∂θ = 2ḡ₁h and Γ ≈ −h/ḡ₁²) and while a
zero-started V is still (1 − αᵗ)-biased low. On the pSGLD paper's Fig. 1 Gaussian (ḡ₁ ≈ 0.1 at
θ₀ = 0, α = 0.9999) most chains jump 10⁴–10⁶ away in the first step and never return (measured
for ε = 0.01–0.3; issue 26's Corollary 2 check), so start Γ from a settled V, not a cold one.

Step size: G ≈ 1/|ḡ| makes the drift (ε/2)G∇Û ≈ εN/2 per coordinate, so ε is typically N
times smaller than for a per-datum-loss optimiser. The authors' Matlab code applies its
``learningRate`` to G·ḡ (no factor N), i.e. ε = 2·learningRate/N, and divides its noise by N
(an effective temperature of 1/N); here T stays explicit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .sampler import Sampler, check_int, check_number, check_positive


@dataclass
class PSGLDState:
    theta: Tensor  # [C, P]
    square_avg: Tensor  # V, [C, P]
    step: int = 0


class PSGLD(Sampler):
    name = "psgld"
    State = PSGLDState

    def __init__(
        self,
        lr,
        alpha: float = 0.99,
        eps: float = 1e-5,
        *,
        num_data: int | None = None,
        temperature: float = 1.0,
        v_init: str = "zeros",
        include_gamma: bool = False,
        gamma_probes: int = 1,
    ):
        super().__init__(lr, temperature)
        if not 0 <= check_number("alpha", alpha) < 1:
            raise ValueError(f"alpha must lie in [0, 1), got {alpha}")
        if v_init not in ("zeros", "first"):
            raise ValueError(f"v_init must be 'zeros' or 'first', got {v_init!r}")
        if num_data is not None and check_int("num_data", num_data) < 1:
            raise ValueError(f"num_data must be positive, got {num_data}")
        self.alpha = float(alpha)
        # eps = 0 divides by sqrt(V) = 0 wherever a gradient coordinate is zero (and at V0 = 0)
        self.eps = check_positive("eps", eps)
        self.num_data = None if num_data is None else int(num_data)
        self.v_init = v_init
        self.include_gamma = bool(include_gamma)
        self.gamma_probes = check_int("gamma_probes", gamma_probes)
        if self.gamma_probes < 1:
            raise ValueError(f"gamma_probes must be >= 1, got {gamma_probes}")

    def init(self, theta: Tensor, generator=None) -> PSGLDState:
        theta = theta.detach().clone()
        return PSGLDState(theta, torch.zeros_like(theta))

    def prepare(self, energy) -> PSGLD:
        """Takes N from the energy when ``num_data`` is ``None`` (the per-datum gradient ḡ =
        ∇Û/N); ``include_gamma`` needs an energy with ``hessian_diag``."""
        from ..energy import HessianDiagEnergy

        if self.include_gamma and not isinstance(energy, HessianDiagEnergy):
            raise ValueError(
                f"pSGLD with include_gamma=True needs an energy with hessian_diag(); "
                f"{type(energy).__name__} has none (structured energies have no Hessian diagonal)"
            )
        new = super().prepare(energy)
        assert isinstance(new, PSGLD)  # Sampler.prepare returns a copy of self
        if new.num_data is None and energy.num_data is not None:
            new.num_data = int(energy.num_data)
        return new

    def compile_blocker(self) -> str:
        return (
            "include_gamma=True draws Hutchinson probes inside the step (not traced yet)" if self.include_gamma else ""
        )

    def step(self, state, oracle, lr, generator):
        energy, grad = oracle(state.theta)
        hdiag = oracle.hessian_diag(state.theta, self.gamma_probes) if self.include_gamma else None
        return self.update(state, grad, lr, generator, hessian_diag=hdiag), {"energy": energy}

    def update(
        self, state: PSGLDState, grad: Tensor, lr: float, generator, hessian_diag: Tensor | None = None
    ) -> PSGLDState:
        per_datum = grad if self.num_data is None else grad / self.num_data
        first = state.step == 0 and self.v_init == "first"
        if first:
            state.square_avg.copy_(per_datum.square())
        else:
            state.square_avg.mul_(self.alpha).addcmul_(per_datum, per_datum, value=1 - self.alpha)
        root_v = state.square_avg.sqrt()
        precond = (root_v + self.eps).reciprocal_()  # G
        state.theta.addcmul_(precond, grad, value=-0.5 * lr)
        if self.include_gamma:
            if hessian_diag is None:
                raise ValueError("include_gamma=True needs the energy's Hessian diagonal")
            h_per_datum = hessian_diag if self.num_data is None else hessian_diag / self.num_data
            weight = 1.0 if first else 1 - self.alpha  # ∂V/∂θ = 2·weight·ḡ·h̄
            gamma = -weight * per_datum * h_per_datum * precond.square() / root_v
            state.theta.add_(torch.nan_to_num(gamma, nan=0.0, posinf=0.0, neginf=0.0), alpha=0.5 * lr)
        if self.temperature > 0:
            noise = self._noise(state.theta, generator).mul_(precond.sqrt_())
            state.theta.add_(noise, alpha=(lr * self.temperature) ** 0.5)
        state.step += 1
        return state
