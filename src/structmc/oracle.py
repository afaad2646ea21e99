"""The oracle: what a sampler's ``step`` asks about the target.

An :class:`Oracle` binds an energy, a gradient estimator, the run's minibatch stream and its
generator. Gradient samplers call ``oracle(theta)`` — a fresh minibatch and the estimator's
``(Û, ∇Û)`` on it — once per update. Samplers that compare states (Metropolis steps) call
``next_batch()`` once and then ``value(theta)`` / ``value_and_grad(theta)`` as often as they
need: every evaluation until the next ``next_batch()`` sees the same minibatch.

The oracle never raises on NaN/Inf: a gradient sampler's divergence is detected by the run
loop (which names the iteration), a Metropolis step rejects a non-finite proposal. It counts
what it computes: ``grad_evals`` (model gradient evaluations per chain; a control variate
costs 2, S-SGMCMC M, Sd-SGMCMC K) and ``value_evals`` (energy evaluations without gradient),
which the run loop records per iteration and budgets (MAMBA) read.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .batching import MinibatchStream
from .energy import Batch, Energy, HessianDiagEnergy
from .gradients import ControlVariate, Minibatch


class Oracle:
    def __init__(
        self,
        energy: Energy,
        estimator: Minibatch | ControlVariate | None = None,
        stream: MinibatchStream | None = None,
        generator: torch.Generator | None = None,
    ):
        self.energy = energy
        self.estimator = estimator if estimator is not None else Minibatch()
        self.stream = stream
        self.generator = generator
        self.batch: Batch = None
        self.grad_evals = 0
        self.value_evals = 0
        # a Protocol check: once, not per call
        self._hessian_energy = energy if isinstance(energy, HessianDiagEnergy) else None

    def next_batch(self) -> Batch:
        """Draw the next minibatch (one per chain); later evaluations use it."""
        self.batch = self.stream.next() if self.stream is not None else None
        return self.batch

    def gradient_cost(self) -> int:
        """Model gradient evaluations per chain of one :meth:`value_and_grad`."""
        energy = self.energy
        cost = energy.evaluations_per_call
        if self.estimator.evaluations > 1:  # the centre terms run on the control-variate base
            cost += (self.estimator.evaluations - 1) * energy.cv_base.evaluations_per_call
        return cost

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """The estimator's ``(Û [C], ∇Û [C, P])`` at ``theta`` on the current minibatch."""
        self.grad_evals += self.gradient_cost()
        return self.estimator(self.energy, theta, self.batch)

    def value(self, theta: Tensor) -> Tensor:
        """The minibatch energy ``Û [C]`` at ``theta`` on the current minibatch (no gradient)."""
        self.value_evals += self.energy.evaluations_per_call
        return self.energy.value(theta, self.batch)

    def __call__(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """A fresh minibatch and the gradient estimate on it: one update's worth."""
        self.next_batch()
        return self.value_and_grad(theta)

    def hessian_diag(self, theta: Tensor, num_probes: int = 1) -> Tensor:
        """diag ∇²Û ``[C, P]`` on the current minibatch (pSGLD's Γ; Hutchinson probes)."""
        hessian_energy = self._hessian_energy
        if hessian_energy is None:
            raise ValueError(f"{type(self.energy).__name__} has no hessian_diag()")
        self.grad_evals += num_probes * self.energy.evaluations_per_call
        return hessian_energy.hessian_diag(theta, self.batch, self.generator, num_probes)
