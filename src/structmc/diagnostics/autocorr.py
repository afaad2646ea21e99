"""Autocovariance by FFT and integrated autocorrelation time, vectorised over parameters.

Layout everywhere: ``x[chain, draw, ...]``; results keep the trailing ``...`` shape.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._utils import as_draws, map_params


def _next_fast_len(n: int) -> int:
    """Smallest 2^a 3^b 5^c >= n (FFT sizes that pocketfft/cuFFT handle fastest)."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _autocov(t: Tensor, max_lag: int | None = None) -> Tensor:
    """``[..., D]`` -> biased autocovariance ``[..., L]`` (divisor D, mean removed), by FFT,
    for lags ``0..L-1`` (``L = max_lag + 1``, default D)."""
    D = t.shape[-1]
    L = D if max_lag is None else min(int(max_lag) + 1, D)
    tc = t - t.mean(dim=-1, keepdim=True)
    # zero padding to >= 2D makes the circular correlation equal to the linear one
    m = _next_fast_len(2 * D)
    f = torch.fft.rfft(tc, n=m, dim=-1)
    f.mul_(f.conj())  # power spectrum, kept complex so irfft needs no conversion copy
    return torch.fft.irfft(f, n=m, dim=-1)[..., :L] / D


def _to_chain_lag(out: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``[*shape, C, L]`` (map_params output) -> ``[C, L, *shape]``."""
    k = len(shape)
    return out.movedim(k, 0).movedim(k + 1, 1)


def autocovariance(x, max_lag: int | None = None, chunk: int | None = None) -> Tensor:
    """Per-chain autocovariance ``γ̂_c(k) = (1/D) Σ_{t<D-k} (x_t − x̄_c)(x_{t+k} − x̄_c)``.

    Biased (divisor D) estimator computed by FFT (Wiener–Khinchin), O(D log D) per parameter,
    as in ArviZ ``autocov`` and emcee ``function_1d`` (before normalisation).
    ``x [C, D, ...]`` -> ``[C, L, ...]`` with lags ``0..L-1`` (``L = max_lag + 1`` or D).
    """
    x = as_draws(x)
    L = x.shape[1] if max_lag is None else min(int(max_lag) + 1, x.shape[1])
    return _to_chain_lag(map_params(lambda t: _autocov(t)[..., :L], x, chunk), tuple(x.shape[2:]))


def _autocorr(t: Tensor) -> Tensor:
    acov = _autocov(t)
    var = acov[..., :1]
    rho = acov / var
    # a constant chain has no defined autocorrelation: treat it as white noise (τ = 1)
    const = var == 0
    if bool(const.any()):
        white = torch.zeros_like(rho)
        white[..., 0] = 1.0
        rho = torch.where(const, white, rho)
    return rho


def autocorrelation(x, max_lag: int | None = None, chunk: int | None = None) -> Tensor:
    """Per-chain normalised autocorrelation ``ρ̂_c(k) = γ̂_c(k) / γ̂_c(0)`` (FFT, biased γ̂).

    ``x [C, D, ...]`` -> ``[C, L, ...]``. Constant chains get ``ρ = (1, 0, 0, ...)``.
    """
    x = as_draws(x)
    L = x.shape[1] if max_lag is None else min(int(max_lag) + 1, x.shape[1])
    return _to_chain_lag(map_params(lambda t: _autocorr(t)[..., :L], x, chunk), tuple(x.shape[2:]))


def _iat_sokal(t: Tensor, c: float) -> Tensor:
    rho = _autocorr(t).mean(dim=1)  # [p, D], averaged over chains as emcee does over walkers
    D = rho.shape[-1]
    taus = 2.0 * rho.cumsum(dim=-1) - 1.0
    lags = torch.arange(D, device=t.device, dtype=rho.dtype)
    ok = lags >= c * taus
    # first lag M with M >= c·τ(M); one always exists because the mean-centred sample
    # autocorrelations sum to zero (τ(D−1) = 0), the fallback only guards NaN input
    M = torch.where(ok.any(dim=-1), ok.to(torch.uint8).argmax(dim=-1), D - 1)
    return taus.gather(-1, M.unsqueeze(-1)).squeeze(-1)


def _iat_direct(t: Tensor) -> Tensor:
    rho = _autocorr(t).mean(dim=1)  # [p, D]
    keep = (rho >= 0).to(rho.dtype).cumprod(dim=-1)  # 1 up to the first negative lag, then 0
    return 2.0 * (rho * keep).sum(dim=-1) - 1.0


def integrated_time(x, method: str = "sokal", c: float = 5.0, chunk: int | None = None) -> Tensor:
    """Integrated autocorrelation time τ = 1 + 2 Σ_{k≥1} ρ(k), per parameter.

    ``ρ̄(k)`` is the per-chain FFT autocorrelation averaged over chains (emcee's convention for
    walkers; it ignores between-chain differences in the mean: use :func:`rhat` for those).

    * ``method="sokal"`` (default): Sokal's adaptive window (Sokal 1997, "Monte Carlo methods in
      statistical mechanics", §3; Goodman & Weare 2010). ``τ(M) = 1 + 2 Σ_{k=1}^{M} ρ̄(k)`` with
      M the smallest lag satisfying ``M >= c·τ(M)``, ``c = 5`` as in emcee ``integrated_time``
      (same numbers; emcee's ``tol`` check is left to the caller: trust τ only when
      ``D >= 50 τ``, the estimate is biased low for short chains).
    * ``method="direct"``: the definition summed up to the first negative autocorrelation,
      ``τ = 1 + 2 Σ_{k=1}^{K-1} ρ̄(k)`` with K the first lag where ``ρ̄(K) < 0`` (all lags if none);
      the same truncation as TFP's default ``filter_threshold=0``.

    ``x [C, D, ...]`` -> ``[...]``. The standard error of the Sokal estimate is about
    ``τ √(2(2M+1)/(C·D))`` (Madras & Sokal 1988).
    """
    x = as_draws(x)
    if method == "sokal":
        return map_params(lambda t: _iat_sokal(t, float(c)), x, chunk)
    if method == "direct":
        return map_params(_iat_direct, x, chunk)
    raise ValueError(f"method must be 'sokal' or 'direct', got {method!r}")
