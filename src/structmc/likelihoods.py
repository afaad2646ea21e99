r"""Likelihoods of a module's output (:class:`~structmc.energy.ModuleEnergy`): the observation
model ``log p(y | f_θ(x))`` summed over a minibatch, its batched form over chains, the checks
of a target against the module's output, and the posterior predictive summary.

``"categorical"`` (logits ``[n, K, ...]``, integer class indices or soft labels),
``"bernoulli"`` (one logit per label, labels in {0, 1}), ``"gaussian"`` (the predicted mean,
known observation noise σ) or a callable ``(output, target) -> summed log-likelihood``
(``"custom"``: no checks, no predictive summary). What differs between them is kept per
kind in ``_KINDS``; :class:`~structmc.energy.ModuleEnergy` only calls the methods.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ._vmap import vmap  # torch.func.vmap, immune to tensordict's patches (issue 22 §3)

# The objects below lived in structmc.energy before the split (issue 23) and are still
# importable there. A run's fingerprint names library objects by module and qualified name
# (structmc.fingerprint), and checkpoints written before hold those names: keep them.
_HOME = "structmc.energy"


@dataclass(frozen=True)
class Likelihood:
    """Observation model of a module's output. ``log_lik`` sums over the minibatch;
    ``log_lik_chains`` (optional) takes outputs and targets of C chains, ``[C, n, ...]``, and
    returns the C sums, equal bit for bit to ``vmap(log_lik)`` but without vmap's per-op cost
    (cross-entropy is decomposed into ~20 small ops under vmap)."""

    name: str
    log_lik: Callable[[Tensor, Tensor], Tensor]
    noise_std: float | None = None
    log_lik_chains: Callable[[Tensor, Tensor], Tensor] | None = None

    def predict(self, outputs: Tensor, *, per_draw: bool = False) -> dict[str, Tensor]:
        """Posterior predictive summary from outputs of S draws, ``[S, n, ...]``; with
        ``per_draw`` each draw's own predictive (``probs`` ``[S, n, K]``, bernoulli ``[S, n]``;
        gaussian ``mean`` f_s(x) and ``var`` σ², ``[S, n]``), not averaged over draws."""
        kind = _KINDS.get(self.name)
        if kind is None:
            raise ValueError(f"no predictive summary for custom likelihood {self.name!r}")
        return kind.predict(self, outputs, per_draw)

    @property
    def takes_one_tensor(self) -> bool:
        """Whether the likelihood needs the module to return one tensor ``[n, ...]`` (the named
        ones); a custom likelihood may take whatever the module returns."""
        return self.name in _KINDS

    def check_output(self, out, rows: int) -> None:
        """``ValueError`` when the module's output on ``rows`` data rows cannot be this
        likelihood's input (not one tensor, or its first dimension not the rows); a custom
        likelihood takes what the module returns."""
        kind = _KINDS.get(self.name)
        if kind is None:
            return
        if not isinstance(out, Tensor):
            raise ValueError(
                f"the module returns a {type(out).__name__}, but the {self.name} likelihood "
                f"needs one tensor: {kind.output}. Make forward() return that tensor (e.g. wrap the module "
                f"so that it returns out[0] or out['logits']), or give a callable likelihood "
                f"(output, target) -> summed log-likelihood"
            )
        if out.dim() == 0 or out.shape[0] != rows:
            raise ValueError(
                f"the module's output on {rows} row(s) has shape {list(out.shape)}: its first dimension "
                f"must be the {rows} data rows (outputs [n, ...], one row per input row); check forward() "
                f"(e.g. a transpose or a reduction over the rows)"
            )

    def check_value(self, out, target: Tensor, rows: int) -> None:
        """``ValueError`` when a custom likelihood, called on the module's output ``out`` on the
        first ``rows`` rows and their targets, does not return one number (the summed
        log-likelihood): a per-example vector would otherwise fail inside autograd ("grad can be
        implicitly created only for scalar outputs"). An exception of the callable itself is left
        to the evaluation; the named likelihoods sum by construction."""
        if self.name in _KINDS:
            return
        try:
            value = self.log_lik(out, target[:rows])
        except Exception:  # noqa: BLE001  (the evaluation will raise it, with its own message)
            return
        if not isinstance(value, Tensor) or value.numel() != 1:
            what = f"a tensor of shape {list(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
            fn = getattr(self.log_lik, "__qualname__", type(self.log_lik).__name__)
            raise ValueError(
                f"the likelihood {fn!r} returned {what} on {rows} row(s): it must return the summed "
                f"log-likelihood of the minibatch, one scalar tensor (e.g. end it with .sum() over "
                f"the rows)"
            )

    def check_target(self, out: Tensor, target: Tensor, rows: int) -> None:
        """``ValueError`` when ``target`` (all rows, no chain dimension) does not fit this
        likelihood and the module's output ``out`` on its first ``rows`` rows (label dtype and
        range, soft labels, one output per target value); a custom likelihood checks nothing."""
        kind = _KINDS.get(self.name)
        if kind is not None:
            kind.check_target(out, target, rows)


def _class_indices(y: Tensor) -> Tensor:
    """Integer labels of any width as the int64 indices ``cross_entropy`` takes (int32 or uint8
    labels pass ``check_data``); int64 labels and soft labels are returned as they are."""
    return y if y.dtype == torch.long or y.is_floating_point() else y.long()


def _categorical(out: Tensor, y: Tensor) -> Tensor:
    return -F.cross_entropy(out, _class_indices(y), reduction="sum")


def _bernoulli(out: Tensor, y: Tensor) -> Tensor:
    return -F.binary_cross_entropy_with_logits(out.reshape(y.shape), y.to(out.dtype), reduction="sum")


def _categorical_chains(out: Tensor, y: Tensor) -> Tensor:
    if y.is_floating_point():  # soft labels: the batched form differs in rounding, keep vmap's
        return vmap(_categorical)(out, y)
    per_point = F.cross_entropy(out.flatten(0, 1), _class_indices(y).flatten(0, 1), reduction="none")
    return -per_point.reshape(out.shape[0], -1).sum(1)


def make_likelihood(likelihood: str | Likelihood | Callable, noise_std: float | None = None) -> Likelihood:
    """``"categorical"`` (logits), ``"bernoulli"`` (logit), ``"gaussian"`` (known ``noise_std``),
    a :class:`Likelihood`, or a callable ``(output, target) -> summed log-likelihood``."""
    if isinstance(likelihood, Likelihood):
        return likelihood
    if callable(likelihood):
        return Likelihood("custom", likelihood)
    if likelihood == "categorical":
        return Likelihood("categorical", _categorical, log_lik_chains=_categorical_chains)
    if likelihood == "bernoulli":
        return Likelihood("bernoulli", _bernoulli)  # a batched form would round differently
    if likelihood == "gaussian":
        if noise_std is None:
            raise ValueError("the gaussian likelihood needs noise_std > 0 (the known observation noise σ)")
        if (
            isinstance(noise_std, bool)
            or not isinstance(noise_std, numbers.Real)
            and not (isinstance(noise_std, Tensor) and noise_std.numel() == 1)
        ):
            raise TypeError(f"noise_std must be a number (the observation noise σ > 0), got {noise_std!r}")
        noise_std = float(noise_std)
        if not (noise_std > 0 and math.isfinite(noise_std)):
            raise ValueError(
                f"the gaussian likelihood needs a finite noise_std > 0, got {noise_std!r}: σ = inf makes "
                "the likelihood flat (the data would be ignored) and σ <= 0 or NaN is no distribution"
            )
        inv_var = 1.0 / noise_std**2

        def _gaussian(out: Tensor, y: Tensor) -> Tensor:
            return -0.5 * inv_var * (y - out.reshape(y.shape)).square().sum()

        def _gaussian_chains(out: Tensor, y: Tensor) -> Tensor:
            return -0.5 * inv_var * (y - out.reshape(y.shape)).square().reshape(y.shape[0], -1).sum(1)

        _gaussian.__module__ = _gaussian_chains.__module__ = _HOME  # fingerprint names (see _HOME)
        return Likelihood("gaussian", _gaussian, float(noise_std), _gaussian_chains)
    raise ValueError(f"unknown likelihood {likelihood!r}; use categorical, bernoulli, gaussian or a callable")


def _check_soft_labels(target: Tensor, K: int) -> None:
    """Soft labels ``[n, K, ...]`` are class probabilities (``cross_entropy``'s probability
    targets): every entry >= 0 and each row summing to 1 over the K classes (dim 1). Anything
    else would be taken as is: ``-Σ_k y_k log p_k`` with negative or unnormalised ``y`` is no
    log-likelihood (its scale and sign change the posterior silently)."""
    lo = float(target.min())
    if lo < 0:
        bad = int((target < 0).reshape(target.shape[0], -1).any(1).sum())
        raise ValueError(
            f"soft labels (float targets shaped like the logits) are class probabilities and must be >= 0, "
            f"got values down to {lo:.4g} in {bad} row(s): pass probabilities (e.g. y.softmax(1)), or "
            f"integer class indices with y.long()"
        )
    sums = target.sum(1, dtype=torch.float64)
    tol = max(1e-4, 16 * K * torch.finfo(target.dtype).eps)
    err = (sums - 1).abs()
    if float(err.max()) > tol:
        bad = int((err > tol).reshape(target.shape[0], -1).any(1).sum())
        raise ValueError(
            f"soft labels (float targets shaped like the logits) are class probabilities: each row must sum "
            f"to 1 over the {K} classes (dim 1), but {bad} row(s) do not (sums from {float(sums.min()):.4g} "
            f"to {float(sums.max()):.4g}): normalise them, y / y.sum(1, keepdim=True)"
        )


# ---------------------------------------------------------------------------------------
# What each named likelihood does beyond its log-likelihood
# ---------------------------------------------------------------------------------------
def _squeezed(outputs: Tensor) -> Tensor:
    return outputs.squeeze(-1) if outputs.dim() > 2 and outputs.shape[-1] == 1 else outputs


def _predict_categorical(lik: Likelihood, outputs: Tensor, per_draw: bool) -> dict[str, Tensor]:
    probs = outputs.softmax(-1)
    return {"probs": probs if per_draw else probs.mean(0)}


def _predict_bernoulli(lik: Likelihood, outputs: Tensor, per_draw: bool) -> dict[str, Tensor]:
    probs = torch.sigmoid(outputs.squeeze(-1))
    return {"probs": probs if per_draw else probs.mean(0)}


def _predict_gaussian(lik: Likelihood, outputs: Tensor, per_draw: bool) -> dict[str, Tensor]:
    sigma = lik.noise_std
    if sigma is None:
        raise ValueError(
            "the gaussian likelihood's predictive needs its noise_std (the observation noise σ): build it "
            "with make_likelihood('gaussian', noise_std=σ)"
        )
    f = _squeezed(outputs)
    if per_draw:
        return {"mean": f, "var": torch.full_like(f, sigma**2)}
    var = f.var(0, unbiased=False) + sigma**2
    return {"mean": f.mean(0), "var": var}


def _check_categorical(out: Tensor, target: Tensor, rows: int) -> None:
    y = target[:rows]
    if out.dim() < 2:
        raise ValueError(f"the categorical likelihood needs logits [n, K]; the module outputs {list(out.shape)}")
    K = out.shape[1]
    if target.is_floating_point() and tuple(y.shape) == tuple(out.shape):
        _check_soft_labels(target, K)  # class probabilities (soft labels) along dim 1
        return
    if target.is_floating_point() or target.dtype == torch.bool or target.is_complex():
        raise ValueError(
            f"categorical labels must be integer class indices in [0, {K}), got dtype "
            f"{target.dtype}: convert with y.long()"
        )
    if tuple(y.shape[1:]) != tuple(out.shape[2:]):
        raise ValueError(
            f"categorical labels of shape {list(target.shape)} do not fit the module's logits "
            f"{list(out.shape)} on {rows} rows (expected labels [n{''.join(f', {d}' for d in out.shape[2:])}])"
        )
    lo, hi = int(target.min()), int(target.max())
    if lo < 0 or hi >= K:
        raise ValueError(
            f"categorical labels must be in [0, {K}) (the module outputs {K} logits), got labels in [{lo}, {hi}]"
        )


def _check_bernoulli(out: Tensor, target: Tensor, rows: int) -> None:
    y = target[:rows]
    if out.numel() != y.numel():
        raise ValueError(
            f"the bernoulli likelihood needs one logit per label: the module outputs "
            f"{list(out.shape)} for labels {list(y.shape)} ({rows} rows)"
        )
    if not bool(((target == 0) | (target == 1)).all()):
        vals = torch.unique(target)[:5].tolist()
        raise ValueError(f"bernoulli labels must be 0 or 1, got values such as {vals}")


def _check_gaussian(out: Tensor, target: Tensor, rows: int) -> None:
    y = target[:rows]
    if out.numel() != y.numel():
        raise ValueError(
            f"gaussian targets of shape {list(target.shape)} do not match the module's output "
            f"{list(out.shape)} on {rows} rows (one output per target value)"
        )


class _Kind(NamedTuple):
    output: str  # what the module must return, for the error message
    check_target: Callable[[Tensor, Tensor, int], None]
    predict: Callable[[Likelihood, Tensor, bool], dict]


_KINDS = {
    "categorical": _Kind("logits [n, K]", _check_categorical, _predict_categorical),
    "bernoulli": _Kind("one logit per row, [n] or [n, 1]", _check_bernoulli, _predict_bernoulli),
    "gaussian": _Kind("the predicted mean, one value per target value", _check_gaussian, _predict_gaussian),
}

for _obj in (
    Likelihood,
    _categorical,
    _bernoulli,
    _categorical_chains,
    make_likelihood,
    _check_soft_labels,
    _class_indices,
):
    _obj.__module__ = _HOME
del _obj
