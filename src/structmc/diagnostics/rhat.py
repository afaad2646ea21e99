"""Potential scale reduction (R-hat), vectorised over parameters."""

from __future__ import annotations

import torch
from torch import Tensor

from ._utils import as_draws, check_min_draws, map_params, quantile_sorted, split_chains, z_scale


def _rhat_core(t: Tensor) -> Tensor:
    """Gelman–Rubin ``R̂ = √(((n−1)/n W + B/n) / W)`` of ``t [p, C, n]`` (BDA3 eq. 11.4)."""
    n = t.shape[-1]
    B = n * t.mean(dim=-1).var(dim=-1, correction=1)
    W = t.var(dim=-1, correction=1).mean(dim=-1)
    return torch.sqrt((B / W + n - 1.0) / n)


def _rhat_rank_from(s: Tensor, z: Tensor, srt: Tensor) -> Tensor:
    """Rank R-hat from split chains ``s``, their z-scores and pooled sorted values."""
    med = quantile_sorted(srt, 0.5).view(-1, 1, 1)
    tail = _rhat_core(z_scale((s - med).abs()))
    return torch.maximum(_rhat_core(z), tail)


def _rhat_rank(t: Tensor) -> Tensor:
    s = split_chains(t)
    z, srt = z_scale(s, return_sorted=True)
    return _rhat_rank_from(s, z, srt)


def rhat(x, method: str = "rank", chunk: int | None = None) -> Tensor:
    """R-hat per parameter: ``x [C, D, ...]`` -> ``[...]``.

    * ``method="rank"`` (default): rank-normalised split R-hat of Vehtari, Gelman, Simpson,
      Carpenter & Bürkner (2021), Bayesian Analysis 16(2), §4.1: the maximum of the bulk R-hat
      (split chains, pooled rank normalisation ``Φ⁻¹((r − 3/8)/(S + 1/4))``) and the tail R-hat
      (same on the folded draws ``|x − median|``). Equals ArviZ ``rhat(method="rank")``.
    * ``method="split"``: split R-hat on the raw draws (BDA3 §11.4).
    * ``method="classic"``: Gelman & Rubin (1992) without splitting (needs C >= 2).

    With a single chain, the split variants still compare its two halves (ArviZ returns NaN).
    """
    x = as_draws(x)
    check_min_draws(x)
    if method == "rank":
        return map_params(_rhat_rank, x, chunk)
    if method == "split":
        return map_params(lambda t: _rhat_core(split_chains(t)), x, chunk)
    if method == "classic":
        if x.shape[0] < 2:
            raise ValueError("classic R-hat needs at least 2 chains")
        return map_params(_rhat_core, x, chunk)
    raise ValueError(f"method must be 'rank', 'split' or 'classic', got {method!r}")
