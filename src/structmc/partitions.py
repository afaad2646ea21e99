"""Partitions of the flat parameter vector into M groups (blocks).

Partitions serve two methods: structured SGMCMC (:mod:`structmc.structured`, one factor of the
variational family per group) and blocked Metropolis-within-Gibbs (one block per group,
proposal scales and acceptance bookkeeping per block, unit or layer). Both live here so that
they read the same groups.

A :class:`Partition` is an integer group id per parameter (``group_ids: [P]``, values
``0..M-1``), validated on construction: every parameter belongs to exactly one group
(guaranteed by the representation) and no group is empty. Each group also knows, where it
lies inside one layer or one unit of the model, that layer (``layer: [M]``, an index into
``space.layers`` named by ``layer_names``) and unit (``unit: [M]``, the unit's index within its
layer); both are −1 where a group spans several (or where the builder had no space).

Group members are looked up through a compressed (CSR) layout computed once, on first use:
the group ids argsorted (stably, so each group's flat indices ascend) and the group offsets,
so :meth:`Partition.members` is a slice and :meth:`Partition.blocks` one split.

Layer and unit structure come from the parameter space (:attr:`ParamSpace.layers
<structmc.space.ParamSpace.layers>`, read from module types or, for spaces without a module,
parameter names; see :mod:`structmc.layers`): a unit (neuron, conv output channel, norm
channel) is its row of the weight — all its incoming weights — together with its bias entry,
the reference codes' "node block"; parameters outside every recognised layer have every
element as a unit of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from .schedules import check_int
from .space import ParamSpace

__all__ = ["Partition", "contiguous_index", "by_finer_nodes", "by_layer", "by_neuron", "custom", "fully_factorized", "fully_joint",
           "make_partition", "node_blocks", "random_partition", "round_robin"]


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
        return order[offsets[g]:offsets[g + 1]]

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
        k = int(self.layer[int(group)])
        return None if k < 0 or self.layer_names is None else self.layer_names[k]

    def annotate(self, space: ParamSpace) -> "Partition":
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
        return self._replace(layer=layer.to(dev), unit=unit.to(dev),
                             layer_names=tuple(rec.name for rec in space.layers))

    # -- misc -------------------------------------------------------------------------------
    def check_space(self, space_or_dim) -> None:
        P = space_or_dim if isinstance(space_or_dim, int) else space_or_dim.dim
        if self.dim != P:
            raise ValueError(f"the partition covers {self.dim} parameters but the model has {P}")

    def _replace(self, **changes) -> "Partition":
        """A new partition with some fields changed; the cached layout is kept when the group
        ids are unchanged."""
        fields = {"group_ids": self.group_ids, "num_groups": self.num_groups, "kind": self.kind,
                  "layer": self.layer, "unit": self.unit, "layer_names": self.layer_names}
        fields.update(changes)
        new = Partition(**fields)
        if new.group_ids is self.group_ids:
            for key in ("_sizes", "_csr", "_blocks"):
                if key in self.__dict__:
                    new.__dict__[key] = self.__dict__[key]
        return new

    def to(self, device) -> "Partition":
        """The partition with its tensors on ``device`` (the cached layout moved along)."""
        new = Partition(self.group_ids.to(device), self.num_groups, self.kind, self.layer.to(device),
                        self.unit.to(device), self.layer_names)
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
        0, inverse, torch.arange(ids.numel()), reduce="amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    return Partition(rank[inverse], len(uniq), kind)


# ---------------------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------------------
def _space_or_dim(space: ParamSpace | int) -> tuple[ParamSpace | None, int]:
    """Every builder takes the space (``by_layer(space)``, ``round_robin(space, M)``) or, for
    the builders that need no layer structure, a bare dimension P."""
    if isinstance(space, ParamSpace):
        return space, space.dim
    if isinstance(space, Tensor) or not isinstance(space, (int, np.integer)) or isinstance(space, bool):
        raise TypeError(f"expected a ParamSpace (energy.space) or a dimension P (int), got {type(space).__name__}")
    return None, check_int("dim", space)


def _annotated(partition: Partition, space: ParamSpace | None) -> Partition:
    return partition if space is None else partition.annotate(space)


def fully_joint(space: ParamSpace | int) -> Partition:
    """M = 1: the base sampler's posterior. ``space``: a ParamSpace or the dimension P."""
    space, dim = _space_or_dim(space)
    return _annotated(Partition(torch.zeros(dim, dtype=torch.long), 1, "joint"), space)


def fully_factorized(space: ParamSpace | int) -> Partition:
    """M = P: every parameter its own group. ``space``: a ParamSpace or the dimension P."""
    space, dim = _space_or_dim(space)
    return _annotated(Partition(torch.arange(dim), dim, "factorized"), space)


def round_robin(space: ParamSpace | int, num_groups: int) -> Partition:
    """Flat index mod M — the structured-SGMCMC experiments' "ordered" grouping. ``space``: a
    ParamSpace (the groups then know their layers and units) or the dimension P."""
    space, dim = _space_or_dim(space)
    M = check_int("num_groups", num_groups)
    if not 1 <= M <= dim:
        raise ValueError(f"num_groups must lie in [1, {dim}], got {num_groups}")
    return _annotated(Partition(torch.arange(dim) % M, M, "round_robin"), space)


def random_partition(space: ParamSpace | int, num_groups: int, seed: int = 0) -> Partition:
    """Uniformly random balanced assignment (a random permutation of round-robin), so no
    group is empty — unlike independent uniform ids per parameter. ``space``: a ParamSpace or
    the dimension P."""
    space, dim = _space_or_dim(space)
    M = check_int("num_groups", num_groups)
    if not 1 <= M <= dim:
        raise ValueError(f"num_groups must lie in [1, {dim}], got {num_groups}")
    g = torch.Generator().manual_seed(check_int("seed", seed, 0))
    return _annotated(Partition((torch.arange(dim) % M)[torch.randperm(dim, generator=g)], M, "random"), space)


def _layer_names(space: ParamSpace) -> tuple[str, ...]:
    return tuple(rec.name for rec in space.layers)


def by_layer(space: ParamSpace) -> Partition:
    """One group per layer of ``space.layers`` (a module's weight and bias together)."""
    L = len(space.layers)
    units = torch.tensor([rec.num_units for rec in space.layers])
    return Partition(space.layer_ids(), L, "layer", torch.arange(L), torch.where(units == 1, 0, -1),
                     _layer_names(space))


def _chunk_ids(n: int, n_chunks: int) -> Tensor:
    """Chunk index of each of ``n`` positions under ``torch.tensor_split(·, n_chunks)``
    (the first ``n % n_chunks`` chunks one longer)."""
    q, r = divmod(n, n_chunks)
    pos = torch.arange(n)
    cut = r * (q + 1)
    return torch.where(pos < cut, pos // (q + 1), r + (pos - cut) // max(q, 1))


def _node_partition(space: ParamSpace, chunk_size: int | None, kind: str,
                    num_chunks: Sequence[int] | None = None) -> Partition:
    """Node blocks (optionally chunked) as a partition, numbered like :func:`node_blocks`."""
    ids = torch.empty(space.dim, dtype=torch.long)
    layer_of, unit_of, next_id = [], [], 0
    for k, rec in enumerate(space.layers):
        rows = space.unit_rows(rec)  # [U, n]
        U, n = rows.shape
        if num_chunks is not None:
            n_chunks = min(n, int(num_chunks[k]))
        else:
            n_chunks = 1 if chunk_size is None else max(1, n // int(chunk_size))
        local = torch.arange(U).unsqueeze(1) * n_chunks + _chunk_ids(n, n_chunks)  # [U, n]
        ids[rows] = next_id + local
        layer_of.append(torch.full((U * n_chunks,), k, dtype=torch.long))
        unit_of.append(torch.arange(U).repeat_interleave(n_chunks))
        next_id += U * n_chunks
    return Partition(ids, next_id, kind, torch.cat(layer_of), torch.cat(unit_of), _layer_names(space))


def node_blocks(space: ParamSpace, chunk_size: int | None = None) -> list[Tensor]:
    """Flat indices of every node block, in order: per layer, per unit, the unit's incoming
    weights (row-major) then its bias (every element its own block in ``"other"`` layers);
    with ``chunk_size`` each block is split into ``max(1, len // chunk_size)`` nearly equal
    consecutive sub-blocks (larger ones first), as in the blocked-Gibbs reference (785
    indices, chunk 10 -> 78 sub-blocks, five of size 11). Group ``g`` of
    :func:`by_neuron` / :func:`by_finer_nodes` holds the same indices, ascending."""
    if chunk_size is not None and check_int("chunk_size", chunk_size) < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    blocks: list[Tensor] = []
    for rec in space.layers:
        rows = space.unit_rows(rec)  # [U, n]
        U, n = rows.shape
        n_chunks = 1 if chunk_size is None else max(1, n // int(chunk_size))
        if n_chunks == 1:
            blocks.extend(rows.unbind(0))
        else:  # torch.tensor_split(row, n_chunks) for every row, in one split
            q, r = divmod(n, n_chunks)
            blocks.extend(rows.reshape(-1).split(([q + 1] * r + [q] * (n_chunks - r)) * U))
    return blocks


def by_neuron(space: ParamSpace) -> Partition:
    """One group per unit (neuron / channel): its incoming weights and its bias."""
    return _node_partition(space, None, "neuron")


def by_finer_nodes(space: ParamSpace, chunk_size: int | None = None, *,
                   num_chunks: int | Sequence[int] | None = None) -> Partition:
    """Each unit's incoming parameters split into consecutive, nearly equal sub-blocks
    (larger ones first; see :func:`node_blocks`), either of about ``chunk_size`` each (the
    blocked-Gibbs reference code: 785 → 78 sub-blocks for chunk 10, 810 blocks for
    MLP(784,10,10,10,10)) or into ``num_chunks`` per unit — one number for every layer or one
    per layer of ``space.layers`` (the paper's text: ``num_chunks=[10, 1, 1, 1]``, 78/79
    parameters per first-layer sub-block, 130 blocks)."""
    if (chunk_size is None) == (num_chunks is None):
        raise ValueError("give either chunk_size or num_chunks")
    if num_chunks is not None:
        L = len(space.layers)
        if isinstance(num_chunks, (int, float)):
            per_layer = [check_int("num_chunks", num_chunks)] * L
        elif isinstance(num_chunks, Sequence) and not isinstance(num_chunks, str):
            per_layer = [check_int("num_chunks", c) for c in num_chunks]
        else:
            raise TypeError(f"num_chunks must be an integer or one integer per layer, got {num_chunks!r}")
        if len(per_layer) != L or min(per_layer) < 1:
            raise ValueError(f"num_chunks needs a positive integer or one per layer ({L}), got {num_chunks!r}")
        return _node_partition(space, None, "finer_nodes", per_layer)
    if check_int("chunk_size", chunk_size) < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return _node_partition(space, int(chunk_size), "finer_nodes")


def custom(space: ParamSpace | int,
           groups: Tensor | Sequence[int] | Mapping[str, int] | Sequence[Sequence[str]]) -> Partition:
    """From an explicit group-id vector, a ``{name pattern: group}`` map (first match wins),
    or a list of groups given as lists of name patterns. Every parameter must be covered.
    Group ids are relabelled densely in order of first appearance; with a space, the groups'
    layers and units are filled in (:meth:`Partition.annotate`)."""
    if isinstance(groups, Tensor) or (isinstance(groups, Sequence) and groups and isinstance(groups[0], int)):
        ids = torch.as_tensor(groups, dtype=torch.long)
        P = space if isinstance(space, int) else space.dim
        if ids.shape != (P,):
            raise ValueError(f"a group-id vector must have shape [{P}], got {tuple(ids.shape)}")
        part = _relabel(ids, "custom")
        return part if isinstance(space, int) else part.annotate(space)
    if isinstance(space, int):
        raise ValueError("name patterns need a ParamSpace")
    if not isinstance(groups, Mapping):
        if isinstance(groups, str) or any(isinstance(pats, str) for pats in groups):
            raise TypeError("groups as name patterns: a {pattern: group} map or a list of groups, each a "
                            f"list of patterns (e.g. [['fc1.*'], ['fc2.*']]), got {groups!r}")
        groups = {pat: g for g, pats in enumerate(groups) for pat in pats}
    ids = torch.full((space.dim,), -1, dtype=torch.long)
    for info, g in space.first_match(groups, "every parameter needs a group"):
        ids[info.slice] = int(g)
    _check_patterns_used(space, groups)
    return _relabel(ids, "custom").annotate(space)


def _check_patterns_used(space: ParamSpace, groups: Mapping[str, object]) -> None:
    """Every pattern must take at least one parameter: a pattern that matches no name (a typo)
    or only names an earlier pattern already took would otherwise be dropped silently."""
    import fnmatch

    taken: set[str] = set()
    for pattern in groups:
        hits = [n for n in space.names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(f"partition pattern {pattern!r} matches no parameter; the parameters are "
                             f"{', '.join(space.names)}")
        if all(n in taken for n in hits):
            raise ValueError(f"partition pattern {pattern!r} matches only parameters that earlier patterns "
                             f"already took ({', '.join(hits)}); first match wins")
        taken.update(hits)


def make_partition(kind: str, space: ParamSpace, **kwargs) -> Partition:
    """By name: ``joint``, ``factorized``, ``layer``, ``neuron``, ``finer_nodes`` (chunk_size),
    ``round_robin`` / ``random`` (num_groups[, seed]); groups' layers and units filled in.
    A keyword the kind does not take (``num_groups`` for ``layer``) is a ``TypeError`` naming
    those it accepts; ``seed`` is accepted by every kind (only ``random`` uses it)."""
    builders = {
        "joint": lambda: fully_joint(space), "factorized": lambda: fully_factorized(space),
        "layer": lambda: by_layer(space), "neuron": lambda: by_neuron(space),
        "finer_nodes": lambda: by_finer_nodes(space, kwargs["chunk_size"]),
        "round_robin": lambda: round_robin(space, kwargs["num_groups"]),
        "random": lambda: random_partition(space, kwargs["num_groups"], kwargs.get("seed", 0)),
    }
    if kind not in builders:
        raise ValueError(f"unknown partition {kind!r}; choose from {sorted(builders)}")
    accepted, needed = _PARTITION_KEYS[kind]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError(f"partition {kind!r}: unknown keyword(s) {unknown}; it accepts "
                        + (", ".join(accepted) if accepted else "none"))
    missing = [k for k in needed if k not in kwargs]
    if missing:
        raise TypeError(f"partition {kind!r} needs {', '.join(missing)}")
    return builders[kind]()


_PARTITION_KEYS = {  # kind -> (accepted keywords, required keywords); ``seed`` is accepted by every kind
    # (a run's structured settings carry one for the energy too) and used by ``random`` only
    "joint": (("seed",), ()), "factorized": (("seed",), ()), "layer": (("seed",), ()), "neuron": (("seed",), ()),
    "finer_nodes": (("chunk_size", "seed"), ("chunk_size",)),
    "round_robin": (("num_groups", "seed"), ("num_groups",)),
    "random": (("num_groups", "seed"), ("num_groups",)),
}
