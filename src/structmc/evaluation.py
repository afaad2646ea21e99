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
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from .batching import DataSource
from .chain import Chain
from .diagnostics.calibration import auroc, classification_metrics
from .module_binding import flat_data, flat_inputs
from .predictive import (
    _check_count,
    _check_inputs,
    _draw_groups,
    _finite_draws,
    _finite_predictions,
    _finite_rows,
    predictive_energy,
)

__all__ = ["evaluate", "evaluate_probs"]


@torch.no_grad()
def evaluate(
    energy,
    draws: Chain | Tensor,
    data,
    *,
    batch_size: int = 1024,
    draws_per_call: int = 64,
    num_bins: int = 10,
    levels: Sequence[float] = (0.5, 0.9, 0.95),
    per_chain: bool = True,
    ood=None,
) -> dict:
    """Predictive metrics of ``draws`` (a :class:`~structmc.chain.Chain`, ``[C, D, P]`` or
    ``[S, P]``) of ``energy`` (a :class:`~structmc.energy.ModuleEnergy`, a
    :class:`~structmc.priors.HierarchicalEnergy` or a
    :class:`~structmc.structured.StructuredEnergy` over one: predictions go through its
    ``predictive_energy``, as in :func:`~structmc.predictive`) on held-out ``data``: the same
    forms :func:`structmc.sample` takes, ``(inputs..., targets)`` tensors, a ``TensorDataset``,
    a map-style ``Dataset`` or a :class:`~structmc.batching.DataSource` (items collated by its
    ``collate_fn`` into ``(inputs..., targets)``, read in order in batches of ``batch_size``;
    its training ``transform`` is not applied).

    Returns ``{"task", "pooled": {metric: float}, "per_chain": [{metric: float}] (Chain or
    [C, D, P] draws with ``per_chain``), "num_draws", "num_inputs"}`` plus, per input,
    ``"probs"``, ``"entropy"``, ``"mutual_information"`` (classification) or ``"mean"``,
    ``"std"`` (regression). See the module docstring for the definitions.

    ``ood``: out-of-distribution inputs (a tensor, or a tuple of input tensors, ``[m, ...]``;
    classification only). Then ``"pooled"`` (and each ``"per_chain"`` entry) also holds
    ``ood_auroc_entropy`` and ``ood_auroc_mutual_information``: how well the predictive entropy
    and the mutual information tell the ``ood`` inputs from ``data``'s
    (:func:`~structmc.diagnostics.auroc`, the OOD inputs as positives; 0.5 is no separation), and
    ``"ood"`` holds their per-input ``entropy`` and ``mutual_information``."""
    energy = predictive_energy(energy, "evaluate")
    keys = getattr(energy, "input_keys", None)  # a module called with keyword inputs: data may hold a dict
    data = flat_data(keys, data, "evaluate")
    if isinstance(ood, Mapping):
        ood = flat_inputs(keys, (ood,), "evaluate(ood=...)")
    lik = energy.likelihood
    if lik.name not in ("categorical", "bernoulli", "gaussian"):
        raise ValueError(f"evaluate knows the categorical, bernoulli and gaussian likelihoods, not {lik.name!r}")
    for name, v in (("batch_size", batch_size), ("draws_per_call", draws_per_call), ("num_bins", num_bins)):
        _check_count(name, v)
    if not all(0 < float(l) < 1 for l in levels):
        raise ValueError(f"levels must lie in (0, 1), got {list(levels)}")
    n, batches = _batches(data, batch_size)
    samples = draws.samples if isinstance(draws, Chain) else draws
    chains = samples.shape[0] if (per_chain and samples.dim() == 3) else None
    groups = (
        [_draw_groups(energy, draws, c) for c in range(chains)]
        if chains is not None
        else [_draw_groups(energy, draws, None)]
    )
    if sum(s.shape[0] for g in groups for s, _ in g) == 0:
        raise ValueError("no draws to evaluate")
    _finite_draws(samples)
    # sample()'s checks on the data, before any compute: NaN/Inf rows, dtypes, the input width
    # (one forward of one draw), the labels against the likelihood; a Dataset's on its first batch
    tensors = data_tensors(data)
    first = tensors if tensors is not None else next(iter(batches()))
    _check_inputs(energy, groups[0], first[:-1], "evaluate", first[-1])
    task = "regression" if lik.name == "gaussian" else "classification"
    ood_batches = _ood_batches(ood, task, len(first) - 1, batch_size)
    if ood_batches is not None:
        _check_inputs(energy, groups[0], next(iter(ood_batches()))[:-1], "evaluate (ood)")
    accs, targets = _accumulate(energy, groups, batches, draws_per_call, check_rows=tensors is None)
    pooled = _pool(accs)
    _finite_predictions(pooled["probs_sum" if task == "classification" else "f_sum"], "evaluate")
    out = {"task": task, "num_draws": pooled["S"], "num_inputs": n}
    y = targets.to(pooled["device"])
    if task == "classification":
        ood_accs, ood_pooled = None, None
        if ood_batches is not None:
            ood_accs, _ = _accumulate(energy, groups, ood_batches, draws_per_call, check_rows=True)
            ood_pooled = _pool(ood_accs)
            _finite_predictions(ood_pooled["probs_sum"], "evaluate (ood)")
        out.update(_classification_result(pooled, y, num_bins, ood_pooled))  # evaluate_probs's code
        if chains is not None:
            out["per_chain"] = [_classification(a, y, num_bins) for a in accs]
            for entry, a, o in zip(out["per_chain"], accs, ood_accs or ()):
                entry.update(_separation(_uncertainty(a), _uncertainty(o)))
    else:
        sigma = float(lik.noise_std)
        out["pooled"] = _regression(pooled, y, sigma, levels)
        mean = pooled["f_sum"] / pooled["S"]
        out["mean"] = mean
        out["std"] = (pooled["f2_sum"] / pooled["S"] - mean.square()).clamp_min(0).add(sigma**2).sqrt()
        if chains is not None:
            out["per_chain"] = [_regression(a, y, sigma, levels) for a in accs]
    return out


@torch.no_grad()
def evaluate_probs(probs: Tensor, labels: Tensor, *, ood_probs: Tensor | None = None, num_bins: int = 10) -> dict:
    r"""The classification metrics of :func:`evaluate` for any model given by its predictive
    probabilities: a deep ensemble, a Laplace approximation, a point estimate, or draws scored
    elsewhere. :func:`evaluate` computes its own classification results with this code, so
    every method is scored the same way.

    ``probs``: ``[M, n, K]``, the class probabilities of M members (draws, ensemble members,
    samples of an approximate posterior) at the n test inputs, or ``[n, K]``, one predictive
    (then M = 1 and the mutual information is 0). The scored predictive is the members'
    average p̄(y|x) = (1/M) Σ_m p_m(y|x); per input, the predictive entropy H[p̄] and the mutual
    information H[p̄] − (1/M) Σ_m H[p_m] (the members' disagreement). ``labels``: ``[n]``
    integer classes in ``[0, K)``. ``ood_probs``: the same for out-of-distribution inputs
    (``[M, m, K]`` or ``[m, K]``, the same M and K); then ``"pooled"`` also holds
    ``ood_auroc_entropy`` and ``ood_auroc_mutual_information``
    (:func:`~structmc.diagnostics.auroc`, the OOD inputs as positives; 0.5 is no separation).

    Returns ``{"task": "classification", "pooled": {accuracy, nll, brier, ece, mce[,
    ood_auroc_entropy, ood_auroc_mutual_information]}, "num_draws": M, "num_inputs": n, "probs",
    "entropy", "mutual_information"[, "ood": {"entropy", "mutual_information"}]}``, the keys of
    :func:`evaluate`'s result without ``per_chain``. Computed in float64."""
    _check_count("num_bins", num_bins)
    members = _members(probs, "probs")
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.dtype.is_floating_point or labels.is_complex():
        raise ValueError(f"evaluate_probs: labels must be an integer tensor [n], got {_describe(labels)}")
    M, n, K = members.shape
    if labels.shape[0] != n:
        raise ValueError(f"evaluate_probs: {n} inputs in probs but {labels.shape[0]} labels")
    if n and (int(labels.min()) < 0 or int(labels.max()) >= K):
        raise ValueError(f"evaluate_probs: labels must lie in [0, {K - 1}] (K = {K} classes in probs)")
    ood = None
    if ood_probs is not None:
        ood = _members(ood_probs, "ood_probs")
        if ood.shape[0] != M or ood.shape[2] != K:
            raise ValueError(
                f"evaluate_probs: ood_probs must have probs' {M} member(s) and {K} classes, got {tuple(ood.shape)}"
            )
    y = labels.to(members.device)
    out = {"task": "classification", "num_draws": M, "num_inputs": n}
    out.update(_classification_result(_member_sums(members), y, num_bins, None if ood is None else _member_sums(ood)))
    return out


def _describe(x) -> str:
    return f"{tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__


def _members(probs, name: str) -> Tensor:
    """``probs`` as ``[M, n, K]`` float64, checked: probabilities (finite, in [0, 1], rows
    summing to 1 within 1e-4), at least one member, input and class."""
    if not isinstance(probs, Tensor) or probs.dim() not in (2, 3) or not probs.is_floating_point():
        raise ValueError(
            f"evaluate_probs: {name} must be a float tensor [M, n, K] (members) or [n, K], got {_describe(probs)}"
        )
    p = (probs.unsqueeze(0) if probs.dim() == 2 else probs).to(torch.float64)
    if min(p.shape) == 0 or p.shape[-1] < 2:
        raise ValueError(f"evaluate_probs: {name} needs a member, an input and 2 classes or more, got {tuple(p.shape)}")
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()) or bool((p > 1).any()):
        raise ValueError(f"evaluate_probs: {name} must hold probabilities in [0, 1] (no NaN/Inf)")
    worst = float((p.sum(-1) - 1).abs().max())
    if worst > 1e-4:
        raise ValueError(
            f"evaluate_probs: the rows of {name} must sum to 1 over the classes (off by up to {worst:.3g}); "
            "give probabilities (softmax of the logits), not logits"
        )
    return p


def _member_sums(members: Tensor) -> dict:
    """The per-input sums :func:`_accumulate` keeps, from each member's probabilities ``[S, n, K]``."""
    return {"probs_sum": members.sum(0), "draw_entropy_sum": _entropy(members).sum(0), "S": members.shape[0]}


def _classification_result(pooled: dict, y: Tensor, num_bins: int, ood_pooled: dict | None) -> dict:
    """The classification results from the per-input sums over all draws (``pooled``) and
    over the same draws at the out-of-distribution inputs: the metrics of the average
    predictive, per input its entropy and mutual information, the OOD AUROCs."""
    out: dict = {"pooled": _classification(pooled, y, num_bins)}
    inside = _uncertainty(pooled)
    out["probs"] = pooled["probs_sum"] / pooled["S"]
    out["entropy"] = inside["entropy"]
    out["mutual_information"] = inside["mutual_information"]
    if ood_pooled is not None:
        out["ood"] = _uncertainty(ood_pooled)
        out["pooled"].update(_separation(inside, out["ood"]))
    return out


def _ood_batches(ood, task: str, num_inputs: int, batch_size: int):
    """The out-of-distribution inputs as ``(inputs..., dummy labels)`` batches (the labels are
    never scored), checked before any compute; ``None`` without them."""
    if ood is None:
        return None
    if task != "classification":
        raise ValueError("evaluate(ood=...): out-of-distribution scores need a classification likelihood")
    inputs = (ood,) if isinstance(ood, Tensor) else tuple(ood)
    if len(inputs) != num_inputs or not all(isinstance(t, Tensor) and t.dim() > 0 for t in inputs):
        raise ValueError(
            f"evaluate(ood=...): give the out-of-distribution inputs as {num_inputs} tensor(s) [m, ...], like "
            "data's inputs (no targets)"
        )
    m = int(inputs[0].shape[0])
    if m == 0 or any(int(t.shape[0]) != m for t in inputs):
        raise ValueError("evaluate(ood=...): the inputs need at least one row, the same number in each tensor")
    labels = torch.zeros(m, dtype=torch.long, device=inputs[0].device)
    tensors = (*inputs, labels)
    return lambda: (tuple(t[lo : lo + batch_size] for t in tensors) for lo in range(0, m, batch_size))


def _uncertainty(acc: dict) -> dict[str, Tensor]:
    """Per input: the predictive entropy and the mutual information (the module docstring)."""
    entropy = _entropy(acc["probs_sum"] / acc["S"])
    return {"entropy": entropy, "mutual_information": entropy - acc["draw_entropy_sum"] / acc["S"]}


def _separation(inside: dict[str, Tensor], outside: dict[str, Tensor]) -> dict[str, float]:
    """AUROC of each uncertainty telling the out-of-distribution inputs (positives) from the
    in-distribution ones."""
    return {f"ood_auroc_{k}": float(auroc(inside[k], outside[k])) for k in ("entropy", "mutual_information")}


def _batches(data, batch_size: int):
    """``(n, batches)``: ``batches()`` yields the ``(inputs..., targets)`` batches of ``data``
    in order (tensors sliced, a Dataset's items collated by :meth:`DataSource.collate`).
    Everything is checked here, before any compute."""
    from torch.utils.data import Dataset

    if isinstance(data, DataSource):
        source = data
    elif isinstance(data, (tuple, list)) or hasattr(data, "tensors"):  # tensors, a TensorDataset
        source = DataSource(tuple(data.tensors) if hasattr(data, "tensors") else tuple(data))
    elif isinstance(data, Dataset) or (
        hasattr(data, "__getitem__") and hasattr(data, "__len__") and not isinstance(data, (Tensor, str, bytes))
    ):
        source = DataSource(data)
    else:
        raise ValueError(
            f"data must be (inputs..., targets): a tuple of tensors, a TensorDataset, a map-style "
            f"Dataset or a DataSource, got {type(data).__name__}"
        )
    if source.tensors is not None:
        tensors = source.tensors
        if len(tensors) < 2:
            raise ValueError("data must be (inputs..., targets)")
        if not all(isinstance(t, Tensor) and t.dim() > 0 for t in tensors):
            raise ValueError("data must be tensors (inputs..., targets), each [n, ...]")
        n = int(tensors[-1].shape[0])
        if any(int(t.shape[0]) != n for t in tensors):
            raise ValueError("inputs and targets must have the same first dimension")
        if n == 0:
            raise ValueError("data has no rows (n = 0): evaluate needs at least one (input, target) pair")
        return n, lambda: (tuple(t[lo : lo + batch_size] for t in tensors) for lo in range(0, n, batch_size))
    n = len(source)
    if n == 0:
        raise ValueError(
            f"data: the Dataset ({type(source.dataset).__name__}) is empty (len 0): evaluate needs at "
            "least one (input, target) pair"
        )
    if len(source.probe(1)) < 2:
        raise ValueError(
            "data must be (inputs..., targets): the dataset's items collate into one tensor; give a "
            "DataSource(dataset, collate_fn=...) that returns (inputs..., targets)"
        )
    return n, lambda: (source.collate(list(range(lo, min(lo + batch_size, n)))) for lo in range(0, n, batch_size))


def data_tensors(data) -> tuple[Tensor, ...] | None:
    """The tensors of in-memory ``data`` (a tuple of tensors, a TensorDataset, a DataSource over
    tensors), ``None`` for a Dataset read item by item."""
    if isinstance(data, DataSource):
        return data.tensors
    if hasattr(data, "tensors"):
        return tuple(data.tensors)
    if isinstance(data, (tuple, list)):
        return tuple(data)
    return None


def _accumulate(energy, groups_list, batches, draws_per_call, check_rows: bool = False) -> tuple[list[dict], Tensor]:
    """Per-input sums over the draws of each entry of ``groups_list`` (each [(samples [S, P],
    buffers)]), reading the data once; and the targets, concatenated. ``check_rows``: refuse a
    batch with NaN/Inf values (a Dataset's, read here for the first time)."""
    lik = energy.likelihood
    parts: list[dict[str, list[Tensor]]] = [{} for _ in groups_list]
    targets = []
    seen = 0
    for batch in batches():
        if check_rows:
            for i, t in enumerate(batch):
                name = "the target" if i == len(batch) - 1 else f"input {i}"
                _finite_rows(t, f"evaluate: {name}", seen)
            seen += int(batch[-1].shape[0])
        xb = tuple(t.to(energy.device) for t in batch[:-1])
        yb = batch[-1].to(energy.device)
        targets.append(batch[-1])
        for groups, part in zip(groups_list, parts):
            acc: dict[str, Tensor] = {}
            for samples, buffers in groups:
                for s0 in range(0, samples.shape[0], draws_per_call):
                    chunk = samples[s0 : s0 + draws_per_call]
                    out = energy.forward_draws(chunk, xb, draws_per_call=draws_per_call, buffers=buffers)
                    for k, v in _chunk_sums(lik, out, yb).items():
                        acc[k] = (
                            v if k not in acc else (torch.logaddexp(acc[k], v) if k == "log_lik_lse" else acc[k] + v)
                        )
            for k, v in acc.items():
                part.setdefault(k, []).append(v)
    results = []
    for groups, part in zip(groups_list, parts):
        result = {k: torch.cat(v) for k, v in part.items()}
        result["S"] = sum(s.shape[0] for s, _ in groups)
        result["device"] = energy.device
        results.append(result)
    return results, torch.cat(targets)


def _chunk_sums(lik, out: Tensor, y: Tensor) -> dict[str, Tensor]:
    if lik.name == "gaussian":
        f = out.squeeze(-1) if out.dim() > 2 and out.shape[-1] == 1 else out  # [s, b]
        f = f.to(torch.float64)
        sigma = float(lik.noise_std)
        z = (y.to(f) - f) / sigma
        log_n = -0.5 * z.square() - math.log(sigma) - 0.5 * math.log(2 * math.pi)
        return {
            "f_sum": f.sum(0),
            "f2_sum": f.square().sum(0),
            "log_lik_lse": torch.logsumexp(log_n, 0),
            "cdf_sum": torch.special.ndtr(z).sum(0),
        }
    if lik.name == "bernoulli":
        p1 = torch.sigmoid(out.squeeze(-1).to(torch.float64))
        probs = torch.stack([1 - p1, p1], -1)  # [s, b, 2]
    else:
        probs = out.to(torch.float64).softmax(-1)
    sums = _member_sums(probs)
    del sums["S"]
    return sums


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
