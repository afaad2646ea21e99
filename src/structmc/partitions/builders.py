"""The builders of :mod:`structmc.partitions`: joint, factorized, round robin, random, by
layer, by neuron (node blocks), finer nodes, custom groups, and :func:`make_partition` by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np
import torch
from torch import Tensor

from ..schedules import check_int
from ..space import ParamSpace
from .partition import Partition, _relabel


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
    found, dim = _space_or_dim(space)
    return _annotated(Partition(torch.zeros(dim, dtype=torch.long), 1, "joint"), found)


def fully_factorized(space: ParamSpace | int) -> Partition:
    """M = P: every parameter its own group. ``space``: a ParamSpace or the dimension P."""
    found, dim = _space_or_dim(space)
    return _annotated(Partition(torch.arange(dim), dim, "factorized"), found)


def round_robin(space: ParamSpace | int, num_groups: int) -> Partition:
    """Flat index mod M — the structured-SGMCMC experiments' "ordered" grouping. ``space``: a
    ParamSpace (the groups then know their layers and units) or the dimension P."""
    found, dim = _space_or_dim(space)
    M = check_int("num_groups", num_groups)
    if not 1 <= M <= dim:
        raise ValueError(f"num_groups must lie in [1, {dim}], got {num_groups}")
    return _annotated(Partition(torch.arange(dim) % M, M, "round_robin"), found)


def random_partition(space: ParamSpace | int, num_groups: int, seed: int = 0) -> Partition:
    """Uniformly random balanced assignment (a random permutation of round-robin), so no
    group is empty — unlike independent uniform ids per parameter. ``space``: a ParamSpace or
    the dimension P."""
    found, dim = _space_or_dim(space)
    M = check_int("num_groups", num_groups)
    if not 1 <= M <= dim:
        raise ValueError(f"num_groups must lie in [1, {dim}], got {num_groups}")
    g = torch.Generator().manual_seed(check_int("seed", seed, 0))
    return _annotated(Partition((torch.arange(dim) % M)[torch.randperm(dim, generator=g)], M, "random"), found)


def _layer_names(space: ParamSpace) -> tuple[str, ...]:
    return tuple(rec.name for rec in space.layers)


def by_layer(space: ParamSpace) -> Partition:
    """One group per layer of ``space.layers`` (a module's weight and bias together)."""
    L = len(space.layers)
    units = torch.tensor([rec.num_units for rec in space.layers])
    return Partition(
        space.layer_ids(), L, "layer", torch.arange(L), torch.where(units == 1, 0, -1), _layer_names(space)
    )


def _chunk_ids(n: int, n_chunks: int) -> Tensor:
    """Chunk index of each of ``n`` positions under ``torch.tensor_split(·, n_chunks)``
    (the first ``n % n_chunks`` chunks one longer)."""
    q, r = divmod(n, n_chunks)
    pos = torch.arange(n)
    cut = r * (q + 1)
    return torch.where(pos < cut, pos // (q + 1), r + (pos - cut) // max(q, 1))


def _node_partition(
    space: ParamSpace, chunk_size: int | None, kind: str, num_chunks: Sequence[int] | None = None
) -> Partition:
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


def by_finer_nodes(
    space: ParamSpace, chunk_size: int | None = None, *, num_chunks: int | Sequence[int] | None = None
) -> Partition:
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
    size = check_int("chunk_size", chunk_size)
    if size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return _node_partition(space, size, "finer_nodes")


def custom(
    space: ParamSpace | int, groups: Tensor | Sequence[int] | Mapping[str, int] | Sequence[Sequence[str]]
) -> Partition:
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
            raise TypeError(
                "groups as name patterns: a {pattern: group} map or a list of groups, each a "
                f"list of patterns (e.g. [['fc1.*'], ['fc2.*']]), got {groups!r}"
            )
        groups = {pat: g for g, pats in enumerate(cast(Sequence[Sequence[str]], groups)) for pat in pats}
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
            raise ValueError(
                f"partition pattern {pattern!r} matches no parameter; the parameters are {', '.join(space.names)}"
            )
        if all(n in taken for n in hits):
            raise ValueError(
                f"partition pattern {pattern!r} matches only parameters that earlier patterns "
                f"already took ({', '.join(hits)}); first match wins"
            )
        taken.update(hits)


def make_partition(kind: str, space: ParamSpace, **kwargs) -> Partition:
    """By name: ``joint``, ``factorized``, ``layer``, ``neuron``, ``finer_nodes`` (chunk_size),
    ``round_robin`` / ``random`` (num_groups[, seed]); groups' layers and units filled in.
    A keyword the kind does not take (``num_groups`` for ``layer``) is a ``TypeError`` naming
    those it accepts; ``seed`` is accepted by every kind (only ``random`` uses it)."""
    builders = {
        "joint": lambda: fully_joint(space),
        "factorized": lambda: fully_factorized(space),
        "layer": lambda: by_layer(space),
        "neuron": lambda: by_neuron(space),
        "finer_nodes": lambda: by_finer_nodes(space, kwargs["chunk_size"]),
        "round_robin": lambda: round_robin(space, kwargs["num_groups"]),
        "random": lambda: random_partition(space, kwargs["num_groups"], kwargs.get("seed", 0)),
    }
    if kind not in builders:
        raise ValueError(f"unknown partition {kind!r}; choose from {sorted(builders)}")
    accepted, needed = _PARTITION_KEYS[kind]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError(
            f"partition {kind!r}: unknown keyword(s) {unknown}; it accepts "
            + (", ".join(accepted) if accepted else "none")
        )
    missing = [k for k in needed if k not in kwargs]
    if missing:
        raise TypeError(f"partition {kind!r} needs {', '.join(missing)}")
    return builders[kind]()


_PARTITION_KEYS = {  # kind -> (accepted keywords, required keywords); ``seed`` is accepted by every kind
    # (a run's structured settings carry one for the energy too) and used by ``random`` only
    "joint": (("seed",), ()),
    "factorized": (("seed",), ()),
    "layer": (("seed",), ()),
    "neuron": (("seed",), ()),
    "finer_nodes": (("chunk_size", "seed"), ("chunk_size",)),
    "round_robin": (("num_groups", "seed"), ("num_groups",)),
    "random": (("num_groups", "seed"), ("num_groups",)),
}
