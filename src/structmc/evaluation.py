"""Predictive evaluation of a chain on held-out data: ``structmc.evaluate(energy, chain, data)``.

Streams over data batches and over draws (memory: one batch × ``draws_per_call`` model
outputs, plus per-input accumulators), per chain and pooled over chains (every draw weighted
equally). What it returns depends on the energy's likelihood:

* classification (``categorical`` / ``bernoulli``): accuracy, NLL, Brier score, ECE and MCE
  (top-label, equal-width bins, :mod:`structmc.diagnostics.calibration`) of the Bayesian model
  average p̄(y|x) = (1/S) Σ_s p(y|x, θ_s); per input the predictive entropy H[p̄] and the
  mutual information H[p̄] − (1/S) Σ_s H[p(·|x, θ_s)] (the epistemic part, for
  out-of-distribution checks);
* regression (``gaussian`` with noise σ): RMSE of the predictive mean, the NLL of the exact
  predictive mixture (1/S) Σ_s N(y; f_s(x), σ²) (not a moment-matched Gaussian), and the
  coverage of its central intervals at each level in ``levels`` — y is inside the level-ℓ
  interval when the mixture's CDF at y lies in [(1−ℓ)/2, (1+ℓ)/2]; per input the predictive
  mean and standard deviation.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from .chain import Chain
from .diagnostics.calibration import classification_metrics
from .predictive import _check_count, _draw_groups

__all__ = ["evaluate"]


@torch.no_grad()
def evaluate(energy, draws: Chain | Tensor, data: Sequence[Tensor], *, batch_size: int = 1024,
             draws_per_call: int = 64, num_bins: int = 10, levels: Sequence[float] = (0.5, 0.9, 0.95),
             per_chain: bool = True) -> dict:
    """Predictive metrics of ``draws`` (a :class:`~structmc.chain.Chain`, ``[C, D, P]`` or
    ``[S, P]``) of ``energy`` (a :class:`~structmc.energy.ModuleEnergy`) on ``data =
    (inputs..., targets)``.

    Returns ``{"task", "pooled": {metric: float}, "per_chain": [{metric: float}] (Chain or
    [C, D, P] draws with ``per_chain``), "num_draws", "num_inputs"}`` plus, per input,
    ``"probs"``, ``"entropy"``, ``"mutual_information"`` (classification) or ``"mean"``,
    ``"std"`` (regression). See the module docstring for the definitions."""
    lik = getattr(energy, "likelihood", None)
    if lik is None or not hasattr(energy, "forward_draws"):
        raise TypeError("evaluate needs a ModuleEnergy (a module with a likelihood)")
    if lik.name not in ("categorical", "bernoulli", "gaussian"):
        raise ValueError(f"evaluate knows the categorical, bernoulli and gaussian likelihoods, not {lik.name!r}")
    if not isinstance(data, (tuple, list)) or len(data) < 2:
        raise ValueError("data must be (inputs..., targets)")
    for name, v in (("batch_size", batch_size), ("draws_per_call", draws_per_call), ("num_bins", num_bins)):
        _check_count(name, v)
    if not all(0 < float(l) < 1 for l in levels):
        raise ValueError(f"levels must lie in (0, 1), got {list(levels)}")
    inputs, targets = tuple(data[:-1]), data[-1]
    if not all(isinstance(t, Tensor) and t.dim() > 0 for t in data):
        raise ValueError("data must be tensors (inputs..., targets), each [n, ...]")
    n = int(targets.shape[0])
    if any(int(t.shape[0]) != n for t in inputs):
        raise ValueError("inputs and targets must have the same first dimension")
    if n == 0:
        raise ValueError("data has no rows (n = 0): evaluate needs at least one (input, target) pair")
    samples = draws.samples if isinstance(draws, Chain) else draws
    chains = samples.shape[0] if (per_chain and samples.dim() == 3) else None
    groups = ([_draw_groups(energy, draws, c) for c in range(chains)] if chains is not None
              else [_draw_groups(energy, draws, None)])
    if sum(s.shape[0] for g in groups for s, _ in g) == 0:
        raise ValueError("no draws to evaluate")
    task = "regression" if lik.name == "gaussian" else "classification"
    accs = [_accumulate(energy, g, inputs, targets, batch_size, draws_per_call) for g in groups]
    pooled = _pool(accs)
    out = {"task": task, "num_draws": pooled["S"], "num_inputs": n}
    y = targets.to(pooled["device"])
    if task == "classification":
        out["pooled"] = _classification(pooled, y, num_bins)
        probs = pooled["probs_sum"] / pooled["S"]
        out["probs"] = probs
        out["entropy"] = _entropy(probs)
        out["mutual_information"] = out["entropy"] - pooled["draw_entropy_sum"] / pooled["S"]
        if chains is not None:
            out["per_chain"] = [_classification(a, y, num_bins) for a in accs]
    else:
        sigma = float(lik.noise_std)
        out["pooled"] = _regression(pooled, y, sigma, levels)
        mean = pooled["f_sum"] / pooled["S"]
        out["mean"] = mean
        out["std"] = (pooled["f2_sum"] / pooled["S"] - mean.square()).clamp_min(0).add(sigma ** 2).sqrt()
        if chains is not None:
            out["per_chain"] = [_regression(a, y, sigma, levels) for a in accs]
    return out


def _accumulate(energy, groups, inputs, targets, batch_size, draws_per_call) -> dict:
    """Per-input sums over the draws of ``groups`` ([(samples [S, P], buffers)])."""
    lik = energy.likelihood
    S = sum(s.shape[0] for s, _ in groups)
    parts: dict[str, list[Tensor]] = {}
    for lo in range(0, int(targets.shape[0]), batch_size):
        xb = tuple(t[lo: lo + batch_size].to(energy.device) for t in inputs)
        yb = targets[lo: lo + batch_size].to(energy.device)
        acc: dict[str, Tensor] = {}
        for samples, buffers in groups:
            for s0 in range(0, samples.shape[0], draws_per_call):
                chunk = samples[s0: s0 + draws_per_call]
                out = energy.forward_draws(chunk, xb, draws_per_call=draws_per_call, buffers=buffers)
                for k, v in _chunk_sums(lik, out, yb).items():
                    acc[k] = v if k not in acc else (torch.logaddexp(acc[k], v) if k == "log_lik_lse" else acc[k] + v)
        for k, v in acc.items():
            parts.setdefault(k, []).append(v)
    result = {k: torch.cat(v) for k, v in parts.items()}
    result["S"] = S
    result["device"] = energy.device
    return result


def _chunk_sums(lik, out: Tensor, y: Tensor) -> dict[str, Tensor]:
    if lik.name == "gaussian":
        f = out.squeeze(-1) if out.dim() > 2 and out.shape[-1] == 1 else out  # [s, b]
        f = f.to(torch.float64)
        sigma = float(lik.noise_std)
        z = (y.to(f) - f) / sigma
        log_n = -0.5 * z.square() - math.log(sigma) - 0.5 * math.log(2 * math.pi)
        return {"f_sum": f.sum(0), "f2_sum": f.square().sum(0), "log_lik_lse": torch.logsumexp(log_n, 0),
                "cdf_sum": torch.special.ndtr(z).sum(0)}
    if lik.name == "bernoulli":
        p1 = torch.sigmoid(out.squeeze(-1).to(torch.float64))
        probs = torch.stack([1 - p1, p1], -1)  # [s, b, 2]
    else:
        probs = out.to(torch.float64).softmax(-1)
    return {"probs_sum": probs.sum(0), "draw_entropy_sum": _entropy(probs).sum(0)}


def _entropy(p: Tensor) -> Tensor:
    return -(p * p.clamp_min(torch.finfo(p.dtype).tiny).log()).sum(-1)


def _pool(accs: list[dict]) -> dict:
    out = {"S": sum(a["S"] for a in accs), "device": accs[0]["device"]}
    for k in accs[0]:
        if k in ("S", "device"):
            continue
        vals = [a[k] for a in accs]
        out[k] = torch.logsumexp(torch.stack(vals), 0) if k == "log_lik_lse" else sum(vals)
    return out


def _classification(acc: dict, y: Tensor, num_bins: int) -> dict:
    probs = acc["probs_sum"] / acc["S"]
    return classification_metrics(probs, y, num_bins)


def _regression(acc: dict, y: Tensor, sigma: float, levels) -> dict:
    S = acc["S"]
    mean = acc["f_sum"] / S
    y = y.to(mean)
    nll = -(acc["log_lik_lse"] - math.log(S))
    cdf = acc["cdf_sum"] / S
    coverage = {f"{l:g}": float(((cdf >= (1 - l) / 2) & (cdf <= (1 + l) / 2)).double().mean()) for l in levels}
    return {"rmse": float((mean - y).square().mean().sqrt()), "nll": float(nll.mean()), "coverage": coverage}
