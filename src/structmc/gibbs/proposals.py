"""Blocked Metropolis-within-Gibbs, its proposal scales and acceptance: σ² per block from a
number, per-layer values, a map or a function (:func:`resolve_var`), and the acceptance rates
a chain recorded (:func:`acceptance`; see :mod:`structmc.gibbs.mwg`)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from ..partitions import Partition


def _resolve_var(spec, partition: Partition) -> Tensor:
    """σ² per block ``[M]`` (float64, validated positive and finite)."""
    M = partition.num_groups
    layer = partition.layer
    if isinstance(spec, Tensor):
        var = spec.detach().to(torch.float64).reshape(-1)
        if var.numel() == 1:
            var = var.expand(M)
        if var.numel() != M:
            raise ValueError(f"a proposal_var tensor needs one value per block ({M}), got {var.numel()}")
    elif isinstance(spec, (int, float)) and not isinstance(spec, bool):
        var = torch.full((M,), float(spec), dtype=torch.float64)
    elif isinstance(spec, (Mapping, Sequence)) or callable(spec):
        if not callable(spec) and (layer is None or bool((layer < 0).any())):
            raise ValueError(
                "per-layer proposal variances need blocks that each lie in one layer "
                "(by_layer, by_neuron, by_finer_nodes, custom with layer names)"
            )
        if callable(spec):
            sizes = partition.sizes()
            unit = partition.unit if partition.unit is not None else torch.full((M,), -1)
            var = torch.tensor(
                [
                    float(spec(b, int(layer[b]) if layer is not None else -1, int(unit[b]), int(sizes[b])))
                    for b in range(M)
                ],
                dtype=torch.float64,
            )
        elif isinstance(spec, Mapping):
            names = partition.layer_names
            if names is None:
                raise ValueError("a {layer pattern: variance} map needs a partition with layer names")
            per_layer = []
            for name in names:
                for pattern, v in spec.items():
                    if fnmatch.fnmatchcase(name, pattern):
                        per_layer.append(float(v))
                        break
                else:
                    raise ValueError(f"layer {name!r} matches no pattern in {list(spec)}")
            var = torch.tensor(per_layer, dtype=torch.float64)[layer]
        else:
            values = [float(v) for v in spec]
            assert layer is not None  # checked above for per-layer specs
            num_layers = int(layer.max()) + 1
            if len(values) != num_layers:
                raise ValueError(f"{len(values)} per-layer proposal variances given for {num_layers} layers")
            var = torch.tensor(values, dtype=torch.float64)[layer]
    else:
        raise TypeError(
            f"proposal_var must be a number, a per-layer sequence or map, a tensor or a function; got {spec!r}"
        )
    if not bool(torch.isfinite(var).all() & (var > 0).all()):
        bad = var[~(torch.isfinite(var) & (var > 0))][:5].tolist()
        raise ValueError(f"proposal variances must be positive and finite, got {bad}")
    return var


def _jsonable(spec):
    if isinstance(spec, Tensor):
        return spec.tolist()
    if isinstance(spec, Mapping):
        return dict(spec)
    if callable(spec):
        return getattr(spec, "__name__", repr(spec))
    if isinstance(spec, Sequence):
        return list(spec)
    return spec


def acceptance(chain, partition: Partition, *, by: str = "block", window: tuple[int, int] | None = None) -> Tensor:
    """Acceptance rates ``[C, groups]`` from a chain's ``accept`` record over the iterations in
    ``window = (first, last)`` (1-based, inclusive; all by default), per ``by`` = ``"block"``,
    ``"node"`` (unit: blocks of the same layer and unit pooled) or ``"layer"``."""
    acc = chain.info["accept"]
    S = acc.shape[-1]
    lo, hi = (1, S) if window is None else window
    if not 1 <= lo <= hi <= S:
        raise ValueError(f"window must satisfy 1 <= first <= last <= {S}, got {window}")
    rates = acc[..., lo - 1 : hi].to(torch.float64).mean(-1)  # [C, M] (or [C, L] if recorded per layer)
    if by == "block":
        if rates.shape[1] != partition.num_groups:
            raise ValueError("the chain recorded acceptance per layer, not per block")
        return rates
    if rates.shape[1] != partition.num_groups:
        if by == "layer":
            return rates
        raise ValueError("the chain recorded acceptance per layer only")
    if by == "layer":
        key = partition.layer
    elif by == "node":
        if partition.unit is None or bool((partition.unit < 0).any()):
            raise ValueError("node acceptance needs blocks that each lie in one unit")
        assert partition.layer is not None  # a partition with units has layers
        key = partition.layer * (int(partition.unit.max()) + 1) + partition.unit
    else:
        raise ValueError(f"by must be 'block', 'node' or 'layer', got {by!r}")
    uniq, inv = torch.unique(key, return_inverse=True)  # in (layer, unit) order
    counts = torch.bincount(inv, minlength=len(uniq)).to(torch.float64)  # blocks per node / layer
    out = torch.zeros(rates.shape[0], len(uniq), dtype=torch.float64).index_add_(1, inv, rates)
    return out / counts
