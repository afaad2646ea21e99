"""Shared tensor helpers for the diagnostics: layout checks, chunking over parameters,
split chains, rank normalisation and type-7 quantiles, all vectorised over parameters."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

# Elements of one parameter chunk ``[C, D, p]``. FFTs pad to about 2D in complex and sorts keep
# int64 indices, so a chunk costs roughly 6-8x this in bytes at float32: ~0.5 GiB peak.
CHUNK_ELEMENTS = 2 ** 24


def as_draws(x, name: str = "x") -> Tensor:
    """``x`` as a floating tensor of layout ``(chains, draws, ...)``.

    Accepts a :class:`~structmc.chain.Chain` (its ``samples``), a tensor or an array. Integer and
    boolean inputs become the default float dtype; half precisions become float32 because FFT
    and rank statistics lose too much precision below that.
    """
    if hasattr(x, "samples") and hasattr(x, "space"):
        x = x.samples
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x)
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    elif x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if x.dim() < 2:
        raise ValueError(f"{name} must have layout (chains, draws, ...), got shape {tuple(x.shape)}")
    return x


def flat_params(x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """``[C, D, *shape]`` -> ``([C, D, P], shape)``."""
    shape = tuple(x.shape[2:])
    return x.reshape(x.shape[0], x.shape[1], -1), shape


def map_params(fn: Callable[[Tensor], Tensor], x: Tensor, chunk: int | None = None) -> Tensor:
    """Apply ``fn: [C, D, p] -> [..., p]`` over parameter chunks of ``x [C, D, *shape]``.

    Returns ``[..., *shape]``. Chunking bounds the memory of FFTs and sorts when P is 10^5-10^6;
    the work inside each chunk stays fully vectorised.
    """
    xf, shape = flat_params(x)
    C, D, P = xf.shape
    if chunk is None:
        chunk = max(1, CHUNK_ELEMENTS // max(1, C * D))
    if P <= chunk:
        out = fn(xf)
    else:
        out = torch.cat([fn(xf[:, :, i:i + chunk]) for i in range(0, P, chunk)], dim=-1)
    return out.reshape(*out.shape[:-1], *shape)


def split_chains(x: Tensor) -> Tensor:
    """Split each chain in halves: ``[C, D, p] -> [2C, D // 2, p]``.

    For odd D the middle draw is dropped (first ``D//2`` and last ``D//2`` draws), as in ArviZ
    and Vehtari et al. (2021); TFP drops the last draw instead.
    """
    half = x.shape[1] // 2
    return torch.cat([x[:, :half], x[:, x.shape[1] - half:]], dim=0)


def quantile_sorted(s: Tensor, q: float, dim: int = 0) -> Tensor:
    """Type-7 (linear interpolation, numpy/R default) quantile of data already sorted on ``dim``."""
    n = s.shape[dim]
    h = (n - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    w = h - lo
    a, b = s.select(dim, lo), s.select(dim, hi)
    return a + (b - a) * w


def quantiles(x: Tensor, qs, dim: int = 0) -> Tensor:
    """Type-7 quantiles along ``dim``; returns ``[len(qs), ...]``.

    ``torch.quantile`` refuses inputs above 2^24 elements, hence a sort-based version.
    """
    s = torch.sort(x, dim=dim).values
    return torch.stack([quantile_sorted(s, float(q), dim) for q in qs])


def average_ranks(x: Tensor) -> Tensor:
    """1-based ranks along dim 0 with ties given their average rank (scipy ``rankdata('average')``).

    Vectorised over the remaining dims: sort once, find each tie group's first and last position
    with cumulative max/min, scatter the mean back.
    """
    n = x.shape[0]
    s, order = torch.sort(x, dim=0)
    pos = torch.arange(n, device=x.device).view(-1, *([1] * (x.dim() - 1))).expand_as(s)
    new_group = torch.ones_like(s, dtype=torch.bool)
    new_group[1:] = s[1:] != s[:-1]
    first = torch.where(new_group, pos, torch.zeros_like(pos)).cummax(dim=0).values
    end_group = torch.ones_like(s, dtype=torch.bool)
    end_group[:-1] = new_group[1:]
    big = torch.full_like(pos, n - 1)
    last = torch.where(end_group, pos, big).flip(0).cummin(dim=0).values.flip(0)
    avg = (first + last).to(x.dtype) * 0.5 + 1.0
    ranks = torch.empty_like(x)
    ranks.scatter_(0, order, avg)
    return ranks


def z_scale(x: Tensor) -> Tensor:
    """Rank normalisation of Vehtari et al. (2021), eq. 14: pool all chains and draws,
    ``z = Φ⁻¹((r − 3/8) / (S + 1/4))`` with average ranks r over the S pooled values (Blom 1958)."""
    C, D = x.shape[:2]
    flat = x.reshape(C * D, -1)
    r = average_ranks(flat)
    S = C * D
    z = torch.special.ndtri((r - 0.375) / (S + 0.25))
    return z.reshape(x.shape)


def check_min_draws(x: Tensor, min_draws: int = 4, min_chains: int = 1) -> None:
    if x.shape[1] < min_draws or x.shape[0] < min_chains:
        raise ValueError(f"need at least {min_chains} chain(s) of {min_draws} draws, got shape {tuple(x.shape)}")
