"""The mask laws of Sd-SGMCMC (Alexos, Boyd & Mandt 2022, eq. 7 / 16 and Appendix D): r ~
Bernoulli(ρ) (optionally conditioned on at least one selected group), Uniform(0, 1) or Beta(a, b),
each with the exact E[Σr] that :class:`~structmc.structured.StructuredEnergy` scales by, and
:func:`make_mask` by name. Their home is :mod:`structmc.structured.energies` (which re-exports
them): runs' fingerprints and pickles name them there."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..schedules import check_number


@dataclass(frozen=True)
class BernoulliMask:
    rho: float
    at_least_one: bool = False

    def __post_init__(self):
        if not 0 < check_number("rho", self.rho) <= 1:
            raise ValueError(f"rho must lie in (0, 1], got {self.rho}")

    def sample(self, shape, generator, dtype, device) -> Tensor:
        r = torch.rand(shape, generator=generator, device=device) < self.rho
        if self.at_least_one and self.rho < 1:
            # exact conditioning on Σr > 0 without rejection: the first selected group j has a
            # truncated geometric law P(j) ∝ ρ(1-ρ)^j, j < M; groups after j stay Bernoulli(ρ)
            M = shape[-1]
            u = torch.rand(shape[:-1], generator=generator, device=device, dtype=torch.float64)
            q = 1 - self.rho
            first = torch.floor(torch.log1p(-u * (1 - q**M)) / math.log(q)).long().clamp_(0, M - 1)
            pos = torch.arange(M, device=device)
            r = (r & (pos > first.unsqueeze(-1))) | (pos == first.unsqueeze(-1))
        return r.to(dtype)

    def mean_sum(self, M: int) -> float:
        if self.at_least_one:
            return M * self.rho / (1 - (1 - self.rho) ** M)
        return M * self.rho


@dataclass(frozen=True)
class UniformMask:
    """r_i ~ U(0, 1): continuous interpolation weights, E[Σr] = M/2."""

    def sample(self, shape, generator, dtype, device) -> Tensor:
        return torch.rand(shape, generator=generator, device=device, dtype=dtype)

    def mean_sum(self, M: int) -> float:
        return M / 2


@dataclass(frozen=True)
class BetaMask:
    a: float
    b: float

    def __post_init__(self):
        if not (check_number("a", self.a) > 0 and check_number("b", self.b) > 0):
            raise ValueError(f"Beta mask needs a, b > 0, got {self.a}, {self.b}")

    def sample(self, shape, generator, dtype, device) -> Tensor:
        # torch's Gamma/Beta samplers take no generator: draw with NumPy, seeded from ours
        import numpy as np

        seed = int(torch.randint(2**62, (1,), generator=generator, device=device))
        x = np.random.default_rng(seed).beta(self.a, self.b, size=tuple(shape))
        return torch.as_tensor(x, dtype=dtype, device=device)

    def mean_sum(self, M: int) -> float:
        return M * self.a / (self.a + self.b)


MASK_KEYS = {"bernoulli": ("rho", "at_least_one"), "uniform": (), "beta": ("a", "b")}


def make_mask(kind: str, **kwargs):
    """A mask law by name: ``bernoulli`` (``rho`` = 0.5, ``at_least_one`` = False),
    ``uniform`` (no arguments) or ``beta`` (``a``, ``b``, both needed; also spelt ``alpha``,
    ``beta``). An argument the law
    does not take is an error listing those it accepts (not silently dropped)."""
    if kind not in MASK_KEYS:
        raise ValueError(f"unknown mask {kind!r}; choose bernoulli, uniform or beta")
    accepted = MASK_KEYS[kind]
    if kind == "beta":  # Beta(alpha, beta): the tuning arms' names for a, b
        for alias, key in (("alpha", "a"), ("beta", "b")):
            if alias in kwargs:
                if key in kwargs:
                    raise TypeError(f"mask 'beta': give {key} or {alias}, not both")
                kwargs[key] = kwargs.pop(alias)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError(
            f"mask {kind!r}: unknown keyword(s) {unknown}; it accepts " + (", ".join(accepted) if accepted else "none")
        )
    if kind == "bernoulli":
        return BernoulliMask(kwargs.get("rho", 0.5), kwargs.get("at_least_one", False))
    if kind == "uniform":
        return UniformMask()
    missing = [k for k in accepted if k not in kwargs]
    if missing:
        raise TypeError(f"mask 'beta' needs {', '.join(missing)}")
    return BetaMask(kwargs["a"], kwargs["b"])
