"""Partitions of the flat parameter vector into M groups (shared by structured SGMCMC and
blocked Gibbs).

A :class:`Partition` is an integer group id per parameter (``group_ids: [P]``, values
``0..M-1``). It is validated on construction: every parameter belongs to exactly one group
(guaranteed by the representation) and no group is empty.

Layer and neuron structure are read from parameter names: parameters ``<prefix>.weight`` and
``<prefix>.bias`` form one layer; a neuron (output unit or conv output channel) is row ``j`` of
the weight (all its incoming weights) together with bias ``j`` — the reference codes'
"node block". Parameters of other names form a layer of their own, each element its own node.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
from torch import Tensor

from ..space import ParamSpace


@dataclass(frozen=True)
class Partition:
    group_ids: Tensor  # [P] long
    num_groups: int
    kind: str = "custom"

    def __post_init__(self):
        ids = self.group_ids
        if ids.dim() != 1 or ids.dtype != torch.long:
            raise ValueError("group_ids must be a 1-d long tensor")
        if ids.numel() == 0:
            raise ValueError("a partition needs at least one parameter")
        if int(ids.min()) < 0 or int(ids.max()) >= self.num_groups:
            raise ValueError(f"group ids must lie in [0, {self.num_groups}), got [{int(ids.min())}, {int(ids.max())}]")
        sizes = self.sizes()
        if bool((sizes == 0).any()):
            empty = torch.nonzero(sizes == 0).flatten().tolist()[:10]
            raise ValueError(f"empty groups {empty} (of {self.num_groups}); every group needs a parameter")

    @property
    def dim(self) -> int:
        return self.group_ids.numel()

    def sizes(self) -> Tensor:
        return torch.bincount(self.group_ids.cpu(), minlength=self.num_groups)

    def members(self, group: int) -> Tensor:
        return torch.nonzero(self.group_ids == group).flatten()

    def masks(self, dtype=torch.float32, device=None) -> Tensor:
        """One-hot ``[M, P]`` group masks (memory M·P: use for moderate M only)."""
        eye = torch.eye(self.num_groups, dtype=dtype, device=device)
        return eye[:, self.group_ids.to(device)]

    def check_space(self, space_or_dim) -> None:
        P = space_or_dim if isinstance(space_or_dim, int) else space_or_dim.dim
        if self.dim != P:
            raise ValueError(f"the partition covers {self.dim} parameters but the model has {P}")

    def to(self, device) -> "Partition":
        return Partition(self.group_ids.to(device), self.num_groups, self.kind)

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


def _layers(space: ParamSpace) -> "OrderedDict[str, list]":
    layers: "OrderedDict[str, list]" = OrderedDict()
    for info in space.params:
        prefix, _, leaf = info.name.rpartition(".")
        key = prefix if leaf in ("weight", "bias") and prefix else info.name
        layers.setdefault(key, []).append(info)
    return layers


# ---------------------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------------------
def fully_joint(dim: int) -> Partition:
    """M = 1: the base sampler's posterior."""
    return Partition(torch.zeros(int(dim), dtype=torch.long), 1, "joint")


def fully_factorized(dim: int) -> Partition:
    """M = P: every parameter its own group."""
    return Partition(torch.arange(int(dim)), int(dim), "factorized")


def round_robin(dim: int, num_groups: int) -> Partition:
    """Flat index mod M — the structured-SGMCMC experiments' "ordered" grouping."""
    dim, M = int(dim), int(num_groups)
    if not 1 <= M <= dim:
        raise ValueError(f"num_groups must lie in [1, {dim}], got {num_groups}")
    return Partition(torch.arange(dim) % M, M, "round_robin")


def random_partition(dim: int, num_groups: int, seed: int = 0) -> Partition:
    """Uniformly random balanced assignment (a random permutation of round-robin), so no
    group is empty — unlike independent uniform ids per parameter."""
    dim, M = int(dim), int(num_groups)
    if not 1 <= M <= dim:
        raise ValueError(f"num_groups must lie in [1, {dim}], got {num_groups}")
    g = torch.Generator().manual_seed(int(seed))
    return Partition((torch.arange(dim) % M)[torch.randperm(dim, generator=g)], M, "random")


def by_layer(space: ParamSpace) -> Partition:
    """One group per layer (weight and bias of a module together)."""
    ids = torch.empty(space.dim, dtype=torch.long)
    for g, infos in enumerate(_layers(space).values()):
        for info in infos:
            ids[info.slice] = g
    return Partition(ids, len(_layers(space)), "layer")


def node_blocks(space: ParamSpace, chunk_size: int | None = None) -> list[Tensor]:
    """Flat indices of every node block, in order: per layer, per neuron, the neuron's
    incoming weights (row-major) then its bias; with ``chunk_size`` each block is split into
    ``max(1, len // chunk_size)`` nearly equal consecutive sub-blocks (larger ones first), as
    in the blocked-Gibbs reference (785 indices, chunk 10 -> 78 sub-blocks, five of size 11)."""
    blocks: list[Tensor] = []
    for infos in _layers(space).values():
        by_leaf = {i.name.rpartition(".")[2]: i for i in infos}
        w, b = by_leaf.get("weight"), by_leaf.get("bias")
        if w is None or len(w.shape) == 0 or (b is not None and b.shape != (w.shape[0],)) or len(infos) > 2:
            for info in infos:  # no neuron structure: every element is a node
                blocks.extend(torch.arange(info.offset, info.offset + info.numel).split(1))
            continue
        out = w.shape[0]
        fan_in = w.numel // out
        rows = torch.arange(w.offset, w.offset + w.numel).view(out, fan_in)
        if b is not None:
            rows = torch.cat([rows, torch.arange(b.offset, b.offset + out).unsqueeze(1)], 1)
        for row in rows:
            if chunk_size is None:
                blocks.append(row)
            else:
                n_chunks = max(1, row.numel() // int(chunk_size))
                blocks.extend(torch.tensor_split(row, n_chunks))
    return blocks


def _from_blocks(dim: int, blocks: Sequence[Tensor], kind: str) -> Partition:
    ids = torch.full((dim,), -1, dtype=torch.long)
    for g, idx in enumerate(blocks):
        ids[idx] = g
    return Partition(ids, len(blocks), kind)


def by_neuron(space: ParamSpace) -> Partition:
    """One group per neuron: its incoming weights and its bias."""
    return _from_blocks(space.dim, node_blocks(space), "neuron")


def by_finer_nodes(space: ParamSpace, chunk_size: int) -> Partition:
    """Each neuron's incoming parameters split into sub-blocks of about ``chunk_size``."""
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return _from_blocks(space.dim, node_blocks(space, int(chunk_size)), "finer_nodes")


def custom(space: ParamSpace | int, groups: Tensor | Sequence[int] | Mapping[str, int] | Sequence[Sequence[str]]) -> Partition:
    """From an explicit group-id vector, a ``{name pattern: group}`` map (first match wins),
    or a list of groups given as lists of name patterns. Every parameter must be covered."""
    if isinstance(groups, Tensor) or (isinstance(groups, Sequence) and groups and isinstance(groups[0], int)):
        ids = torch.as_tensor(groups, dtype=torch.long)
        P = space if isinstance(space, int) else space.dim
        if ids.shape != (P,):
            raise ValueError(f"a group-id vector must have shape [{P}], got {tuple(ids.shape)}")
        return _relabel(ids, "custom")
    if isinstance(space, int):
        raise ValueError("name patterns need a ParamSpace")
    if not isinstance(groups, Mapping):
        groups = {pat: g for g, pats in enumerate(groups) for pat in pats}
    ids = torch.full((space.dim,), -1, dtype=torch.long)
    for info, g in space.first_match(groups, "every parameter needs a group"):
        ids[info.slice] = int(g)
    return _relabel(ids, "custom")


def make_partition(kind: str, space: ParamSpace, **kwargs) -> Partition:
    """By name: ``joint``, ``factorized``, ``layer``, ``neuron``, ``finer_nodes`` (chunk_size),
    ``round_robin`` / ``random`` (num_groups[, seed])."""
    P = space.dim
    builders = {
        "joint": lambda: fully_joint(P), "factorized": lambda: fully_factorized(P),
        "layer": lambda: by_layer(space), "neuron": lambda: by_neuron(space),
        "finer_nodes": lambda: by_finer_nodes(space, kwargs["chunk_size"]),
        "round_robin": lambda: round_robin(P, kwargs["num_groups"]),
        "random": lambda: random_partition(P, kwargs["num_groups"], kwargs.get("seed", 0)),
    }
    if kind not in builders:
        raise ValueError(f"unknown partition {kind!r}; choose from {sorted(builders)}")
    return builders[kind]()
