"""Effective sample size, vectorised over parameters, in three documented flavours.

1. Geyer's initial monotone sequence on split chains (Vehtari, Gelman, Simpson, Carpenter &
   Bürkner 2021, "Rank-normalization, folding, and localization: an improved R-hat", Bayesian
   Analysis 16(2)): :func:`ess_bulk`, :func:`ess_tail`, :func:`ess_mean`. Same numbers as
   ArviZ ``ess(method="bulk"|"tail"|"mean")``.
2. TensorFlow-Probability style (``tfp.mcmc.effective_sample_size``): :func:`ess_tfp`.
3. The equicorrelation form ``n / (1 + (n − 1) ρ)``: :func:`ess_equicorrelation`,
   :func:`ess_from_correlation`.

Layout: ``x[chain, draw, ...]`` -> ``[...]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ._utils import as_draws, check_min_draws, map_params, quantile_select, split_chains, z_scale
from .autocorr import _autocov


def _geyer_ess(t: Tensor, max_pairs: int = 128) -> Tensor:
    """Multi-chain ESS of ``t [p, C, n]`` with Geyer's initial monotone sequence.

    Vectorised transcription of Vehtari et al. (2021), eqs. 9-11 (the Stan / ArviZ ``_ess``
    algorithm): ``ρ̂_t = 1 − (W − mean_c γ̂_{c,t}) / var⁺`` with ``W`` the mean within-chain
    variance and ``var⁺ = (n−1)/n W + B/n``; pairs ``P_k = ρ̂_{2k} + ρ̂_{2k+1}`` are summed up
    to the first non-positive pair (initial positive sequence) after being made monotone
    (running minimum); ``τ̂ = −1 + 2 Σ_{k<L} P̃_k + ρ̂_{2L}``, ``ESS = C·n / max(τ̂, 1/log10(C·n))``.
    The sequential loops of the reference become a first-index search and a cummin. Only the
    first ``max_pairs`` pairs are formed at first; parameters whose sequence is still positive
    there are redone with all lags.
    """
    p, C, n = t.shape
    L_len = max((n - 1) // 2 - 1, 0)  # the reference loop runs while t = 2k-1 < n-3
    K = L_len + 1
    ess, open_ = _geyer_core(t, min(K, max_pairs), L_len)
    if bool(open_.any()):
        ess[open_] = _geyer_core(t[open_], K, L_len)[0]
    size = C * n
    # a constant quantity (e.g. an indicator that never flips) counts as independent draws
    flat = t.reshape(p, -1)
    span = flat.amax(dim=-1) - flat.amin(dim=-1)
    ess = torch.where(span < torch.finfo(t.dtype).resolution, float(size), ess)
    return torch.where(torch.isnan(flat).any(dim=-1), math.nan, ess)


def _geyer_core(t: Tensor, Kc: int, L_len: int) -> tuple[Tensor, Tensor]:
    """ESS from the first ``Kc`` autocorrelation pairs, and a mask of the parameters whose
    positive sequence did not end within them (only possible when ``Kc <= L_len``)."""
    p, C, n = t.shape
    mean_acov = _autocov(t, max_lag=2 * Kc - 1).mean(dim=1)  # [p, 2Kc]
    mean_var = mean_acov[:, 0] * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if C > 1:
        var_plus = var_plus + t.mean(dim=-1).var(dim=-1, correction=1)
    rho = 1.0 - (mean_var.unsqueeze(1) - mean_acov) / var_plus.unsqueeze(1)
    rho[:, 0] = 1.0
    pairs = rho[:, 0::2] + rho[:, 1::2]  # [p, Kc]
    nonpos = pairs <= 0
    found = nonpos.any(dim=-1)
    L = torch.where(found, nonpos.to(torch.uint8).argmax(dim=-1), min(L_len, Kc - 1))
    mono = pairs.cummin(dim=-1).values
    k = torch.arange(Kc, device=t.device)
    s = (mono * (k < L.unsqueeze(1)).to(mono.dtype)).sum(dim=-1)
    rho_2L = rho.gather(-1, (2 * L).unsqueeze(1)).squeeze(1)
    P_L = pairs.gather(-1, L.unsqueeze(1)).squeeze(1)
    # the reference keeps ρ̂_{2L} when positive or when its pair was stored (P_L >= 0)
    last = torch.where((rho_2L > 0) | (P_L >= 0), rho_2L, 0.0)
    last = torch.where(L == 0, 1.0, last)
    tau = -1.0 + 2.0 * s + last
    size = C * n
    ess = size / tau.clamp(min=1.0 / math.log10(size))
    return ess, ~found & (Kc <= L_len)


def ess_bulk(x, chunk: int | None = None) -> Tensor:
    """Bulk ESS: Geyer initial-monotone ESS of rank-normalised split chains.

    Vehtari et al. (2021), §4.2 (``z = Φ⁻¹((r − 3/8)/(S + 1/4))`` of pooled average ranks, then
    :func:`_geyer_ess` on the ``2C`` half chains). Equals ArviZ ``ess(method="bulk")``.
    """
    x = as_draws(x)
    check_min_draws(x)
    return map_params(lambda t: _geyer_ess(z_scale(split_chains(t))), x, chunk)


def _ess_tail(t: Tensor, probs) -> Tensor:
    p, C, D = t.shape
    flat = t.reshape(p, -1)
    ind = torch.stack([t <= quantile_select(flat, float(q)).view(p, 1, 1) for q in probs]).to(t.dtype)
    return _geyer_ess(split_chains(ind.reshape(-1, C, D))).view(len(probs), p).amin(dim=0)


def ess_tail(x, prob: tuple[float, float] = (0.05, 0.95), chunk: int | None = None) -> Tensor:
    """Tail ESS: ``min`` over the 5% and 95% quantiles q of the Geyer ESS of the split-chain
    indicator ``I(x <= q)`` (Vehtari et al. 2021, §4.3; q is the type-7 quantile of all draws).
    Equals ArviZ ``ess(method="tail")``."""
    x = as_draws(x)
    check_min_draws(x)
    return map_params(lambda t: _ess_tail(t, prob), x, chunk)


def ess_mean(x, chunk: int | None = None) -> Tensor:
    """ESS for the mean: Geyer initial-monotone ESS of the split chains, no rank transform
    (Vehtari et al. 2021, eq. 11; ArviZ ``ess(method="mean")``). Assumes finite variance."""
    x = as_draws(x)
    check_min_draws(x)
    return map_params(lambda t: _geyer_ess(split_chains(t)), x, chunk)


def _ess_tfp(t: Tensor, filter: str, cross_chain: bool, max_lag: int | None) -> Tensor:
    p, C, n = t.shape
    L = n if max_lag is None else min(int(max_lag) + 1, n)
    acov = _autocov(t)[..., :L]  # biased, divisor n
    k = torch.arange(L, device=t.device, dtype=t.dtype)
    acov_u = acov * (n / (n - k))  # TFP's auto_correlation divides lag k by (n - k)
    if cross_chain and C > 1:
        b_div_n = t.mean(dim=-1).var(dim=-1, correction=1)  # [p]
        w_biased = acov_u[..., 0].mean(dim=1)
        rho = 1.0 - (w_biased.unsqueeze(1) - acov_u.mean(dim=1)) / (w_biased + b_div_n).unsqueeze(1)  # [p, L]
        num_chains = C
    else:
        rho = acov_u / acov_u[..., :1]  # [p, C, L]
        num_chains = 1
    weighted = (n - k) / n * rho
    if filter == "negative":
        mask = (rho < 0).to(t.dtype).cumsum(dim=-1) == 0
        total = (weighted * mask).sum(dim=-1)
    elif filter == "pairs":
        m = (L // 2) * 2  # an odd final lag is dropped, as TFP does

        def pair(a):
            return a[..., :m].reshape(*a.shape[:-1], m // 2, 2).sum(dim=-1)

        mask = (pair(rho) < 0).to(t.dtype).cumsum(dim=-1) == 0
        total = (pair(weighted) * mask).sum(dim=-1)
    else:
        raise ValueError(f"filter must be 'negative' or 'pairs', got {filter!r}")
    return num_chains * n / (2.0 * total - 1.0)


def ess_tfp(
    x, filter: str = "negative", cross_chain: bool = True, max_lag: int | None = None, chunk: int | None = None
) -> Tensor:
    """TensorFlow-Probability-style ESS (``tfp.mcmc.effective_sample_size``), no chain splitting.

    ``ESS = C·n / (−1 + 2 Σ_{k=0}^{M} (1 − k/n) R̂_k)`` where ``R̂_k`` is the autocorrelation with
    TFP's per-lag divisor ``n − k``. With ``cross_chain=True`` and C > 1 (TFP's
    ``cross_chain_dims``), ``R̂_k = 1 − (W_b − mean_c γ_{c,k}) / (W_b + B/n)`` (Vehtari et al.
    2021, eq. 10, as TFP writes it); with ``cross_chain=False`` each chain gets its own ESS and
    the result is ``[C, ...]``.

    Truncation M: ``filter="negative"`` (TFP default ``filter_threshold=0``) keeps lags before
    the first negative ``R̂_k``; ``filter="pairs"`` (``filter_beyond_positive_pairs=True``) sums
    pairs ``(R̂_{2j} + R̂_{2j+1})`` up to the first negative pair (Geyer's initial positive
    sequence, without the monotone step). ``max_lag`` is TFP's ``filter_beyond_lag``.
    """
    x = as_draws(x)
    out = map_params(lambda t: _ess_tfp(t, filter, cross_chain, max_lag), x, chunk)
    if cross_chain and x.shape[0] > 1:
        return out
    out = out.movedim(-1, 0)  # per-chain results [C, ...]
    return out[0] if cross_chain else out


def ess_from_correlation(n, rho) -> Tensor:
    """``ESS = n / (1 + (n − 1) ρ)``: n equicorrelated draws with pairwise correlation ρ
    (Kish 1965 design effect ``1 + (n−1)ρ``), because ``Var(x̄) = σ²(1 + (n−1)ρ)/n``."""
    rho = torch.as_tensor(rho)
    return n / (1.0 + (n - 1.0) * rho)


def ess_equicorrelation(x, split: bool = False, chunk: int | None = None) -> Tensor:
    """Equicorrelation ESS ``C·n / (1 + (n − 1) ρ̂)`` with ρ̂ the within-chain intraclass
    correlation.

    Model: draws of one chain are equicorrelated with correlation ρ, chains are independent.
    ρ̂ is the one-way ANOVA estimate ``(B − W) / (B + (n − 1) W)`` with ``B = n·Var_c(x̄_c)``
    and ``W = mean_c s_c²`` (Fisher 1925), clipped to ``[0, 1]`` (so ESS <= C·n). Algebraically
    this is the classical ``n_eff = C·n·var̂⁺ / B`` of Gelman et al., Bayesian Data Analysis
    2nd ed. (2004), §11.6, capped at C·n. Needs C >= 2 (``split=True`` halves each chain first);
    with few chains it is noisy (B has C−1 degrees of freedom), prefer :func:`ess_bulk`.
    """
    x = as_draws(x)
    if split:
        x = split_chains(x)
    if x.shape[0] < 2:
        raise ValueError("ess_equicorrelation needs at least 2 chains (or split=True)")

    def f(t: Tensor) -> Tensor:
        _, C, n = t.shape
        B = n * t.mean(dim=-1).var(dim=-1, correction=1)
        W = t.var(dim=-1, correction=1).mean(dim=-1)
        rho = ((B - W) / (B + (n - 1) * W)).clamp(0.0, 1.0)
        return C * ess_from_correlation(n, rho)  # C independent chains of n equicorrelated draws

    return map_params(f, x, chunk)


def ess(x, method: str = "bulk", chunk: int | None = None, **kwargs) -> Tensor:
    """Dispatch: ``method`` in ``"bulk"``, ``"tail"``, ``"mean"`` (Vehtari et al. 2021),
    ``"tfp"`` (:func:`ess_tfp`), ``"equicorrelation"`` (:func:`ess_equicorrelation`)."""
    fns: dict[str, Callable[..., Tensor]] = {
        "bulk": ess_bulk,
        "tail": ess_tail,
        "mean": ess_mean,
        "tfp": ess_tfp,
        "equicorrelation": ess_equicorrelation,
    }
    if method not in fns:
        raise ValueError(f"method must be one of {sorted(fns)}, got {method!r}")
    return fns[method](x, chunk=chunk, **kwargs)
