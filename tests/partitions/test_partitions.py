"""Partition builders: the blocked-Gibbs MLP's groups, coverage, validation."""

from __future__ import annotations

import pytest
import torch
from support.nets import mlp

import structmc as sm
from structmc.partitions import Partition
from structmc.structured import (
    StructuredEnergy,
    by_finer_nodes,
    by_layer,
    by_neuron,
    custom,
    fully_factorized,
    fully_joint,
    node_blocks,
    random_partition,
    round_robin,
)


def test_partitions_of_the_blocked_gibbs_mlp():
    space = sm.ParamSpace.from_module(mlp([784, 10, 10, 10, 10]))
    assert space.dim == 8180
    layer = by_layer(space)
    assert layer.num_groups == 4 and layer.sizes().tolist() == [7850, 110, 110, 110]
    neuron = by_neuron(space)
    assert neuron.num_groups == 40
    assert neuron.sizes().tolist() == [785] * 10 + [11] * 30
    # neuron 3 of layer 0: row 3 of the weight and bias 3
    idx = neuron.members(3)
    w, b = space["0.weight"], space["0.bias"]
    assert idx.tolist() == list(range(w.offset + 3 * 784, w.offset + 4 * 784)) + [b.offset + 3]
    finer = by_finer_nodes(space, 10)
    assert finer.num_groups == 10 * 78 + 30  # the paper's 810 Metropolis blocks per sweep
    first = node_blocks(space, 10)[:78]
    assert [len(x) for x in first[:6]] == [11, 11, 11, 11, 11, 10]
    assert torch.equal(torch.cat(first), node_blocks(space)[0])


def test_partition_builders_cover_every_parameter_once():
    space = sm.ParamSpace.from_module(mlp([5, 4, 3]))
    P = space.dim
    for part in [
        fully_joint(P),
        fully_factorized(P),
        round_robin(P, 7),
        random_partition(P, 7, seed=1),
        by_layer(space),
        by_neuron(space),
        by_finer_nodes(space, 2),
        custom(space, [["0.*"], ["*"]]),
        custom(space, {"*.bias": 0, "*": 1}),
        custom(P, torch.arange(P) % 3),
    ]:
        assert int(part.sizes().sum()) == P
    assert round_robin(P, 7).group_ids[:9].tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1]
    assert random_partition(P, 7, seed=1).sizes().max() - random_partition(P, 7, seed=1).sizes().min() <= 1
    assert not torch.equal(random_partition(P, 7, seed=1).group_ids, random_partition(P, 7, seed=2).group_ids)


def test_invalid_partitions_are_rejected():
    space = sm.ParamSpace.from_module(mlp([5, 4, 3]))
    with pytest.raises(ValueError, match="empty groups"):
        Partition(torch.tensor([0, 0, 2]), 3)
    with pytest.raises(ValueError, match="group ids"):
        Partition(torch.tensor([0, 3]), 2)
    with pytest.raises(ValueError, match="matches no pattern"):
        custom(space, {"0.*": 0})
    with pytest.raises(ValueError, match="shape"):
        custom(space, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="num_groups"):
        round_robin(10, 11)
    energy = sm.LogDensityEnergy(lambda t, b: -(t * t).sum(), 4)
    with pytest.raises(ValueError, match="covers 3 parameters"):
        StructuredEnergy(energy, fully_joint(3))


def test_every_builder_takes_the_space():
    """``random_partition(space, 10)`` was a TypeError while ``by_layer(space)`` took it."""
    from torch import nn

    from structmc import ModuleEnergy
    from structmc.partitions import fully_factorized, fully_joint, random_partition, round_robin

    space = ModuleEnergy(nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))).space
    for build, args in ((random_partition, (10,)), (round_robin, (10,)), (fully_joint, ()), (fully_factorized, ())):
        from_space, from_dim = build(space, *args), build(space.dim, *args)
        assert torch.equal(from_space.group_ids, from_dim.group_ids)
        assert from_space.num_groups == from_dim.num_groups
        assert from_space.layer_names is not None  # annotated with the space's layers
    with pytest.raises(TypeError, match="ParamSpace.*or a dimension"):
        random_partition(torch.zeros(3), 2)
