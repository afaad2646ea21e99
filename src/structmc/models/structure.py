"""Layer and unit structure of a module, for parameter partitions.

:func:`layer_structure` lists, in ``named_modules`` order, every ``Linear`` / ``Conv`` layer
(and, with ``include_norm=True``, every affine normalisation layer) with the names of its
weight and bias parameters and its number of output units (neurons or channels). A unit's
incoming weights are ``weight[u]`` — for ``Linear`` (out × in) and ``Conv`` (out × in/groups
× k…) alike a contiguous block of ``fan_in`` numbers in the flat vector — and its bias is
``bias[u]``. So "a neuron's incoming weights and its bias" is one group.

:func:`unit_ids` and :func:`layer_ids` turn this into integer group ids over the flat vector
of :class:`~structmc.space.ParamSpace` (the layout :class:`~structmc.energy.ModuleEnergy`
uses), −1 for parameters outside every listed layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..space import ParamSpace

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORM = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d,
         nn.InstanceNorm3d)


@dataclass(frozen=True)
class LayerInfo:
    """One layer: module path, kind (``"linear"``, ``"conv"``, ``"norm"``), parameter names
    (``None`` when absent or frozen), output units and weights per unit."""

    name: str
    kind: str
    weight: str | None
    bias: str | None
    num_units: int
    fan_in: int

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(p for p in (self.weight, self.bias) if p is not None)


def layer_structure(module: nn.Module, *, include_norm: bool = False) -> list[LayerInfo]:
    """The ``Linear``/``Conv`` (and optionally norm) layers of ``module`` with their trainable
    weight and bias names and unit counts (see module docstring)."""
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    out = []
    for name, m in module.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(m, nn.Linear):
            kind, units, fan_in = "linear", m.out_features, m.in_features
        elif isinstance(m, _CONV):
            kind, units, fan_in = "conv", m.out_channels, m.weight[0].numel()
        elif include_norm and isinstance(m, _NORM) and getattr(m, "weight", None) is not None:
            kind, units, fan_in = "norm", m.weight.shape[0], 1
        else:
            continue
        weight = f"{prefix}weight" if f"{prefix}weight" in trainable else None
        bias = f"{prefix}bias" if f"{prefix}bias" in trainable else None
        if weight is None and bias is None:
            continue
        out.append(LayerInfo(name, kind, weight, bias, int(units), int(fan_in)))
    return out


def _space(module: nn.Module, space: ParamSpace | None) -> ParamSpace:
    return space if space is not None else ParamSpace.from_module(module)


def unit_ids(module: nn.Module, space: ParamSpace | None = None, *, include_norm: bool = True) -> Tensor:
    """Group id per entry of the flat parameter vector: unit ``u`` of the ``l``-th layer gets
    one id shared by its incoming weights and its bias; −1 elsewhere."""
    space = _space(module, space)
    ids = torch.full((space.dim,), -1, dtype=torch.long)
    next_id = 0
    for layer in layer_structure(module, include_norm=include_norm):
        unit = torch.arange(next_id, next_id + layer.num_units)
        for pname in layer.params:
            info = space[pname]
            ids[info.slice] = unit.repeat_interleave(info.numel // layer.num_units)
        next_id += layer.num_units
    return ids


def layer_ids(module: nn.Module, space: ParamSpace | None = None, *, include_norm: bool = True) -> Tensor:
    """Layer index per entry of the flat parameter vector (−1 outside every listed layer)."""
    space = _space(module, space)
    ids = torch.full((space.dim,), -1, dtype=torch.long)
    for k, layer in enumerate(layer_structure(module, include_norm=include_norm)):
        for pname in layer.params:
            ids[space[pname].slice] = k
    return ids
