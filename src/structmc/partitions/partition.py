"""The :class:`Partition` object of :mod:`structmc.partitions`: group ids per parameter,
validated, with each group's layer and unit and the cached CSR layout of its members."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

import torch
from torch import Tensor

from ..space import ParamSpace


def contiguous_index(idx: Tensor):
    """``idx`` as a slice when it is a contiguous ascending run (indexing then gives a view,
    not a gather), else ``idx`` itself."""
    if idx.numel() and bool((idx.diff() == 1).all()):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


@dataclass(frozen=True, eq=False)
class Partition:
    """Group id per parameter (``group_ids: [P]`` long, ``0..num_groups-1``), with per-group
    ``layer`` and ``unit`` indices (``[M]`` long, −1 where not one layer / unit) and the
    space's ``layer_names`` where known. Immutable: tensors returned by :meth:`members`,
    :meth:`blocks` and :meth:`sizes` are shared cached views — do not modify them in place."""

    group_ids: Tensor  # [P] long
    num_groups: int
    kind: str = "custom"
    layer: Tensor | None = None  # [M] long, -1 where the group spans layers
    unit: Tensor | None = None  # [M] long, unit within the layer, -1 where the group spans units
    layer_names: tuple[str, ...] | None = None

    def __post_init__(self):
        ids = self.group_ids
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.dtype != torch.long:
            raise ValueError("group_ids must be a 1-d long tensor")
        if ids.numel() == 0:
            raise ValueError("a partition needs at least one parameter")
        object.__setattr__(self, "num_groups", int(self.num_groups))
        lo, hi = torch.aminmax(ids)
        if int(lo) < 0 or int(hi) >= self.num_groups:
            raise ValueError(f"group ids must lie in [0, {self.num_groups}), got [{int(lo)}, {int(hi)}]")
        sizes = self.sizes()
        if bool((sizes == 0).any()):
            empty = torch.nonzero(sizes == 0).flatten().tolist()[:10]
            raise ValueError(f"empty groups {empty} (of {self.num_groups}); every group needs a parameter")
        for field in ("layer", "unit"):
            v = getattr(self, field)
            if v is None:
                v = torch.full((self.num_groups,), -1, dtype=torch.long, device=ids.device)
            v = torch.as_tensor(v, dtype=torch.long)
            if v.shape != (self.num_groups,):
                raise ValueError(f"{field} must have shape [{self.num_groups}], got {tuple(v.shape)}")
            object.__setattr__(self, field, v)
        if self.layer_names is not None:
            names = tuple(str(n) for n in self.layer_names)
            if int(self.layer.max()) >= len(names):
                raise ValueError(f"layer index {int(self.layer.max())} but only {len(names)} layer names")
            object.__setattr__(self, "layer_names", names)

    # -- sizes and members (CSR layout, computed once) ---------------------------------------
    @property
    def dim(self) -> int:
        return self.group_ids.numel()

    @cached_property
    def _sizes(self) -> Tensor:
        return torch.bincount(self.group_ids.cpu(), minlength=self.num_groups)

    @cached_property
    def _csr(self) -> tuple[Tensor, list[int], list[int]]:
        order = torch.argsort(self.group_ids, stable=True)  # members of each group, ascending
        return order, [0] + self._sizes.cumsum(0).tolist(), self._sizes.tolist()

    @cached_property
    def _blocks(self) -> tuple[Tensor, ...]:
        order, _, sizes = self._csr
        return tuple(torch.split(order, sizes))

    def sizes(self) -> Tensor:
        """``[M]`` long (CPU): parameters per group."""
        return self._sizes

    def members(self, group: int) -> Tensor:
        """Flat indices of group ``group``, ascending (a slice of the cached layout)."""
        order, offsets, _ = self._csr
        g = int(group)
        if not 0 <= g < self.num_groups:
            raise IndexError(f"group {group} out of range [0, {self.num_groups})")
        return order[offsets[g] : offsets[g + 1]]

    def blocks(self) -> tuple[Tensor, ...]:
        """Members of every group at once (``members(g)`` for ``g = 0..M-1``)."""
        return self._blocks

    @property
    def order(self) -> Tensor:
        """``[P]``: flat indices sorted by group (stable), i.e. ``cat(blocks())``."""
        return self._csr[0]

    @property
    def offsets(self) -> Tensor:
        """``[M + 1]`` long: group ``g`` is ``order[offsets[g]:offsets[g + 1]]``."""
        return torch.tensor(self._csr[1], dtype=torch.long)

    def masks(self, dtype=torch.float32, device=None) -> Tensor:
        """One-hot ``[M, P]`` group masks (memory M·P: use for moderate M only)."""
        eye = torch.eye(self.num_groups, dtype=dtype, device=device)
        return eye[:, self.group_ids.to(device)]

    # -- structure --------------------------------------------------------------------------
    def layer_name(self, group: int) -> str | None:
        """Name of group ``group``'s layer, ``None`` where unknown or several."""
        k = int(cast(Tensor, self.layer)[int(group)])  # a tensor from __post_init__ on
        return None if k < 0 or self.layer_names is None else self.layer_names[k]

    def annotate(self, space: ParamSpace) -> Partition:
        """A copy whose ``layer`` / ``unit`` / ``layer_names`` are read off ``space``: a group's
        layer (unit) where all its members lie in one layer (unit), −1 otherwise."""
        self.check_space(space)
        layer_e = space.layer_ids()
        unit_e = space.unit_ids()
        ids = self.group_ids.cpu()
        first_unit = torch.tensor([0] + [rec.num_units for rec in space.layers]).cumsum(0)

        def common(v: Tensor) -> Tensor:
            lo = torch.full((self.num_groups,), v.numel(), dtype=torch.long).scatter_reduce(0, ids, v, "amin")
            hi = torch.full((self.num_groups,), -1, dtype=torch.long).scatter_reduce(0, ids, v, "amax")
            return torch.where(lo == hi, lo, torch.full_like(lo, -1))

        layer = common(layer_e)
        unit = common(unit_e)
        unit = torch.where(unit >= 0, unit - first_unit[layer.clamp(min=0)], unit)
        dev = self.group_ids.device
        return self._replace(
            layer=layer.to(dev), unit=unit.to(dev), layer_names=tuple(rec.name for rec in space.layers)
        )

    # -- misc -------------------------------------------------------------------------------
    def check_space(self, space_or_dim) -> None:
        P = space_or_dim if isinstance(space_or_dim, int) else space_or_dim.dim
        if self.dim != P:
            raise ValueError(f"the partition covers {self.dim} parameters but the model has {P}")

    def _replace(self, **changes) -> Partition:
        """A new partition with some fields changed; the cached layout is kept when the group
        ids are unchanged."""
        fields: dict[str, Any] = {
            "group_ids": self.group_ids,
            "num_groups": self.num_groups,
            "kind": self.kind,
            "layer": self.layer,
            "unit": self.unit,
            "layer_names": self.layer_names,
        }
        fields.update(changes)
        new = Partition(**fields)
        if new.group_ids is self.group_ids:
            for key in ("_sizes", "_csr", "_blocks"):
                if key in self.__dict__:
                    new.__dict__[key] = self.__dict__[key]
        return new

    def to(self, device) -> Partition:
        """The partition with its tensors on ``device`` (the cached layout moved along)."""
        layer, unit = cast(Tensor, self.layer), cast(Tensor, self.unit)  # tensors from __post_init__ on
        new = Partition(
            self.group_ids.to(device), self.num_groups, self.kind, layer.to(device), unit.to(device), self.layer_names
        )
        if "_sizes" in self.__dict__:
            new.__dict__["_sizes"] = self._sizes
        if "_csr" in self.__dict__:
            order, offsets, sizes = self._csr
            new.__dict__["_csr"] = (order.to(device), offsets, sizes)
        return new

    def __repr__(self) -> str:
        s = self.sizes()
        return f"Partition({self.kind}, M={self.num_groups}, P={self.dim}, sizes {int(s.min())}..{int(s.max())})"


def _relabel(ids: Tensor, kind: str) -> Partition:
    """Dense ids 0..M-1 in order of first appearance."""
    uniq, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((len(uniq),), ids.numel(), dtype=torch.long).scatter_reduce(
        0, inverse, torch.arange(ids.numel()), reduce="amin"
    )
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    return Partition(rank[inverse], len(uniq), kind)
