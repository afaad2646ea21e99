"""Posterior predictive summaries over kept draws, batched over the test set."""

from __future__ import annotations

import warnings
from typing import Sequence

import torch
from torch import Tensor

from .chain import Chain
from .energy import ModuleEnergy


def _draw_groups(energy: ModuleEnergy, draws: Chain | Tensor, chain: int | None):
    """``[(samples [S, P], buffers or None)]``: one group per chain when the module has buffers
    (each chain's draws with that chain's own running statistics), else all draws pooled."""
    P = energy.space.dim
    if isinstance(draws, Chain) and draws.buffers is not None and energy.has_buffers:
        # the chain carries its own buffers (sample() ran on a copy of the energy)
        if chain is not None:
            if not 0 <= chain < draws.num_chains:
                raise ValueError(f"draws have {draws.num_chains} chains; no chain {chain}")
            return [(draws.samples[chain], draws.buffers[chain])]
        return [(draws.samples[c], draws.buffers[c]) for c in range(draws.num_chains)]
    samples = draws.samples if isinstance(draws, Chain) else draws
    per_chain = samples.dim() == 3  # [C, D, P]
    if chain is not None:
        if per_chain:
            if not 0 <= chain < samples.shape[0]:
                raise ValueError(f"draws have {samples.shape[0]} chains; no chain {chain}")
            samples = samples[chain]
        samples = samples.reshape(-1, P)
        return [(samples, energy.chain_buffers(chain) if energy.has_buffers else None)]
    if not energy.has_buffers or not per_chain:
        if energy.has_buffers and (energy.buffer_chains or 1) > 1:
            warnings.warn(f"draws [S, P] from {energy.buffer_chains} chains are evaluated with the module's own "
                          "buffers; pass a Chain (or [C, D, P] draws, or chain=c) to use each chain's statistics")
        return [(samples.reshape(-1, P), None)]
    C = samples.shape[0]
    kept = energy.buffer_chains
    if kept is None:
        if C > 1:
            warnings.warn(f"the energy keeps no per-chain buffers (it never evaluated several chains) but the draws "
                          f"come from {C} chains: every chain is evaluated with the module's own buffers. Pass the "
                          "run's energy (Run.energy) to use each chain's running statistics")
        return [(samples.reshape(-1, P), None)]
    if kept != C:
        raise ValueError(f"the energy keeps buffers for {kept} chains but the draws come from {C} chains: pass the "
                         "energy of the run that made these draws (Run.energy)")
    return [(samples[c], energy.chain_buffers(c)) for c in range(C)]


@torch.no_grad()
def predictive(energy: ModuleEnergy, draws: Chain | Tensor, inputs: Tensor | Sequence[Tensor], *,
               batch_size: int = 1024, draws_per_call: int = 64, chain: int | None = None) -> dict[str, Tensor]:
    """Average the module's predictions over draws (all chains pooled, or only ``chain``).

    Classification (categorical / bernoulli likelihood): ``{"probs": ...}``, the posterior
    predictive class probabilities (probabilities are averaged, never log-probabilities).
    Regression (gaussian likelihood with noise σ): ``{"mean", "var"}`` with
    ``var = Var_draws[f(x)] + σ²``. ``draws``: a :class:`Chain`, ``[C, D, P]`` or ``[S, P]``
    tensor. The module runs in eval mode; a module with buffers (BatchNorm running
    statistics) evaluates each chain's draws with that chain's own buffers
    (``energy.chain_buffers(c)``; pass the run's energy, ``Run.energy``). ``chain=c`` averages
    over chain ``c`` only (for ``[S, P]`` draws: evaluates them with chain ``c``'s buffers).
    """
    groups = _draw_groups(energy, draws, chain)
    if sum(s.shape[0] for s, _ in groups) == 0:
        raise ValueError("no draws to average over")
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    parts: list[dict[str, Tensor]] = []
    for lo in range(0, inputs[0].shape[0], batch_size):
        xb = tuple(t[lo : lo + batch_size].to(energy.device) for t in inputs)
        outputs = torch.cat([energy.forward_draws(s, xb, draws_per_call=draws_per_call, buffers=b)
                             for s, b in groups if s.shape[0] > 0])
        parts.append(energy.likelihood.predict(outputs))
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
