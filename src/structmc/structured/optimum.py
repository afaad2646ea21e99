"""The exact S-SGMCMC target of a Gaussian (Alexos, Boyd & Mandt 2022, Theorem 1)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..partitions import Partition


def structured_optimum_gaussian(mean: Tensor, precision: Tensor, partition: Partition) -> tuple[Tensor, Tensor]:
    """Exact S-SGMCMC target for a Gaussian N(μ, Λ⁻¹): block mean-field optimum with means μ_i
    and covariance blocks (Λ_ii)⁻¹, zero cross-group covariance (their Theorem 1)."""
    P = mean.numel()
    cov = torch.zeros(P, P, dtype=precision.dtype)
    for g in range(partition.num_groups):
        idx = partition.members(g)
        cov[idx.unsqueeze(1), idx.unsqueeze(0)] = torch.linalg.inv(precision[idx][:, idx])
    return mean.clone(), cov
