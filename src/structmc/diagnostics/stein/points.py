"""Input handling shared by the Stein discrepancies of :mod:`structmc.diagnostics.stein`:
samples and scores as ``[n, d]`` points, and row-blocked dot products."""

from __future__ import annotations

import torch
from torch import Tensor


def _as_points(x, name: str) -> Tensor:
    x = x if isinstance(x, Tensor) else torch.as_tensor(x)
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    if x.dim() == 1:
        x = x.unsqueeze(1)
    if x.dim() > 2:  # [C, D, P] draws: pool chains
        x = x.reshape(-1, x.shape[-1])
    if x.dim() != 2 or x.shape[0] < 1:
        raise ValueError(f"{name} must be [n, d], got {tuple(x.shape)}")
    return x


def _rowdot(a: Tensor, b: Tensor, rows: int = 256) -> Tensor:
    """``(a * b).sum(1)`` in row blocks, so no temporary as large as the inputs is formed."""
    return torch.cat([(a[i : i + rows] * b[i : i + rows]).sum(1) for i in range(0, a.shape[0], rows)])


def _check_pair(x, s) -> tuple[Tensor, Tensor]:
    x, s = _as_points(x, "samples"), _as_points(s, "scores")
    if x.shape != s.shape:
        raise ValueError(f"samples {tuple(x.shape)} and scores {tuple(s.shape)} differ in shape")
    return x, s.to(x.dtype)
