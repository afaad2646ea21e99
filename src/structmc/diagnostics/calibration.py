"""Predictive metrics for posterior-averaged predictions.

Classification inputs: ``probs [n, K]`` (rows sum to 1) or binary ``probs [n]`` = P(y = 1),
treated as ``[1 − p, p]``; ``labels [n]`` integer classes (0/1 for binary). Average the
per-draw probabilities over the posterior first (``probs_draws.mean(0)``) — these metrics
score the Bayesian model average, not individual draws.
Regression inputs: predictive ``mean [n]``, ``var [n]``, targets ``y [n]``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _probs_labels(probs, labels) -> tuple[Tensor, Tensor]:
    p = probs if isinstance(probs, Tensor) else torch.as_tensor(probs)
    if not p.is_floating_point():
        p = p.to(torch.get_default_dtype())
    y = labels if isinstance(labels, Tensor) else torch.as_tensor(labels)
    y = y.to(device=p.device).long().reshape(-1)
    if p.dim() == 1:
        p = torch.stack([1.0 - p, p], dim=1)
    if p.dim() != 2 or p.shape[0] != y.shape[0]:
        raise ValueError(f"probs must be [n, K] or [n] and labels [n], got {tuple(p.shape)} and {tuple(y.shape)}")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= p.shape[1]):
        raise ValueError(f"labels must lie in [0, {p.shape[1] - 1}]")
    return p, y


def accuracy(probs, labels) -> Tensor:
    """Fraction of ``argmax_k p_k == y``; ties go to the lowest class index, so a binary
    ``p = 0.5`` predicts class 0 (class 1 needs ``p > 0.5``)."""
    p, y = _probs_labels(probs, labels)
    return (p.argmax(dim=1) == y).to(p.dtype).mean()


def nll(probs, labels, eps: float | None = None) -> Tensor:
    """Mean negative log-likelihood ``−(1/n) Σ log p_{y_i}`` of the averaged predictive.

    Probabilities are clamped below at ``eps`` (default: the dtype's smallest normal number), so
    an exactly-zero probability gives a large finite value (87.3 in float32) instead of inf.
    """
    p, y = _probs_labels(probs, labels)
    eps = torch.finfo(p.dtype).tiny if eps is None else eps
    return -p.gather(1, y.unsqueeze(1)).squeeze(1).clamp_min(eps).log().mean()


def brier(probs, labels) -> Tensor:
    """Brier score. ``[n, K]``: ``(1/n) Σ_i Σ_k (p_ik − 1{y_i = k})²`` (Brier 1950, in [0, 2]).
    Binary ``[n]``: ``(1/n) Σ_i (p_i − y_i)²`` (scikit-learn ``brier_score_loss``, in [0, 1]),
    which is half the K = 2 multi-class value."""
    binary = (probs.dim() if isinstance(probs, Tensor) else torch.as_tensor(probs).dim()) == 1
    p, y = _probs_labels(probs, labels)
    onehot = torch.nn.functional.one_hot(y, p.shape[1]).to(p.dtype)
    full = ((p - onehot) ** 2).sum(dim=1).mean()
    return full / 2 if binary else full


def calibration_bins(probs, labels, num_bins: int = 10) -> dict[str, Tensor]:
    """Top-label reliability table over equal-width confidence bins of [0, 1].

    Confidence ``conf_i = max_k p_ik``, correctness ``1{argmax_k p_ik = y_i}``. Bin b covers
    ``[b/B, (b+1)/B)``, the last bin ``[(B−1)/B, 1]`` (left-closed, numpy ``histogram``
    convention; torchmetrics puts confidence exactly 1.0 in an extra bin, otherwise the same).
    Returns per-bin ``count``, ``confidence`` (mean), ``accuracy`` (mean; 0 where empty) and
    ``edges [B+1]``.
    """
    p, y = _probs_labels(probs, labels)
    conf, pred = p.max(dim=1).values, p.argmax(dim=1)
    correct = (pred == y).to(p.dtype)
    B = int(num_bins)
    idx = (conf * B).floor().long().clamp(0, B - 1)
    count = torch.zeros(B, dtype=p.dtype, device=p.device).index_add_(0, idx, torch.ones_like(conf))
    sconf = torch.zeros(B, dtype=p.dtype, device=p.device).index_add_(0, idx, conf)
    sacc = torch.zeros(B, dtype=p.dtype, device=p.device).index_add_(0, idx, correct)
    safe = count.clamp_min(1)
    return {
        "count": count,
        "confidence": sconf / safe,
        "accuracy": sacc / safe,
        "edges": torch.linspace(0, 1, B + 1, dtype=p.dtype, device=p.device),
    }


def ece(probs, labels, num_bins: int = 10) -> Tensor:
    """Expected calibration error, top-label, equal-width bins (Naeini et al. 2015; Guo et al.
    2017): ``Σ_b (n_b/n) |acc_b − conf_b|`` with the bins of :func:`calibration_bins`."""
    t = calibration_bins(probs, labels, num_bins)
    return ((t["count"] / t["count"].sum()) * (t["accuracy"] - t["confidence"]).abs()).sum()


def mce(probs, labels, num_bins: int = 10) -> Tensor:
    """Maximum calibration error ``max_b |acc_b − conf_b|`` over non-empty bins (Naeini et al.
    2015), bins as in :func:`calibration_bins`."""
    t = calibration_bins(probs, labels, num_bins)
    gap = (t["accuracy"] - t["confidence"]).abs()
    return torch.where(t["count"] > 0, gap, torch.zeros_like(gap)).max()


def classification_metrics(probs, labels, num_bins: int = 10) -> dict[str, float]:
    """``{"accuracy", "nll", "brier", "ece", "mce"}`` as floats."""
    return {
        "accuracy": float(accuracy(probs, labels)),
        "nll": float(nll(probs, labels)),
        "brier": float(brier(probs, labels)),
        "ece": float(ece(probs, labels, num_bins)),
        "mce": float(mce(probs, labels, num_bins)),
    }


def auroc(negative, positive) -> Tensor:
    """Area under the ROC curve of telling ``positive`` scores from ``negative`` ones (e.g. the
    predictive entropy of out-of-distribution inputs against in-distribution ones): the
    probability that a positive scores higher than a negative, ties counting one half (the
    Mann-Whitney U statistic over ``n_pos · n_neg``), from average ranks. 0.5: no separation;
    1: every positive above every negative. NaN scores are refused."""
    neg = torch.as_tensor(negative).reshape(-1).double()
    pos = torch.as_tensor(positive).reshape(-1).double()
    if neg.numel() == 0 or pos.numel() == 0:
        raise ValueError(f"auroc needs scores on both sides, got {neg.numel()} negative and {pos.numel()} positive")
    if bool(torch.isnan(neg).any()) or bool(torch.isnan(pos).any()):
        raise ValueError("auroc: the scores hold NaN")
    scores = torch.cat([neg, pos.to(neg.device)])
    values, inverse, counts = torch.unique(scores, sorted=True, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    average_rank = ends - (counts.double() - 1) / 2  # 1-based ranks, a tie's average
    ranks = average_rank[inverse]
    n_neg, n_pos = neg.numel(), pos.numel()
    u = ranks[n_neg:].sum() - n_pos * (n_pos + 1) / 2
    return u / (n_pos * n_neg)


def _reg(mean, y) -> tuple[Tensor, Tensor]:
    m = mean if isinstance(mean, Tensor) else torch.as_tensor(mean)
    if not m.is_floating_point():
        m = m.to(torch.get_default_dtype())
    t = (y if isinstance(y, Tensor) else torch.as_tensor(y)).to(m)
    if m.shape != t.shape:
        raise ValueError(f"mean {tuple(m.shape)} and targets {tuple(t.shape)} differ in shape")
    return m, t


def mse(mean, y) -> Tensor:
    """Mean squared error ``(1/n) Σ (μ_i − y_i)²`` of the predictive mean."""
    m, t = _reg(mean, y)
    return ((m - t) ** 2).mean()


def rmse(mean, y) -> Tensor:
    """Root mean squared error ``√MSE``."""
    return mse(mean, y).sqrt()


def gaussian_nll(mean, var, y) -> Tensor:
    """Mean Gaussian predictive NLL ``(1/n) Σ ½(log(2π σ²_i) + (y_i − μ_i)²/σ²_i)`` (full,
    with the constant; ``torch.nn.functional.gaussian_nll_loss(..., full=True)`` minus its
    variance clamp). For a posterior predictive, ``σ² = noise variance + Var_θ[μ_θ]``."""
    m, t = _reg(mean, y)
    v = (var if isinstance(var, Tensor) else torch.as_tensor(var)).to(m)
    return 0.5 * (torch.log(2 * math.pi * v) + (t - m) ** 2 / v).mean()


def regression_metrics(mean, var, y) -> dict[str, float]:
    """``{"mse", "rmse", "nll"}`` as floats."""
    return {"mse": float(mse(mean, y)), "rmse": float(rmse(mean, y)), "nll": float(gaussian_nll(mean, var, y))}
