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

from .builders import (
    _PARTITION_KEYS,
    _annotated,
    _check_patterns_used,
    _chunk_ids,
    _layer_names,  # noqa: F401
    _node_partition,
    _space_or_dim,
    by_finer_nodes,
    by_layer,
    by_neuron,
    custom,
    fully_factorized,
    fully_joint,
    make_partition,
    node_blocks,
    random_partition,
    round_robin,
)
from .partition import Partition, _relabel, contiguous_index  # noqa: F401

# one home for the names of this package, whichever file defines them (partition: the object;
# builders: the ways to make one), as when it was one module: a partition is stored in energies,
# hashed into run fingerprints and pickled under structmc.partitions.Partition
for _obj in (
    Partition,
    contiguous_index,
    by_finer_nodes,
    by_layer,
    by_neuron,
    custom,
    fully_factorized,
    fully_joint,
    make_partition,
    node_blocks,
    random_partition,
    round_robin,
):
    _obj.__module__ = __name__
del _obj

__all__ = [
    "Partition",
    "contiguous_index",
    "by_finer_nodes",
    "by_layer",
    "by_neuron",
    "custom",
    "fully_factorized",
    "fully_joint",
    "make_partition",
    "node_blocks",
    "random_partition",
    "round_robin",
]
