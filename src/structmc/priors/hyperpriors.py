"""Hyperpriors on a prior scale σ, in s = log σ: :class:`HalfCauchy` and :class:`GammaPrecision`
(the scales :class:`structmc.hierarchical.HierarchicalEnergy` samples; see :mod:`structmc.priors`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


# ---------------------------------------------------------------------------------------------
# hierarchical scales: σ_g of each group's Normal(0, σ_g²) prior sampled as s_g = log σ_g
# ---------------------------------------------------------------------------------------------
class HalfCauchy:
    """Half-Cauchy(0, b) hyperprior on a scale σ (Gelman 2006; Polson & Scott 2012). In s = log σ,
    with the Jacobian: −log p(s) = log(1 + e^{2s}/b²) − s + const."""

    def __init__(self, scale: float = 1.0):
        if not float(scale) > 0:
            raise ValueError(f"HalfCauchy scale must be positive, got {scale}")
        self.scale = float(scale)

    def energy(self, s: Tensor) -> Tensor:
        return torch.nn.functional.softplus(2 * s - 2 * math.log(self.scale)) - s

    def grad(self, s: Tensor) -> Tensor:
        return 2 * torch.sigmoid(2 * s - 2 * math.log(self.scale)) - 1

    def log_prob_sigma(self, sigma: Tensor) -> Tensor:
        """log p(σ), normalised (tests)."""
        b = self.scale
        return math.log(2 / (math.pi * b)) - torch.log1p((sigma / b).square())

    def describe(self):
        return {"kind": "HalfCauchy", "scale": self.scale}


class GammaPrecision:
    """Gamma(shape a, rate r) hyperprior on the precision τ = σ^{-2} (the conjugate choice). In
    s = log σ, with the Jacobian |dτ/ds| = 2e^{−2s}: −log p(s) = 2a·s + r·e^{−2s} + const."""

    def __init__(self, shape: float = 1.0, rate: float = 1.0):
        if not (float(shape) > 0 and float(rate) > 0):
            raise ValueError(f"GammaPrecision needs shape > 0 and rate > 0, got {shape}, {rate}")
        self.shape, self.rate = float(shape), float(rate)

    def energy(self, s: Tensor) -> Tensor:
        return 2 * self.shape * s + self.rate * torch.exp(-2 * s)

    def grad(self, s: Tensor) -> Tensor:
        return 2 * self.shape - 2 * self.rate * torch.exp(-2 * s)

    def describe(self):
        return {"kind": "GammaPrecision", "shape": self.shape, "rate": self.rate}
