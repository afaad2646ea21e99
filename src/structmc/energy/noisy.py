"""Simulated stochastic gradients: :class:`NoisyGradientEnergy`."""

from __future__ import annotations

import copy

import torch
from torch import Tensor

from .bases import WrappedEnergy, _described
from .protocols import Energy, StatefulEnergy


class NoisyGradientEnergy(WrappedEnergy):
    """Wraps an energy and adds i.i.d. N(0, ``noise_std``²) noise to its gradients, drawn
    from its own generator (the pSGLD paper's simulated stochastic gradients, its Fig. 1)."""

    def __init__(self, base: Energy, noise_std: float, *, seed: int = 0):
        if not noise_std > 0:
            raise ValueError("noise_std must be positive")
        super().__init__(base)
        self.noise_std, self.seed = float(noise_std), int(seed)
        self.generator = torch.Generator().manual_seed(self.seed)

    def with_base(self, base: Energy) -> NoisyGradientEnergy:
        """A copy around ``base`` with its own generator, in the same state."""
        new = super().with_base(base)
        new.generator = torch.Generator().manual_seed(self.seed)
        new.generator.set_state(self.generator.get_state())
        return new

    def describe(self) -> dict:
        return _described(self, {"noise": {"noise_std": self.noise_std, "seed": self.seed}}, base=self.base)

    def value_and_grad(self, theta, batch):
        value, grad = self.base.value_and_grad(theta, batch)
        noise = torch.randn(grad.shape, generator=self.generator, dtype=grad.dtype).to(grad.device)
        return value, grad + self.noise_std * noise

    # -- state across iterations (StatefulEnergy): the noise generator is part of the run ------
    # Without this, a second run on the same object continued the first one's noise stream
    # (same seed, another chain) and a resumed run drew other noise than the uninterrupted one.
    def start(self, theta0: Tensor) -> None:
        self.generator = torch.Generator().manual_seed(self.seed)
        if isinstance(self.base, StatefulEnergy):
            self.base.start(theta0)

    def observe(self, theta: Tensor) -> None:
        if isinstance(self.base, StatefulEnergy):
            self.base.observe(theta)

    def state_dict(self) -> dict:
        return {
            "generator": self.generator.get_state(),
            "base": self.base.state_dict() if isinstance(self.base, StatefulEnergy) else None,
        }

    def load_state_dict(self, state: dict, device=None) -> None:
        self.generator = torch.Generator()
        self.generator.set_state(state["generator"])
        if isinstance(self.base, StatefulEnergy) and state.get("base") is not None:
            self.base.load_state_dict(state["base"], device)

    def fresh(self) -> NoisyGradientEnergy:
        """A copy with its own generator at the seed (and a fresh base, if the base keeps state)."""
        new = copy.copy(self)
        new.base = self.base.fresh() if isinstance(self.base, StatefulEnergy) else self.base
        new.generator = torch.Generator().manual_seed(self.seed)
        return new
