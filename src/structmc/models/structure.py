"""Layer and unit structure of a module, for parameter partitions — a view of the core
records of :mod:`structmc.layers` (read once, from module types, by
:meth:`ParamSpace.from_module <structmc.space.ParamSpace.from_module>` and kept as
``space.layers``).

:func:`layer_structure` lists, in flat-vector (``named_parameters``) order, every ``Linear`` /
``Conv`` layer (and, with ``include_norm=True``, every affine normalisation layer) with the
names of its weight and bias parameters and its number of output units (neurons or
channels). A unit's incoming weights are ``weight[u]`` — for ``Linear`` (out × in) and
``Conv`` (out × in/groups × k…) alike a contiguous block of ``fan_in`` numbers in the flat
vector — and its bias is ``bias[u]``. So "a neuron's incoming weights and its bias" is one
group.

:func:`unit_ids` and :func:`layer_ids` turn this into integer group ids over the flat vector
of :class:`~structmc.space.ParamSpace` (the layout :class:`~structmc.energy.ModuleEnergy`
uses), −1 for parameters outside every listed layer.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..layers import LayerInfo, layers_from_names, read_layers
from ..space import ParamSpace

__all__ = ["LayerInfo", "layer_structure", "unit_ids", "layer_ids", "read_layers", "layers_from_names"]


def _listed(space: ParamSpace, include_norm: bool) -> list[tuple[int, LayerInfo]]:
    kinds = ("linear", "conv", "norm") if include_norm else ("linear", "conv")
    return [(k, rec) for k, rec in enumerate(space.layers) if rec.kind in kinds]


def layer_structure(module: nn.Module, *, include_norm: bool = False) -> list[LayerInfo]:
    """The ``Linear``/``Conv`` (and optionally norm) layers of ``module`` with their trainable
    weight and bias names and unit counts (see module docstring); ``space.layers`` of
    ``ParamSpace.from_module(module)`` without the ``"other"`` records."""
    return [rec for _, rec in _listed(ParamSpace.from_module(module), include_norm)]


def _space(module: nn.Module, space: ParamSpace | None) -> ParamSpace:
    """``space``'s layout with layers read from ``module``'s types."""
    if space is None:
        return ParamSpace.from_module(module)
    return ParamSpace([(i.name, i.shape) for i in space.params], read_layers(module, space.params))


def unit_ids(module: nn.Module, space: ParamSpace | None = None, *, include_norm: bool = True) -> Tensor:
    """Group id per entry of the flat parameter vector: unit ``u`` of the ``l``-th listed
    layer gets one id shared by its incoming weights and its bias; −1 elsewhere."""
    space = _space(module, space)
    ids = torch.full((space.dim,), -1, dtype=torch.long)
    next_id = 0
    for _, rec in _listed(space, include_norm):
        ids[space.unit_rows(rec)] = next_id + torch.arange(rec.num_units).unsqueeze(1)
        next_id += rec.num_units
    return ids


def layer_ids(module: nn.Module, space: ParamSpace | None = None, *, include_norm: bool = True) -> Tensor:
    """Index of each entry's layer among the listed layers (−1 outside every one)."""
    space = _space(module, space)
    ids = torch.full((space.dim,), -1, dtype=torch.long)
    for j, (_, rec) in enumerate(_listed(space, include_norm)):
        ids[space.unit_rows(rec).flatten()] = j
    return ids
