"""Posterior predictive summaries over kept draws, batched over the test set."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from .chain import Chain
from .energy import ModuleEnergy


@torch.no_grad()
def predictive(energy: ModuleEnergy, draws: Chain | Tensor, inputs: Tensor | Sequence[Tensor], *,
               batch_size: int = 1024, draws_per_call: int = 64) -> dict[str, Tensor]:
    """Average the module's predictions over draws (all chains pooled).

    Classification (categorical / bernoulli likelihood): ``{"probs": ...}``, the posterior
    predictive class probabilities (probabilities are averaged, never log-probabilities).
    Regression (gaussian likelihood with noise σ): ``{"mean", "var"}`` with
    ``var = Var_draws[f(x)] + σ²``. ``draws``: a :class:`Chain` or a ``[S, P]`` tensor.
    The module runs in eval mode.
    """
    samples = draws.flat_draws() if isinstance(draws, Chain) else draws.reshape(-1, energy.space.dim)
    if samples.shape[0] == 0:
        raise ValueError("no draws to average over")
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    parts: list[dict[str, Tensor]] = []
    for lo in range(0, inputs[0].shape[0], batch_size):
        xb = tuple(t[lo : lo + batch_size].to(energy.device) for t in inputs)
        outputs = energy.forward_draws(samples, xb, draws_per_call=draws_per_call)
        parts.append(energy.likelihood.predict(outputs))
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
